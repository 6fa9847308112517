"""The inference layer: apply a trained ``model.pt`` to a whole shot on the farm, one frame per chunk.

Two ways in:

* ``cuetrain submit <train args> --infer-input DIR --infer-output DIR [--infer-chunk N]``: the
  training job gets a second ``Shell`` layer, ``infer``, with a pyoutline LAYER_ON_LAYER
  dependency on ``train`` (its frames wait in DEPEND until every ``train`` frame is done; Cuebot
  satisfies the depend when the last frame of ``train`` succeeds, FrameCompleteHandler
  ``satisfyDependsAndCompleteLayerAndJob``). It runs ``RUN_DIR/model.pt``.
* ``cuetrain submit-infer --model RUN_DIR/model.pt --input DIR --output DIR ...``: a job with the
  ``infer`` layer alone, for a model trained earlier.

The layer's frame range is the frame numbers of the input sequence at submit time (``1001-1100``,
or runs joined by commas when it has gaps), chunked by ``chunk``. Each frame runs::

    /abs/python -u -m cue_plugin.infer_layer --model M --input IN --output OUT \\
        --first '#FRAME_START#' --last '#FRAME_END#'

Cuebot replaces ``#FRAME_START#``/``#FRAME_END#`` with the first and last frame of the chunk
(DispatchSupportService.prepareRqdRunFrame), and the frame hands them to ``cuetrain infer``
(``trainer.infer.infer_sequence``), which writes every output with its input's file name, format,
bit depth, channels and metadata and applies the colour spaces recorded in ``model.json``. Before
that it maps RQD's reservation to ``CUDA_VISIBLE_DEVICES``/``OMP_NUM_THREADS`` as training frames
do (``cue_plugin.frame.device_env``).

pyoutline and pycue are imported only inside the functions that need them.
"""

from __future__ import annotations

import argparse
import getpass
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from cue_plugin.spec import FarmError, JobHandle, env_from_pairs

if TYPE_CHECKING:
    import outline

    from cue_plugin.spec import TrainingJob

#: Name of the layer (the depend and CueGUI show it).
LAYER_NAME = "infer"
#: Frames per chunk unless told [frames].
DEFAULT_CHUNK = 10
#: The Cuebot tokens the layer command uses as whole arguments.
_TOKENS = ("#FRAME_START#", "#FRAME_END#")


@dataclass(frozen=True)
class InferenceLayer:
    """What the ``infer`` layer does.

    Attributes:
        model: absolute path of the TorchScript ``model.pt`` the frames load (may not exist yet
            when the layer follows ``train`` in the same job).
        input_dir: absolute path of the input image sequence folder (shared storage).
        output_dir: absolute path of the output folder (shared storage; frames create it).
        frames: frame numbers of the input sequence, ascending.
        chunk: input frames per farm frame [frames].
    """

    model: str
    input_dir: str
    output_dir: str
    frames: tuple[int, ...]
    chunk: int = DEFAULT_CHUNK

    def __post_init__(self) -> None:
        if not isinstance(self.chunk, int) or self.chunk < 1:
            raise FarmError(f"infer chunk={self.chunk!r} must be a whole number >= 1 (frames per farm frame)")
        if not self.frames:
            raise FarmError(f"the input sequence {self.input_dir} holds no frames to infer")

    @property
    def frame_range(self) -> str:
        """The layer's frame range: ``a-b`` runs joined by commas (``1001-1050,1061-1100``)."""
        return frame_range(self.frames)


@dataclass(frozen=True)
class InferenceJob:
    """A job of the ``infer`` layer alone (``cuetrain submit-infer``). Fields as in TrainingJob."""

    infer: InferenceLayer
    show: str
    shot: str
    user: str
    name: str = "cuetrain_infer"
    priority: int = 100
    max_retries: int = 1  # Cuebot lowers more to 1 (JobSpec.FRAME_RETRIES_MAX; tests/cue_plugin/test_cuebot_limits.py)
    service: str = "cuetrain"
    tags: tuple[str, ...] = ()
    cores: float = 1.0
    memory_mb: int = 4096
    gpus: int = 0
    gpu_memory_mb: int = 0
    extra_env: Mapping[str, str] = field(default_factory=dict)


def frame_range(frames: Sequence[int]) -> str:
    """Frame numbers as a Cuebot FrameSet string of runs: ``[1, 2, 3, 7, 9, 10]`` -> ``"1-3,7,9-10"``."""
    numbers = sorted(set(frames))
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def make_layer(model: str | Path, input_dir: str | Path, output_dir: str | Path,
               chunk: int = DEFAULT_CHUNK) -> InferenceLayer:
    """An InferenceLayer for the sequence in ``input_dir`` (read now for its frame numbers); paths made absolute.

    Raises:
        FarmError: the input folder is missing, holds no frame sequence, or a path a job spec cannot carry.
    """
    from trainer.images import DataError, find_sequence

    try:
        frames = tuple(find_sequence(input_dir))
    except DataError as exc:
        raise FarmError(f"--infer-input/--input: {exc}") from None
    paths = [str(Path(p).expanduser().absolute()) for p in (model, input_dir, output_dir)]
    return InferenceLayer(*paths, frames=frames, chunk=chunk)


def frame_argv(infer: InferenceLayer, python: str | None = None) -> list[str]:
    """The argv every infer frame runs (before quoting); Cuebot replaces the two tokens."""
    return [python or sys.executable, "-u", "-m", "cue_plugin.infer_layer", "--model", infer.model,
            "--input", infer.input_dir, "--output", infer.output_dir, "--first", "#FRAME_START#",
            "--last", "#FRAME_END#"]


def _command(infer: InferenceLayer, python: str | None) -> str:
    from cue_plugin.builder import check_argument

    argv = frame_argv(infer, python)
    for arg in argv:
        if arg not in _TOKENS:
            check_argument(arg)
    return " ".join(shlex.quote(a) for a in argv)


def _env(extra_env: Mapping[str, str]) -> dict[str, str]:
    from cue_plugin.builder import check_argument

    for value in extra_env.values():
        check_argument(str(value))
    return dict(sorted({"PYTHONUNBUFFERED": "1", **extra_env}.items()))


def add_layer(ol: "outline.Outline", infer: InferenceLayer, resources: Any, *, python: str | None = None,
              after: Any = None) -> Any:
    """Add the ``infer`` Shell layer to ``ol``; with ``after`` (a layer of ``ol``) a LAYER_ON_LAYER depend on it.

    Args:
        ol: the outline.
        infer: what the layer runs.
        resources: a TrainingJob or InferenceJob: service, tags, cores, memory, GPUs and extra_env.
        python: interpreter path the frames run (default ``sys.executable``).
        after: the layer that must finish first (the ``train`` layer), or None.

    Raises:
        FarmError: a path or variable a job spec cannot carry.
    """
    from outline.depend import DependType
    from outline.modules.shell import Shell

    args: dict = dict(command=_command(infer, python), range=infer.frame_range, chunk=infer.chunk,
                      cores=resources.cores, memory=f"{resources.memory_mb}m", service=resources.service,
                      env=_env(resources.extra_env))
    if resources.tags:
        args["tags"] = list(resources.tags)
    if resources.gpus or resources.gpu_memory_mb:
        args["gpus"] = resources.gpus or 1
        args["gpu_memory"] = f"{resources.gpu_memory_mb}m" if resources.gpu_memory_mb else "1g"
    layer = Shell(LAYER_NAME, **args)
    ol.add_layer(layer)
    if after is not None:
        layer.depend_on(after, DependType.LayerOnLayer)
    layer.check_required_args()
    return layer


def dry_run(job: InferenceJob, *, python: str | None = None) -> str:
    """The job spec XML of an inference-only job; contacts no server.

    Raises:
        FarmError: see :func:`add_layer`.
    """
    import outline
    import outline.constants
    from outline.cuerun import OutlineLauncher

    ol = outline.Outline(name=job.name, show=job.show, shot=job.shot, user=job.user)
    add_layer(ol, job.infer, job, python=python)
    ol.set_mode(outline.constants.OUTLINE_MODE_READY)  # no setup(): frames run our command, see builder
    launcher = OutlineLauncher(ol, user=job.user, priority=job.priority, maxretries=job.max_retries,
                               pause=False, nomail=True)
    return launcher.serialize(use_pycuerun=False)


def with_training(job: "TrainingJob", ol: "outline.Outline", train_layer: Any, python: str | None) -> None:
    """Add ``job.infer`` after ``train_layer`` (cue_plugin.builder calls this when the job has one)."""
    add_layer(ol, job.infer, job, python=python, after=train_layer)


# -- command line ------------------------------------------------------------------------------


def add_infer_arguments(parser: argparse.ArgumentParser) -> None:
    """``--infer-input``, ``--infer-output``, ``--infer-chunk`` for ``cuetrain submit``."""
    g = parser.add_argument_group("inference layer (runs after training, in the same job)")
    g.add_argument("--infer-input", help="image sequence folder the trained model is applied to")
    g.add_argument("--infer-output", help="output folder (same file names, format and metadata as the input)")
    g.add_argument("--infer-chunk", type=int, default=DEFAULT_CHUNK,
                   help=f"input frames per farm frame (default {DEFAULT_CHUNK})")


def layer_from_args(ns: argparse.Namespace, run_dir: str) -> InferenceLayer | None:
    """The inference layer ``cuetrain submit`` asked for, or None (model: ``RUN_DIR/model.pt``).

    Raises:
        FarmError: only one of --infer-input/--infer-output, or a bad input folder.
    """
    given = (getattr(ns, "infer_input", None), getattr(ns, "infer_output", None))
    if not any(given):
        return None
    return layer_from_folders(given[0] or "", given[1] or "", run_dir, ns.infer_chunk)


def layer_from_folders(input_dir: str, output_dir: str, run_dir: str, chunk: int = DEFAULT_CHUNK) -> InferenceLayer:
    """The inference layer that applies ``RUN_DIR/model.pt`` to ``input_dir`` (CLI and submit dialog).

    Raises:
        FarmError: one of the folders missing, or a bad input folder.
    """
    if not (input_dir and output_dir):
        raise FarmError("--infer-input and --infer-output go together; give both (or neither)")
    from trainer.rundir import RunPaths

    return make_layer(RunPaths.of(run_dir).model, input_dir, output_dir, chunk)


def add_submit_infer_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``cuetrain submit-infer`` subcommand (cue_plugin.cli dispatches to :func:`submit_infer`)."""
    s = sub.add_parser("submit-infer", help="submit an inference layer for a trained model.pt")
    s.add_argument("--model", required=True, help="RUN_DIR/model.pt of a finished run")
    s.add_argument("--input", required=True, help="image sequence folder to process")
    s.add_argument("--output", required=True, help="output folder (same file names, format and metadata)")
    s.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, help=f"input frames per farm frame ({DEFAULT_CHUNK})")
    s.add_argument("--template", help="farm template for service, tags, cores, memory, GPUs, retries")
    for flag in ("--show", "--shot", "--user", "--name"):
        s.add_argument(flag)
    s.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra frame environment")
    s.add_argument("--dry-run", action="store_true", help="print the job spec XML instead of submitting")
    return s


def job_from_args(ns: argparse.Namespace) -> InferenceJob:
    """The InferenceJob of ``cuetrain submit-infer`` (template values for resources and retries).

    Raises:
        FarmError: missing model, show or shot; a bad template, input folder or ``--env`` pair.
    """
    from cue_plugin import templates
    from trainer.envvars import read_farm_env

    if not Path(ns.model).is_file():
        raise FarmError(f"--model {ns.model} does not exist; pass RUN_DIR/model.pt of a finished run")
    farm_env = read_farm_env()
    show, shot = ns.show or farm_env.show, ns.shot or farm_env.shot
    if not show or not shot:
        raise FarmError("missing --show/--shot (or SHOW/SHOT in the environment)")
    values = dict(templates.load_template(ns.template).values) if ns.template else {}
    keep = {k: v for k, v in values.items() if k in ("service", "tags", "cores", "memory_mb", "gpus",
                                                       "gpu_memory_mb", "max_retries", "priority")}
    env = env_from_pairs(ns.env)
    name = ns.name or templates.default_name(str(Path(ns.output))).replace("cuetrain_", "cuetrain_infer_", 1)
    return InferenceJob(infer=make_layer(ns.model, ns.input, ns.output, ns.chunk), show=show, shot=shot,
                        user=ns.user or getpass.getuser(), name=name, extra_env=env, **keep)


def submit_infer(ns: argparse.Namespace, farm: Any) -> int:
    """``cuetrain submit-infer``: print the spec (``--dry-run``) or launch it through ``farm.launch_spec``.

    With ``--json`` stdout is one object (:mod:`cue_plugin.jsonout`): ``{"spec": XML}`` for ``--dry-run``,
    else ``{"submitted": handle, "frames": N, "chunk": N}`` (what :class:`gui.farm_process.ProcessFarm` reads).
    """
    from cue_plugin import jsonout

    job = job_from_args(ns)
    spec = dry_run(job, python=getattr(farm, "python", None))
    if ns.dry_run:
        return jsonout.emit({"spec": spec}) if getattr(ns, "json", False) else (print(spec) or 0)
    handle: JobHandle = farm.launch_spec(spec, user=job.user)
    if getattr(ns, "json", False):
        return jsonout.emit({"submitted": jsonout.handle_dict(handle), "frames": len(job.infer.frames),
                             "chunk": job.infer.chunk})
    print(f"submitted {handle.job_name} (id {handle.job_id}): {len(job.infer.frames)} input frames in "
          f"chunks of {job.infer.chunk}")
    return 0


# -- the frame ---------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Frame entry point: RQD's reservation -> ``CUDA_VISIBLE_DEVICES``/``OMP_NUM_THREADS``, then this process
    becomes ``python -u -m trainer.cli infer ARGS`` (``os.execve``: the same process for RQD, which tracks and
    kills it; the front door's parsing, errors and exit codes; and no import of ``trainer.cli`` from here, so
    the CLI has no import circle back into it).

    Raises:
        OSError: the interpreter cannot be executed (Python then exits 1 with the traceback).
    """
    from cue_plugin.frame import device_env
    from trainer.envvars import read_cue_env, read_farm_env

    env = {**os.environ, **device_env(read_cue_env(), read_farm_env().omp_num_threads)}  # before torch starts
    args = list(sys.argv[1:] if argv is None else argv)
    os.execve(sys.executable, [sys.executable, "-u", "-m", "trainer.cli", "infer", *args], env)
    return 1  # not reached: execve returns only by raising


if __name__ == "__main__":
    sys.exit(main())

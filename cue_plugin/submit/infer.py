"""The inference layer's job spec XML: apply a trained ``model.pt`` to a whole shot on the farm, one frame per chunk.

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
(``trainer.export.infer.infer_sequence``), which writes every output with its input's file name, format,
bit depth, channels and metadata and applies the colour spaces recorded in ``model.json``. Before
that it maps RQD's reservation to ``CUDA_VISIBLE_DEVICES``/``OMP_NUM_THREADS`` as training frames
do (``cue_plugin.node.frame.device_env``). The frame's code is :mod:`cue_plugin.node.infer_frame`; the
``submit-infer`` command and the helpers the CLI and the submit dialog use are :mod:`cue_plugin.submit.infer_cli`;
:class:`~cue_plugin.submit.spec.InferenceLayer` and :class:`~cue_plugin.submit.spec.InferenceJob` are in the spec.

pyoutline is imported only inside the functions that need it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from cue_plugin.names import INFER_LAYER as LAYER_NAME
from cue_plugin.submit.command import check_argument, shell_command
from cue_plugin.submit.spec import DEFAULT_CHUNK, FarmError, InferenceJob, InferenceLayer, JobResources

if TYPE_CHECKING:
    import outline

    from cue_plugin.submit.spec import TrainingJob

#: The Cuebot tokens the layer command uses as whole arguments.
_TOKENS = ("#FRAME_START#", "#FRAME_END#")


def make_layer(model: str | Path, input_dir: str | Path, output_dir: str | Path,
               chunk: int = DEFAULT_CHUNK) -> InferenceLayer:
    """An InferenceLayer for the sequence in ``input_dir`` (read now for its frame numbers); paths made absolute.

    Raises:
        FarmError: the input folder is missing, holds no frame sequence, or a path a job spec cannot carry.
    """
    from trainer.data.images import DataError
    from trainer.data.sequences import find_sequence

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
    return shell_command(frame_argv(infer, python), _TOKENS)


def _env(extra_env: Mapping[str, str]) -> dict[str, str]:
    for value in extra_env.values():
        check_argument(str(value))
    return dict(sorted({"PYTHONUNBUFFERED": "1", **extra_env}.items()))


def add_layer(ol: "outline.Outline", infer: InferenceLayer, resources: JobResources, *, python: str | None = None,
              after: Any = None) -> Any:
    """Add the ``infer`` Shell layer to ``ol``; with ``after`` (a layer of ``ol``) a LAYER_ON_LAYER depend on it.

    Args:
        ol: the outline.
        infer: what the layer runs.
        resources: the job (a TrainingJob or an InferenceJob): service, tags, cores, memory, GPUs and extra_env.
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
    """Add ``job.infer`` after ``train_layer`` (cue_plugin.submit.builder calls this when the job has one)."""
    add_layer(ol, job.infer, job, python=python, after=train_layer)

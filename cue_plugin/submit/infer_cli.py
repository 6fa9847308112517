"""The inference layer on the command line and in the submit dialog: ``cuetrain submit --infer-input ...``,
``cuetrain submit-infer`` and the layer the dialog adds (what runs is :mod:`cue_plugin.submit.infer`).
"""

from __future__ import annotations

import argparse
import getpass
from pathlib import Path
from typing import Any

from cue_plugin.submit import jsonout, templates
from cue_plugin.submit.infer import dry_run, make_layer
from cue_plugin.submit.spec import DEFAULT_CHUNK, FarmError, InferenceJob, InferenceLayer, JobHandle, env_from_pairs
from trainer.core.envvars import read_farm_env


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
    from trainer.record.rundir import RunPaths

    return make_layer(RunPaths.of(run_dir).model, input_dir, output_dir, chunk)


def add_submit_infer_parser(sub: Any) -> argparse.ArgumentParser:
    """The ``cuetrain submit-infer`` subcommand (cue_plugin.submit.cli dispatches to :func:`submit_infer`)."""
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

    With ``--json`` stdout is one object (:mod:`cue_plugin.submit.jsonout`): ``{"spec": XML}`` for ``--dry-run``,
    else ``{"submitted": handle, "frames": N, "chunk": N}`` (what :class:`gui.farm_process.ProcessFarm` reads).
    """
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

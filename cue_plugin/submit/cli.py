"""``cuetrain submit | status | cancel``: the farm commands (the front door, ``cuetrain.cli``, dispatches them here).

    cuetrain submit --template gpu-small --show demo --shot sh010 --input IN --target GT --run-dir RUN
    cuetrain submit ... --dry-run          # print the OpenCue job spec XML, contact nothing
    cuetrain submit --list-templates
    cuetrain status RUN_DIR | JOB_NAME | JOB_ID
    cuetrain cancel RUN_DIR | JOB_NAME | JOB_ID
    cuetrain retry RUN_DIR | JOB_NAME | JOB_ID     # retry the job's dead frames
    cuetrain submit --job-json - --json < job.json  # what the GUI runs (gui.farm_process)

Results go to stdout with print(); diagnostics go through logging. With ``--json`` stdout is one JSON
object (:mod:`cue_plugin.submit.jsonout`), errors included (``{"error": ...}``). Exit codes: 0 ok, 1 the run
directory was read but the farm could not be asked, 2 bad input or a farm error.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import os
import re
import sys
from typing import Any, Sequence

from cue_plugin.names import RENDEZVOUS_MODES
from cue_plugin.submit import infer_cli, jsonout, templates
from cue_plugin.submit.spec import Farm, FarmError, JobHandle, JobStatus, env_from_pairs
from trainer.record import runrecord
from trainer.record.lease import check_free
from trainer.core.config import ConfigError
from trainer.core.config_args import add_train_arguments, config_from_args
from trainer.core.envvars import read_farm_env
from trainer.record.rundir import RunDirError, RunPaths, read_metrics

log = logging.getLogger(__name__)

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
#: submit flags that set TrainingJob fields: flag dest -> (type, help).
_JOB_FLAGS: dict[str, tuple[Any, str]] = {
    "world_size": (int, "ranks in the gang, COPYCAT_WORLD_SIZE (default: the template's)"),
    "ranks_per_frame": (int, "ranks per frame L (one host runs L trainers; the layer has world size / L frames, "
                             "each reserving L x the per-rank cores, memory and GPUs; default 1)"),
    "name": (str, "job name suffix (default cuetrain); OpenCue names the job show-shot-user_name"),
    "priority": (int, "job priority (higher runs first)"),
    "max_retries": (int, "retries per frame"),
    "service": (str, "OpenCue service of the layer"),
    "cores": (float, "cores per rank"),
    "memory_mb": (int, "memory per rank [MiB]"),
    "gpus": (int, "GPUs per rank"),
    "gpu_memory_mb": (int, "GPU memory per rank [MiB]"),
    "sync_interval": (int, "all-reduce gradients every N steps"),
    "rendezvous_timeout_s": (float, "how long ranks wait for frame 0 [s]"),
    "max_restarts": (int, "gang restarts the frames' node agents make per job before giving up (default 3)"),
    "min_world_size": (int, "elastic gang: train on with at least this many ranks when frames do not come back "
                            "(default: the world size, not elastic)"),
    "elastic_window_s": (float, "seconds frame 0 waits for every frame before an elastic gang shrinks (default 120)"),
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cuetrain", description="Train on the OpenCue render farm.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("submit", help="submit a training run (one layer, one frame per ranks-per-frame ranks)")
    s.add_argument("--template", help=f"farm template ({', '.join(templates.list_templates()) or 'none found'})")
    s.add_argument("--list-templates", action="store_true", help="list the farm templates and exit")
    s.add_argument("--show", help="OpenCue show (default $SHOW)")
    s.add_argument("--shot", help="shot (default $SHOT)")
    s.add_argument("--user", help="submitting user (default: your login)")
    s.add_argument("--rendezvous", choices=RENDEZVOUS_MODES, help="how ranks find frame 0 (default file)")
    s.add_argument("--tags", help="host tags, comma separated (e.g. gpu,a100)")
    s.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra frame environment")
    s.add_argument("--dry-run", action="store_true", help="print the job spec XML instead of submitting")
    s.add_argument("--job-json", metavar="FILE", help="the whole job as JSON (cue_plugin.submit.jsonout; '-' = stdin); "
                   "train and job flags are then ignored")
    for dest, (kind, text) in _JOB_FLAGS.items():
        s.add_argument("--" + dest.replace("_", "-"), dest=dest, type=kind, help=text)
    add_train_arguments(s)
    infer_cli.add_infer_arguments(s)
    infer_cli.add_submit_infer_parser(sub)
    for name, text in (("status", "state of a farm run"), ("cancel", "kill a farm run (idempotent)"),
                       ("retry", "retry the dead frames of a farm run")):
        c = sub.add_parser(name, help=text)
        c.add_argument("job", metavar="JOB_OR_RUN_DIR", help="run directory, OpenCue job name or job id")
    for c in sub.choices.values():
        c.add_argument("--cuebot", action="append", metavar="HOST[:PORT]",
                       help="Cuebot host (default: CUEBOT_HOSTS / opencue.yaml)")
        c.add_argument("--json", action="store_true", help="print one JSON object (for the GUI and scripts)")
    return p


def _default_farm(ns: argparse.Namespace) -> Farm:
    from cue_plugin.submit.opencue_farm import OpenCueFarm  # pulls in pycue lazily

    return OpenCueFarm(hosts=ns.cuebot)


def _refuse_live_job(paths: RunPaths, farm: Farm) -> None:
    """Refuse a run directory whose ``run.json`` records a farm job the farm still has queued or running (a
    double-clicked Submit: the first job holds no lease until its rank 0 starts); a job the farm cannot describe has
    ended.

    Raises:
        FarmError: names the job, its state and the fix (exit code 2).
    """
    record = runrecord.read_record_or_empty(paths).farm_record
    if not record.submitted:
        return
    try:
        state = farm.describe(JobHandle(record.job_id, record.job_name, str(paths.root))).state
    except FarmError as exc:
        log.info("the run directory's previous job %s cannot be described (%s); taking it as ended",
                 record.job_name or record.job_id, exc)
        return
    if not state.is_terminal():
        raise FarmError(f"run directory {paths.root} belongs to farm job {record.job_name or '?'} (id "
                        f"{record.job_id or '?'}), which is still {state.value} on the farm; wait for it, cancel it "
                        f"(cuetrain cancel {paths.root}) or choose another --run-dir")


def _submit(ns: argparse.Namespace, farm: Farm) -> int:
    if ns.list_templates and ns.json:
        return jsonout.emit({"templates": templates.list_templates()})
    if ns.list_templates:
        for name in templates.list_templates():
            t = templates.load_template(name)
            print(f"{name:16s} {t.description}")
        return 0
    farm_env = read_farm_env()
    explicit = {dest: getattr(ns, dest) for dest in _JOB_FLAGS}
    explicit.update(show=ns.show or farm_env.show or None, shot=ns.shot or farm_env.shot or None,
                    user=ns.user or getpass.getuser(), rendezvous=ns.rendezvous,
                    tags=tuple(t.strip() for t in ns.tags.split(",") if t.strip()) if ns.tags else None,
                    extra_env=env_from_pairs(ns.env) or None)
    if ns.job_json:
        job = jsonout.job_from_json(_read_text(ns.job_json))
    else:
        train = config_from_args(ns)
        explicit["infer"] = infer_cli.layer_from_args(ns, train.run_dir)
        job = templates.make_job(train, template=ns.template, **explicit)
    if ns.dry_run and ns.json:
        return jsonout.emit({"spec": farm.dry_run(job)})
    if ns.dry_run:
        print(farm.dry_run(job))
        return 0
    check_free(RunPaths.of(job.train.run_dir))  # a live run there: refused, nothing written (trainer.record.lease)
    _refuse_live_job(RunPaths.of(job.train.run_dir), farm)  # a queued job holds no lease yet
    handle = farm.submit(job)
    if ns.json:
        return jsonout.emit({"submitted": jsonout.handle_dict(handle), "world_size": job.world_size,
                             "ranks_per_frame": job.ranks_per_frame, "frames": job.frames})
    print(f"submitted {handle.job_name} (id {handle.job_id}): {job.world_size} rank(s)"
          + (f" in {job.frames} frames x {job.ranks_per_frame} ranks" if job.ranks_per_frame > 1 else ""))
    print(f"follow it with: cuetrain status {handle.run_dir}")
    return 0


def _handle(arg: str) -> JobHandle:
    """A run directory (its run.json ``farm``), a job id (UUID) or a job name."""
    if os.path.isdir(arg):
        from cue_plugin.submit.opencue_farm import handle_from_run_dir

        return handle_from_run_dir(arg)
    if _UUID.match(arg):
        return JobHandle(job_id=arg, job_name="", run_dir="")
    return JobHandle(job_id="", job_name=arg, run_dir="")


def format_status(handle: JobHandle, status: JobStatus, ranks_per_frame: int = 1) -> list[str]:
    """Lines describing a farm job: name, state, ranks running/total, one line per frame (labelled by its
    rank, or by frame number and ranks when a frame runs ``ranks_per_frame`` > 1 ranks)."""
    per = ranks_per_frame
    lines = [f"job      {handle.job_name or '?'} (id {handle.job_id or '?'})",
             f"state    {status.state.value} (OpenCue {status.native_state or '?'}), "
             f"ranks running {status.ranks_running * per}/{status.ranks_total * per}"
             + (f" (frames {status.ranks_running}/{status.ranks_total} x {per} ranks)" if per > 1 else "")]
    for number, frame in sorted(status.frames.items(), key=lambda kv: int(kv[0])):
        first = int(number) * per
        label = f"rank {number:>3}" if per == 1 else f"frame {number:>2} (ranks {first}-{first + per - 1})"
        lines.append(f"{label} {frame.get('state', '?'):10s} host {frame.get('host') or '-'}, "
                     f"retries {frame.get('retries', 0)}, exit {frame.get('exit_status', '-')}")
    return lines


def _ranks_per_frame(run_dir: str | None) -> int:
    """``ranks_per_frame`` recorded at submit in ``RUN_DIR/run.json`` (``farm.job``); 1 when unknown."""
    return runrecord.read_record_or_empty(RunPaths.of(run_dir)).farm_record.ranks_per_frame if run_dir else 1


def format_run(run_dir: str) -> list[str]:
    """Lines from ``RUN_DIR/run.json`` (:func:`trainer.record.runrecord.read_record`) and the last metrics row
    (one "no run.json yet" line when there is none)."""
    paths = RunPaths.of(run_dir)
    try:
        record = runrecord.read_record(paths)
    except RunDirError:
        return [f"run      {run_dir}: no run.json yet"]
    line = f"run      {run_dir}: {record.state or 'submitted'}"
    rows = read_metrics(paths)
    if rows:
        last = rows[-1]
        line += f", step {last.get('step', '?')}/{record.total_steps or '?'}, loss {last.get('loss', float('nan')):.4g}"
    if record.error:
        line += f"; error: {record.error}"
    return [line]


def _read_text(path: str) -> str:
    """``path``'s text, or stdin for ``-``."""
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"--job-json {path}: {exc.strerror}") from exc


def _status(ns: argparse.Namespace, farm: Farm) -> int:
    if ns.json:
        handle = _handle(ns.job)
        return jsonout.emit({"job": jsonout.handle_dict(handle), "status": jsonout.status_dict(farm.describe(handle))})
    run_dir = ns.job if os.path.isdir(ns.job) else None
    if run_dir:
        for line in format_run(run_dir):
            print(line)
    try:
        handle = _handle(ns.job)
    except FarmError as exc:
        if run_dir:  # a local run: nothing on the farm
            print(f"farm     {exc}")
            return 0
        raise
    try:
        status = farm.describe(handle)
    except FarmError as exc:
        if run_dir:
            print(f"farm     unavailable: {exc}")
            return 1
        raise
    for line in format_status(handle, status, _ranks_per_frame(run_dir)):
        print(line)
    return 0


def _cancel(ns: argparse.Namespace, farm: Farm) -> int:
    handle = _handle(ns.job)
    farm.cancel(handle)
    if ns.json:
        return jsonout.emit({"cancelled": jsonout.handle_dict(handle)})
    print(f"cancelled {handle.job_name or handle.job_id} (or it had ended already)")
    return 0


def _retry(ns: argparse.Namespace, farm: Farm) -> int:
    handle = _handle(ns.job)
    retry = getattr(farm, "retry", None)
    if not callable(retry):
        raise FarmError("this farm cannot retry frames")
    count = retry(handle)
    if ns.json:
        return jsonout.emit({"retried": count, "job": jsonout.handle_dict(handle)})
    print(f"retried {count} dead frame(s) of {handle.job_name or handle.job_id}")
    return 0


def main(argv: Sequence[str], *, farm: Farm | None = None) -> int:
    """Run ``submit``/``status``/``cancel``; returns the exit code.

    Args:
        argv: the command and its arguments, e.g. ``["status", "runs/a"]``.
        farm: the backend (default :class:`cue_plugin.submit.opencue_farm.OpenCueFarm`; tests pass one).
    """
    ns = _parser().parse_args(list(argv))
    try:
        farm = farm or _default_farm(ns)
        commands = {"submit": _submit, "status": _status, "cancel": _cancel, "retry": _retry,
                    "submit-infer": infer_cli.submit_infer}
        return commands[ns.command](ns, farm)
    except (FarmError, ConfigError, RunDirError) as exc:
        print(f"cuetrain {ns.command}: error: {exc}", file=sys.stderr)
        if ns.json:
            jsonout.emit({"error": str(exc), "kind": type(exc).__name__})
        return 2

"""TrainingJob -> pyoutline Outline -> OpenCue job spec XML (the dry run), without a Cuebot.

One job, ONE ``Shell`` layer named ``train`` with frames ``0-(F-1)``, chunk 1, where F = world_size /
ranks_per_frame (L). Frame f runs ranks ``f*L .. f*L+L-1`` (with L = 1, the default, frame N is rank
N) and reserves L x the per-rank cores, memory, GPUs and GPU memory. Every frame runs the frame
entry point with the absolute interpreter of this process (RQD gives frames a fixed ``PATH``, so
``python`` alone may be another interpreter)::

    /abs/python -u -m cue_plugin.frame --frame '#IFRAME#' --world-size N --rendezvous file \\
        --rendezvous-timeout 600 [--ranks-per-frame L] [--max-restarts N] [--min-world-size M
        --elastic-window-s W] -- --input ... --target ... --run-dir ...

(``--ranks-per-frame`` only when L > 1, so a one-rank-per-frame spec is what it always was.)

The command is one POSIX shell line (quoting and the arguments it refuses: :mod:`cue_plugin.submit.command`).
"""

from __future__ import annotations

import re
import secrets
import sys
from typing import TYPE_CHECKING

from cue_plugin.names import DEFAULT_MAX_RESTARTS
from cue_plugin.names import TRAIN_LAYER as LAYER_NAME
from cue_plugin.submit.command import check_argument, shell_command
from cue_plugin.submit.spec import FarmError, TrainingJob

if TYPE_CHECKING:  # pyoutline reads its config at import: import it only when building
    import outline
    import outline.cuerun

#: Environment variable that carries the per-job token (trainer.gang.formation checks it; see cue_plugin.node.frame).
TOKEN_ENV = "CUETRAIN_GANG_TOKEN"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def frame_argv(job: TrainingJob, python: str | None = None) -> list[str]:
    """The argv every frame runs (before quoting); ``#IFRAME#`` is replaced by Cuebot."""
    per_frame = ["--ranks-per-frame", str(job.ranks_per_frame)] if job.ranks_per_frame > 1 else []
    agent = ["--max-restarts", str(job.max_restarts)] if job.max_restarts != DEFAULT_MAX_RESTARTS else []
    if 0 < job.min_world_size < job.world_size:
        agent += ["--min-world-size", str(job.min_world_size), "--elastic-window-s", f"{job.elastic_window_s:g}"]
    return [python or sys.executable, "-u", "-m", "cue_plugin.frame", "--frame", "#IFRAME#",
            "--world-size", str(job.world_size), "--rendezvous", job.rendezvous,
            "--rendezvous-timeout", f"{job.rendezvous_timeout_s:g}", *per_frame, *agent, "--",
            *job.train.to_argv()]


def layer_env(job: TrainingJob, token: str) -> dict[str, str]:
    """Environment of every frame, sorted by name: world size, sync interval, token, job.extra_env.

    Raises:
        FarmError: an ``extra_env`` name or value a job spec cannot carry.
    """
    env = {"COPYCAT_WORLD_SIZE": str(job.world_size), "COPYCAT_SYNC_INTERVAL": str(job.sync_interval),
           "PYTHONUNBUFFERED": "1", TOKEN_ENV: token}
    for name, value in job.extra_env.items():
        if not _ENV_NAME.match(name):
            raise FarmError(f"extra_env name {name!r} is not a valid environment variable name")
        if name in env:
            raise FarmError(f"extra_env may not set {name}: cuetrain sets it from the job (world_size, sync_interval)")
        check_argument(str(value))
        env[name] = str(value)
    return dict(sorted(env.items()))


def check_rank_memory(job: TrainingJob) -> None:
    """Refuse a job whose ranks cannot fit in the memory they reserve (``memory_mb`` per rank): RQD and Cuebot
    would count it a memory failure and retry it into the same wall (``trainer.core.rankmemory``).

    Raises:
        FarmError: names the reservation, what a rank needs and the largest ``--data-cache-mb`` that fits.
    """
    from trainer.core.rankmemory import largest_data_cache_mb, rank_memory_mb

    gpu = job.gpus > 0
    need = rank_memory_mb(job.train.data_cache_mb, gpu)
    if need <= job.memory_mb:
        return
    room = largest_data_cache_mb(job.memory_mb, gpu)
    fix = f"lower --data-cache-mb to {room} or less, or " if room >= 0 else ""
    raise FarmError(f"each rank reserves memory_mb={job.memory_mb} MiB but needs about {need} MiB on a "
                    f"{'GPU' if gpu else 'CPU'} node (trainer process, --data-cache-mb {job.train.data_cache_mb} and "
                    f"decode buffers; trainer/core/rankmemory.py): {fix}reserve more memory per rank (--memory-mb, or a "
                    "template for bigger nodes)")


def check_deadline(job: TrainingJob, now: float | None = None) -> None:
    """Refuse a job whose ``--time-budget`` is a deadline already past (``trainer.core.budget``): every frame would
    stop at its first plan.

    Raises:
        FarmError: names the deadline and the fix.
    """
    import time

    from trainer.core.budget import parse_time_budget

    if not job.train.time_budget:
        return
    budget = parse_time_budget(job.train.time_budget)
    if budget.deadline_unix is not None and budget.deadline_unix <= (time.time() if now is None else now):
        raise FarmError(f"--time-budget {job.train.time_budget} has already passed; give a later deadline or a "
                        "duration such as 2h")


def check_init_from(job: TrainingJob) -> None:
    """Refuse a job whose ``--init-from`` the frames could not use: a relative path (render nodes start in another
    folder), a path missing or unreadable here (the farm reads the same shared storage), a run directory with
    neither ``model.pt`` nor a checkpoint, or a ``model.json`` naming another network than the job trains
    (``trainer.record.initsource``; a checkpoint's own metadata is checked by the trainer, which has torch).

    Raises:
        FarmError: names the path, what is wrong and the fix.
    """
    if not job.train.init_from:
        return
    from trainer.record.initsource import InitFromError, check_source

    cfg = job.train
    try:
        check_source(cfg.init_from, architecture=cfg.architecture_name, model_size=cfg.model_size, scale=cfg.scale,
                     channels=len(cfg.channels.inputs), target_channels=len(cfg.channels.targets),
                     require_absolute=True)
    except InitFromError as exc:
        raise FarmError(str(exc)) from exc


def build(job: TrainingJob, *, python: str | None = None, token: str | None = None) -> "outline.Outline":
    """The pyoutline Outline of ``job`` (not set up: no session folder is written).

    Args:
        job: the training job.
        python: interpreter path the frames run (default ``sys.executable``; must exist on render nodes).
        token: per-job token (default: 32 random hex digits); fixed only in tests.

    Raises:
        FarmError: an argument or variable the spec cannot carry (see :func:`check_argument`), or ranks that
            cannot fit in their memory reservation (:func:`check_rank_memory`), or an ``--init-from`` they cannot
            use (:func:`check_init_from`).
    """
    import outline
    from outline.modules.shell import Shell

    check_rank_memory(job)
    check_init_from(job)
    check_deadline(job)
    command = shell_command(frame_argv(job, python))
    env = layer_env(job, token or secrets.token_hex(16))
    ol = outline.Outline(name=job.name, show=job.show, shot=job.shot, user=job.user)
    res = job.frame_resources  # L x one rank's
    args: dict = dict(command=command, range=f"0-{job.frames - 1}", chunk=1, cores=res["cores"],
                      memory=f"{res['memory_mb']}m", service=job.service, env=env)
    if job.tags:
        args["tags"] = list(job.tags)
    if job.gpus or job.gpu_memory_mb:
        args["gpus"] = res["gpus"] or job.ranks_per_frame
        args["gpu_memory"] = f"{res['gpu_memory_mb']}m" if job.gpu_memory_mb else "1g"
    layer = Shell(LAYER_NAME, **args)
    ol.add_layer(layer)
    layer.check_required_args()
    if job.infer is not None:  # a second layer, LAYER_ON_LAYER on this one
        from cue_plugin.submit.infer import with_training

        with_training(job, ol, layer, python)
    return ol


def launcher(ol: "outline.Outline", job: TrainingJob) -> "outline.cuerun.OutlineLauncher":
    """The OutlineLauncher with the job-level flags (user, priority, retries; no e-mail, not paused).

    The outline is marked ready without ``Outline.setup()``: frames run our command, not pycuerun,
    so the session folder setup() writes (``~/.opencue/sessions/...``) would never be read.
    """
    import outline.constants
    from outline.cuerun import OutlineLauncher

    ol.set_mode(outline.constants.OUTLINE_MODE_READY)
    return OutlineLauncher(ol, user=job.user, priority=job.priority, maxretries=job.max_retries,
                           pause=False, nomail=True)


def dry_run(job: TrainingJob, *, python: str | None = None, token: str | None = None) -> str:
    """The job spec XML OpenCue would receive (``use_pycuerun=False``); contacts no server.

    Raises:
        FarmError: see :func:`build`.
    """
    ol = build(job, python=python, token=token)
    return launcher(ol, job).serialize(use_pycuerun=False)

"""``python -m cue_plugin.node.frame``: what every frame of a training job runs on its render node.

    python -u -m cue_plugin.node.frame --frame 3 --world-size 4 --rendezvous file \\
        --rendezvous-timeout 600 -- --input ... --target ... --run-dir ...

1. The frame number f is ``--frame`` (Cuebot's ``#IFRAME#`` token) or ``CUE_IFRAME``. With
   ``--ranks-per-frame L`` (default 1) the frame runs ranks ``f*L .. f*L+L-1`` (L = 1: rank = frame
   number); ``--world-size`` is the total number of ranks and must be a multiple of L.
2. Rendezvous (see :mod:`cue_plugin.node.rendezvous`): frame 0 reserves a port and publishes its main
   address; the other frames wait for a usable publication (exit code 3 after the timeout).
3. Each rank's trainer runs as a child process (L of them, through :mod:`trainer.agent.supervise`, the
   supervisor ``cuetrain local`` uses too; one failing stops the others),
   ``python -u -m trainer ARGS``, with
   ``COPYCAT_MAIN_ADDR/PORT/RANK/WORLD_SIZE/SYNC_INTERVAL`` and the job token
   (``CUETRAIN_GANG_TOKEN``) set; ``CUE_GPU_CORES`` (the GPUs RQD reserved; RQD does not set
   CUDA's variable) is split over the L ranks as ``CUDA_VISIBLE_DEVICES`` (one GPU each when the
   layer reserved L) with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (RQD numbers GPUs like nvidia-smi, in PCI
   bus order), and ``CUE_THREADS / L`` becomes ``OMP_NUM_THREADS`` unless set. The children stay in
   the frame's process group, so RQD's kill reaches them; a SIGTERM sent to this process alone is
   passed on to each.
4. The frame is a node agent (:mod:`cue_plugin.node.agent`): when its trainers exit because the gang
   failed, it does not exit. Frame 0 hosts the next gang *generation* (a new attempt, after a
   backoff, up to ``--max-restarts`` per job) and the other frames (:mod:`cue_plugin.node.frame_member`)
   wait for it; every later generation, and a Cuebot retry within the same job, runs with
   ``--resume``. With ``--min-world-size`` the gang is elastic: frame 0 forms a generation of the
   frames that came back within ``--elastic-window-s`` (:mod:`cue_plugin.node.membership`) and, when a
   missing frame returns, sends its trainer SIGUSR1 so the gang regroups at its next checkpoint.
5. Every line (this module's log and the trainer's output) goes to stdout (the frame log, line by
   line) and to ``RUN_DIR/logs/rank_N.log``. The exit code is the trainer's (128 + signal number
   when it was killed); 2 = bad arguments, 3 = rendezvous timeout or gang failed, 6 = port
   unavailable, 75 = stopped by SIGTERM with a checkpoint, 127 = the trainer could not be started
   (the table: trainer/core/exitcodes.py); after a gang failure only once frame 0's restart budget is spent.

Stale gangs (ranks other than 0). OpenCue retries a failed frame on its own, so a retried rank can
reach a frame 0 whose old gang is still alive (it needs ~10-15 s to notice the lost rank and exit
4). That gang refuses the rank (trainer exit code 5, its rank is claimed there already); the frame
then does not exit: it marks that attempt of frame 0 stale and waits for another one, within the
rendezvous timeout (counted from the start of each wait). While its trainer runs, the
frame also looks at the publication every :data:`WATCH_S` seconds: a publication of another
attempt means frame 0 started again and this trainer's gang is gone (e.g. it is still trying to
reach the old, dead address), so the trainer is stopped and the frame waits for the new attempt.

Gang timeout (frame 0). When frame 0's trainer exits 3 and ``run.json`` records ``failure_kind:
gang_incomplete`` (not every rank joined within ``--gang-timeout-s``, default 600 s;
trainer.record.runrecord), frame 0 fails the whole layer instead of letting the frames that did
start hold their GPUs, or OpenCue retry frame 0 into another wait:

a. it replaces its publication with a failure notice (``rendezvous/main.json``, signed with the
   job token); waiting ranks read it within a second, log why they stop and exit 3;
b. it adds ``gang_failure`` (reason, time, what was done in Cuebot) to ``run.json``;
c. after ``cue_plugin.node.layer_failure.NOTICE_GRACE_S`` seconds it eats the layer's frames through pycue
   (``opencue.api.findLayer(CUE_JOB, CUE_LAYER).eat()``; Cuebot kills the running ones, frame 0
   included, and marks all EATEN so none is dispatched again; a plain kill would put them back to
   WAITING). pycue needs ``CUEBOT_HOSTS`` (or ``opencue.yaml``) on the render node; without it,
   or with Cuebot unreachable, the log says so and what to do (``cuetrain cancel RUN_DIR``).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from typing import Callable, Sequence

from cue_plugin.node import rendezvous, rendezvous_cuebot
from cue_plugin.node.publication import Publication
from cue_plugin.node.agent import DEFAULT_BACKOFF_S, DEFAULT_ELASTIC_WINDOW_S, DEFAULT_MAX_RESTARTS, AgentPolicy
from cue_plugin.node.frame_context import FrameContext
from cue_plugin.node.frame_host import HostGang
from cue_plugin.node.frame_member import run_member
from cue_plugin.names import RENDEZVOUS_MODES
from cue_plugin.node.supervise import GangExit, RankLog, frame_devices, frame_ranks, run_ranks
from trainer.core.config import ConfigError, TrainConfig
from trainer.core.config_args import add_train_arguments, config_from_args
from trainer.core.envvars import (CueFrameEnv, EnvError, copycat_env, environ_with, read_cue_env, read_dist_env,
                             read_farm_env)
from trainer.record import runrecord
from trainer.core.exitcodes import ExitCode, describe
from trainer.core.timeouts import GRACE
from trainer.agent.nodeagent import NodeAgent
from trainer.record.rundir import RunDirError, RunPaths
from trainer.agent.supervise import TRAINER_COMMAND, device_envs, rank_envs

log = logging.getLogger("cue_plugin.frame")  # the frame's records, as in its logs since the first release (RankLog: "cue_plugin")

EXIT_USAGE = ExitCode.USAGE
WATCH_S = 5.0  # seconds between looks at the publication while the trainer runs
STOP_GRACE_S = GRACE.kill_after_s()  # seconds from SIGTERM to SIGKILL for the trainer's default grace (trainer.core.timeouts)


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Split ``FRAME_ARGS -- TRAIN_ARGS`` and parse the frame arguments.

    Raises:
        SystemExit: bad frame arguments (argparse prints the usage, exit code 2).
    """
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(prog="python -m cue_plugin.node.frame", description=__doc__.split("\n")[0])
    p.add_argument("--frame", help="frame number = rank (Cuebot's #IFRAME#; default CUE_IFRAME)")
    p.add_argument("--world-size", type=int, required=True, help="number of ranks = frames in the layer")
    p.add_argument("--rendezvous", choices=RENDEZVOUS_MODES, default="file", help="how ranks find frame 0")
    p.add_argument("--rendezvous-timeout", type=float, default=600.0, help="wait for frame 0 at most [s]")
    p.add_argument("--ranks-per-frame", type=int, default=1,
                   help="trainer processes of this frame L: ranks frame*L .. frame*L+L-1 (default 1)")
    p.add_argument("--max-restarts", type=int, default=DEFAULT_MAX_RESTARTS,
                   help=f"gang restarts per job before frame 0 gives up (default {DEFAULT_MAX_RESTARTS})")
    p.add_argument("--restart-backoff-s", type=float, default=DEFAULT_BACKOFF_S,
                   help="seconds before the first restart, doubled for each further one "
                        f"(default {DEFAULT_BACKOFF_S:g})")
    p.add_argument("--min-world-size", type=int, default=0,
                   help="elastic gang: train on with at least this many ranks when frames do not come back "
                        "(default: the world size, not elastic)")
    p.add_argument("--elastic-window-s", type=float, default=DEFAULT_ELASTIC_WINDOW_S,
                   help="seconds frame 0 waits for every frame before an elastic gang shrinks "
                        f"(default {DEFAULT_ELASTIC_WINDOW_S:g})")
    return p.parse_args(argv[:split]), argv[split + 1:]


def frames_of(world_size: int, ranks_per_frame: int) -> int:
    """Frames in the layer: ``world_size / ranks_per_frame``.

    Raises:
        ValueError: either is below 1, or ``world_size`` is not a multiple of ``ranks_per_frame`` (names both).
    """
    if world_size < 1 or ranks_per_frame < 1:
        raise ValueError(f"--world-size {world_size} and --ranks-per-frame {ranks_per_frame} must be >= 1")
    if world_size % ranks_per_frame:
        raise ValueError(f"--world-size {world_size} is not a multiple of --ranks-per-frame {ranks_per_frame}: "
                         "every frame runs the same number of ranks")
    return world_size // ranks_per_frame


def frame_rank(frame_arg: str | None, cue: CueFrameEnv, world_size: int) -> int:
    """The frame number: ``--frame`` if it is a number (an unreplaced ``#IFRAME#`` is ignored), else ``CUE_IFRAME``.

    ``world_size`` here is the number of frames (= ranks with one rank per frame, see :func:`frames_of`).

    Raises:
        ValueError: no frame number, or not in ``0..world_size-1``.
    """
    rank = int(frame_arg) if frame_arg and frame_arg.strip().isdigit() else cue.frame
    if rank is None:
        raise ValueError("no frame number: pass --frame N or run under RQD (CUE_IFRAME)")
    if cue.frame is not None and cue.frame != rank:
        log.warning("--frame %d and CUE_IFRAME=%d differ; using %d", rank, cue.frame, rank)
    if not 0 <= rank < world_size:
        raise ValueError(f"frame {rank} is not a rank of a world of {world_size} (frames must be 0-{world_size - 1})")
    return rank


def train_config(train_args: list[str]) -> TrainConfig:
    """Parse the trainer arguments as ``cuetrain train`` would (to find the run directory).

    Raises:
        ConfigError: bad or missing train arguments.
    """
    p = argparse.ArgumentParser(prog="cuetrain train", add_help=False)
    add_train_arguments(p)
    ns, unknown = p.parse_known_args(train_args)
    if unknown:
        raise ConfigError(f"unknown train argument(s) {unknown}")
    return config_from_args(ns)


def device_env(cue: CueFrameEnv, omp_num_threads: str | None) -> dict[str, str]:
    """GPU and thread variables for a one-rank frame from RQD's reservation (empty when nothing is reserved).

    Frames with more ranks split them (:func:`trainer.agent.supervise.device_envs`)."""
    return device_envs(frame_devices(cue, omp_num_threads), 1)[0]


def resume_args(train_args: list[str], paths: RunPaths, job_id: str) -> list[str]:
    """``train_args`` plus ``--resume`` when a gang of job ``job_id`` already started training in this run dir.

    ``run.json`` ``farm.attempts_at_submit`` is the number of training attempts recorded at submit;
    more attempts now (written by rank 0 once its gang formed) means this frame is a retry.
    """
    if "--resume" in train_args or not job_id:
        return train_args
    attempts = runrecord.attempts_since_submit(runrecord.read_record_or_empty(paths), job_id)
    if attempts:
        log.info("retry of job %s: %d training attempt(s) recorded since submit, adding --resume", job_id, attempts)
        return [*train_args, "--resume"]
    return train_args


_Source = rendezvous.FileSource | rendezvous_cuebot.CuebotSource


def _source(ctx: FrameContext) -> _Source:
    if ctx.rendezvous == "cuebot":
        return rendezvous_cuebot.CuebotSource(ctx.cue.job, ctx.cue.layer, ctx.farm.job_id or ctx.cue.job)
    return rendezvous.FileSource(ctx.paths.rendezvous)


def _trainer_env(ctx: FrameContext, pub: Publication, rank: int, world_size: int) -> dict[str, str]:
    """The environment every trainer of this frame shares (``COPYCAT_RANK`` and devices are set per rank)."""
    env = copycat_env(pub.host, pub.port, rank, world_size, ctx.dist.sync_interval, ctx.dist.local_addr, ctx.token)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _start_trainer(ctx: FrameContext, pub: Publication, *, resume: bool,
                   watch: Callable[[], str | int | None] | None = None) -> GangExit:
    """Run this frame's trainers for generation ``pub`` until they end.

    The frame's ranks in the gang come from the publication (its position among the members); the
    log files keep the frame's own rank numbers (``frame*L + l``) whatever the generation.
    """
    L = ctx.ranks_per_frame
    gang_ranks = pub.ranks_of(ctx.frame, L)
    world = pub.world_size(ctx.world_size, L)
    envs = rank_envs(environ_with(_trainer_env(ctx, pub, gang_ranks[0], world)), gang_ranks[0], L,
                     frame_devices(ctx.cue, ctx.farm.omp_num_threads))
    train_args = list(ctx.train_args)
    args = [*train_args, "--resume"] if resume and "--resume" not in train_args else \
        resume_args(train_args, ctx.paths, ctx.farm.job_id)
    own = frame_ranks(ctx.frame, L)
    for env in envs:
        gpus = f", CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}" if "CUDA_VISIBLE_DEVICES" in env else ""
        log.info("rank %s/%d starting the trainer (main %s, attempt %s, generation %s%s)", env["COPYCAT_RANK"], world,
                 pub.address, pub.attempt, pub.generation or "-", gpus)
    result = run_ranks([*ctx.trainer_command, *args], list(zip(own, envs)), ctx.out.logs, watch=watch,
                       watch_s=WATCH_S, stop_grace_s=GRACE.kill_after_for(args))
    for r in own:
        log.info("rank %d: trainer exited with code %s (%s)", r, result.codes.get(r, "- (not started)"),
                 describe(result.codes[r]) if r in result.codes else "not started")
    return result


def _run(ctx: FrameContext) -> int:
    """The frame's node agent (:class:`trainer.agent.nodeagent.NodeAgent`): frame 0 hosts every generation
    (:class:`~cue_plugin.node.frame_host.HostGang`), the other frames join them (``cue_plugin.node.frame_member``)."""
    source = _source(ctx)
    notice = rendezvous.FileSource(ctx.paths.rendezvous)  # frame 0's failure notice, in both modes

    def start(pub: Publication, resume: bool, watch: Callable[[], str | int | None] | None) -> GangExit:
        return _start_trainer(ctx, pub, resume=resume, watch=watch)

    if ctx.frame == 0:
        return NodeAgent(HostGang(ctx, source, notice, start), ctx.policy.max_restarts).run()
    return run_member(ctx, source, notice, start)


def policy_of(ns: argparse.Namespace) -> AgentPolicy:
    """The node agent's policy from the frame arguments."""
    return AgentPolicy(max_restarts=ns.max_restarts, backoff_s=ns.restart_backoff_s,
                       min_world_size=ns.min_world_size or ns.world_size, elastic_window_s=ns.elastic_window_s)


def _context(ns: argparse.Namespace, train_args: list[str], frame: int, policy: AgentPolicy, paths: RunPaths,
             cue: CueFrameEnv, out: RankLog, trainer_command: Sequence[str]) -> FrameContext:
    """The frame's context: its arguments, the agent policy :func:`main` checked, and every variable it reads,
    read here, once.

    Raises:
        EnvError: a ``COPYCAT_*`` variable the trainers would inherit holds a bad value.
    """
    return FrameContext(frame=frame, world_size=ns.world_size, paths=paths, ranks_per_frame=ns.ranks_per_frame,
                        rendezvous=ns.rendezvous, rendezvous_timeout_s=ns.rendezvous_timeout, policy=policy,
                        train_args=tuple(train_args), trainer_command=tuple(trainer_command), cue=cue,
                        farm=read_farm_env(), dist=read_dist_env(), out=out)


def main(argv: Sequence[str] | None = None, *, trainer_command: Sequence[str] | None = None) -> int:
    """Run one frame; returns its exit code.

    Args:
        argv: frame arguments ``[...] -- TRAIN_ARGS`` (default ``sys.argv[1:]``).
        trainer_command: the trainer command before the train arguments (default :data:`TRAINER_COMMAND`;
            tests pass a stub).
    """
    ns, train_args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cue = read_cue_env()
        frame = frame_rank(ns.frame, cue, frames_of(ns.world_size, ns.ranks_per_frame))
        policy = policy_of(ns)
        policy.check(ns.world_size, ns.ranks_per_frame)
        if policy.elastic(ns.world_size) and ns.rendezvous != "file":
            raise ValueError(f"--min-world-size {ns.min_world_size} (an elastic gang) needs --rendezvous file: "
                             "Cuebot's frame state cannot name the frames of a smaller gang")
        paths = RunPaths.of(train_config(train_args).run_dir)
        paths.create()
        out = RankLog(paths, frame * ns.ranks_per_frame, prefix=ns.ranks_per_frame > 1)
    except (ValueError, EnvError, ConfigError, RunDirError, OSError) as exc:
        print(f"cue_plugin.node.frame: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    out.attach()
    try:
        rank = frame * ns.ranks_per_frame
        log.info("frame %d of %d on %s (pid %d), rendezvous %s, rank(s) %d-%d of %d", frame,
                 ns.world_size // ns.ranks_per_frame, socket.gethostname(), os.getpid(), ns.rendezvous, rank,
                 rank + ns.ranks_per_frame - 1, ns.world_size)
        return _run(_context(ns, train_args, frame, policy, paths, cue, out, trainer_command or TRAINER_COMMAND))
    except rendezvous.RendezvousError as exc:
        log.error("%s", exc)
        return exc.exit_code
    except EnvError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    finally:
        out.close()


if __name__ == "__main__":
    sys.exit(main())

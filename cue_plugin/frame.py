"""``python -m cue_plugin.frame``: what every frame of a training job runs on its render node.

    python -u -m cue_plugin.frame --frame 3 --world-size 4 --rendezvous file \\
        --rendezvous-timeout 600 -- --input ... --target ... --run-dir ...

1. The frame number f is ``--frame`` (Cuebot's ``#IFRAME#`` token) or ``CUE_IFRAME``. With
   ``--ranks-per-frame L`` (default 1) the frame runs ranks ``f*L .. f*L+L-1`` (L = 1: rank = frame
   number); ``--world-size`` is the total number of ranks and must be a multiple of L.
2. Rendezvous (see :mod:`cue_plugin.rendezvous`): frame 0 reserves a port and publishes its main
   address; the other frames wait for a usable publication (exit code 3 after the timeout).
3. Each rank's trainer runs as a child process (L of them, through :mod:`trainer.supervise`, the
   supervisor ``cuetrain local`` uses too; one failing stops the others),
   ``python -u -m trainer.cli train ARGS``, with
   ``COPYCAT_MAIN_ADDR/PORT/RANK/WORLD_SIZE/SYNC_INTERVAL`` and the job token
   (``CUETRAIN_GANG_TOKEN``) set; ``CUE_GPU_CORES`` (the GPUs RQD reserved; RQD does not set
   CUDA's variable) is split over the L ranks as ``CUDA_VISIBLE_DEVICES`` (one GPU each when the
   layer reserved L) with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (RQD numbers GPUs like nvidia-smi, in PCI
   bus order), and ``CUE_THREADS / L`` becomes ``OMP_NUM_THREADS`` unless set. The children stay in
   the frame's process group, so RQD's kill reaches them; a SIGTERM sent to this process alone is
   passed on to each.
4. On a retry within the same job (``run.json`` shows a gang of this job already started
   training), ``--resume`` is added so the gang continues from the latest checkpoint.
5. Every line (this module's log and the trainer's output) goes to stdout (the frame log, line by
   line) and to ``RUN_DIR/logs/rank_N.log``. The exit code is the trainer's (128 + signal number
   when it was killed); 2 = bad arguments, 3 = rendezvous timeout or gang failed, 6 = port
   unavailable, 75 = stopped by SIGTERM with a checkpoint, 127 = the trainer could not be started
   (the table: trainer/exitcodes.py).

Stale gangs (ranks other than 0). OpenCue retries a failed frame on its own, so a retried rank can
reach a frame 0 whose old gang is still alive (it needs ~10-15 s to notice the lost rank and exit
4). That gang refuses the rank (trainer exit code 5, its rank is claimed there already); the frame
then does not exit: it marks that attempt of frame 0 stale and waits for another one, within the
rendezvous timeout (counted from the frame's start, over all waits). While its trainer runs, the
frame also looks at the publication every :data:`WATCH_S` seconds: a publication of another
attempt means frame 0 started again and this trainer's gang is gone (e.g. it is still trying to
reach the old, dead address), so the trainer is stopped and the frame waits for the new attempt.

Gang timeout (frame 0). When frame 0's trainer exits 3 and ``run.json`` records ``failure_kind:
gang_incomplete`` (not every rank joined within ``--gang-timeout-s``, default 600 s;
trainer.runrecord), frame 0 fails the whole layer instead of letting the frames that did
start hold their GPUs, or OpenCue retry frame 0 into another wait:

a. it replaces its publication with a failure notice (``rendezvous/main.json``, signed with the
   job token); waiting ranks read it within a second, log why they stop and exit 3;
b. it adds ``gang_failure`` (reason, time, what was done in Cuebot) to ``run.json``;
c. after :data:`NOTICE_GRACE_S` seconds it eats the layer's frames through pycue
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
import time
from datetime import datetime, timezone
from typing import Callable, Sequence

from cue_plugin import rendezvous
from cue_plugin.builder import LAYER_NAME
from cue_plugin.spec import RENDEZVOUS_MODES
from cue_plugin.supervise import GangExit, RankLog, frame_devices, frame_ranks, run_ranks
from trainer.config import ConfigError, TrainConfig, add_train_arguments, config_from_args
from trainer.envvars import (CueFrameEnv, EnvError, copycat_env, environ_with, read_cue_env, read_dist_env,
                             read_farm_env)
from trainer import runrecord
from trainer.exitcodes import ExitCode
from trainer.rundir import RunDirError, RunPaths
from trainer.supervise import device_envs, rank_envs

log = logging.getLogger("cue_plugin.frame")  # not __name__: run as ``-m``, that is "__main__", outside RankLog's tree

#: The trainer command (train arguments are appended).
TRAINER_COMMAND = (sys.executable, "-u", "-m", "trainer.cli", "train")
EXIT_USAGE = ExitCode.USAGE
EXIT_GANG = ExitCode.GANG  # rendezvous timeout, gang incomplete or failed (trainer.gang.GangTimeout)
EXIT_REJECTED = ExitCode.REJECTED  # trainer.gang.GangRejected: rank already claimed in that gang, or wrong job token
WATCH_S = 5.0  # seconds between looks at the publication while the trainer runs
STOP_GRACE_S = 10.0  # seconds between SIGTERM and SIGKILL when the frame stops its trainer
NOTICE_GRACE_S = 3.0  # seconds frame 0 leaves waiting ranks to read its failure notice before eating the layer
NOTICE_WAIT_S = 2.0  # seconds a rank whose trainer failed looks for frame 0's failure notice
CUEBOT_TIMEOUT_S = 10.0  # deadline of frame 0's pycue calls [s] (pycue's default is hours)


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Split ``FRAME_ARGS -- TRAIN_ARGS`` and parse the frame arguments.

    Raises:
        SystemExit: bad frame arguments (argparse prints the usage, exit code 2).
    """
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(prog="python -m cue_plugin.frame", description=__doc__.split("\n")[0])
    p.add_argument("--frame", help="frame number = rank (Cuebot's #IFRAME#; default CUE_IFRAME)")
    p.add_argument("--world-size", type=int, required=True, help="number of ranks = frames in the layer")
    p.add_argument("--rendezvous", choices=RENDEZVOUS_MODES, default="file", help="how ranks find frame 0")
    p.add_argument("--rendezvous-timeout", type=float, default=600.0, help="wait for frame 0 at most [s]")
    p.add_argument("--ranks-per-frame", type=int, default=1,
                   help="trainer processes of this frame L: ranks frame*L .. frame*L+L-1 (default 1)")
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

    Frames with more ranks split them (:func:`trainer.supervise.device_envs`)."""
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


_Source = rendezvous.FileSource | rendezvous.CuebotSource


def _source(mode: str, paths: RunPaths, cue: CueFrameEnv, job_id: str) -> _Source:
    if mode == "cuebot":
        return rendezvous.CuebotSource(cue.job, cue.layer, job_id or cue.job)
    return rendezvous.FileSource(paths.rendezvous)


def _trainer_env(pub: rendezvous.Publication, rank: int, world_size: int, cue: CueFrameEnv) -> dict[str, str]:
    """The environment every trainer of this frame shares (``COPYCAT_RANK`` and devices are set per rank)."""
    dist = read_dist_env()
    env = copycat_env(pub.host, pub.port, rank, world_size, dist.sync_interval, dist.local_addr, dist.token)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _start_trainer(ns: argparse.Namespace, rank: int, pub: rendezvous.Publication, paths: RunPaths,
                   train_args: list[str], cue: CueFrameEnv, trainer_command: Sequence[str], out: RankLog,
                   watch: Callable[[], str | None] | None = None) -> GangExit:
    """Run this frame's trainers (ranks ``rank .. rank+L-1``, ``rank`` = its first) until they end."""
    ranks = frame_ranks(rank // ns.ranks_per_frame, ns.ranks_per_frame)
    envs = rank_envs(environ_with(_trainer_env(pub, rank, ns.world_size, cue)), rank, len(ranks),
                     frame_devices(cue, read_farm_env().omp_num_threads))
    args = resume_args(train_args, paths, read_farm_env().job_id)
    for env in envs:
        log.info("rank %s/%d starting the trainer (main %s, attempt %s%s)", env["COPYCAT_RANK"], ns.world_size,
                 pub.address, pub.attempt, f", CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}"
                 if "CUDA_VISIBLE_DEVICES" in env else "")
    result = run_ranks([*trainer_command, *args], list(zip(ranks, envs)), out.logs, watch=watch, watch_s=WATCH_S,
                       stop_grace_s=STOP_GRACE_S)
    for r in ranks:
        log.info("rank %d: trainer exited with code %s", r, result.codes.get(r, "- (not started)"))
    return result


def _run(ns: argparse.Namespace, rank: int, paths: RunPaths, train_args: list[str], cue: CueFrameEnv,
         trainer_command: Sequence[str], out: RankLog) -> int:
    token = read_dist_env().token
    source = _source(ns.rendezvous, paths, cue, read_farm_env().job_id)
    notice = rendezvous.FileSource(paths.rendezvous)  # frame 0's failure notice, in both modes
    if rank == 0:
        return _run_main(ns, paths, train_args, cue, trainer_command, out, source, notice, token)
    return _run_member(ns, rank, paths, train_args, cue, trainer_command, out, source, notice, token)


def _run_main(ns: argparse.Namespace, paths: RunPaths, train_args: list[str], cue: CueFrameEnv,
              trainer_command: Sequence[str], out: RankLog, source: _Source, notice: rendezvous.FileSource,
              token: str | None) -> int:
    """Frame 0: host (reserve + publish), run rank 0, retract; fail the layer on a gang timeout."""
    farm = read_farm_env()
    if ns.rendezvous == "cuebot":
        notice.clear()  # a failure notice of an earlier attempt
    host = rendezvous.main_address(farm.main_host, farm.cuebot_hosts)  # an IP, never the host name
    reservation, pub = source.host(host, token)
    log.info("frame 0 (attempt %s) hosts the main address %s for %d rank(s)", pub.attempt, pub.address,
             ns.world_size)
    failure = ""
    try:
        result = _start_trainer(ns, 0, pub, paths, train_args, cue, trainer_command, out)
        code = result.code
        failure = gang_incomplete(paths) if EXIT_GANG in (code, result.codes.get(0)) else ""
    finally:
        reservation.close()
        if not failure:
            source.retract(pub)
    if failure:
        fail_layer(paths, pub, failure, cue, token, notice)
    elif code == EXIT_USAGE:  # bad settings: a retry cannot help, so the waiting ranks stop now
        rendezvous.notify_bad_setting(notice, pub, paths.rank_log(0), token)
    return code


def _run_member(ns: argparse.Namespace, rank: int, paths: RunPaths, train_args: list[str], cue: CueFrameEnv,
                trainer_command: Sequence[str], out: RankLog, source: _Source, notice: rendezvous.FileSource,
                token: str | None) -> int:
    """Ranks > 0: wait for frame 0, run the trainer; a stale gang (see module doc) means wait again."""
    deadline = time.monotonic() + ns.rendezvous_timeout
    stale: set[str] = set()
    while True:
        pub = rendezvous.wait_for_main(source, rank=rank, token=token, stale=stale, notice=notice,
                                       timeout_s=max(0.0, deadline - time.monotonic()))

        def newer(current: rendezvous.Publication = pub) -> str | None:
            other = rendezvous.superseded(source, current, token)
            return f"frame 0 started again (attempt {other.attempt}); the gang of attempt {current.attempt} is gone" \
                if other is not None else None

        result = _start_trainer(ns, rank, pub, paths, train_args, cue, trainer_command, out, watch=newer)
        if EXIT_REJECTED in result.codes.values() or result.stopped:
            stale.add(pub.attempt)
            why = result.stopped or "its gang refused this rank (rank already claimed: a stale gang of an old frame 0)"
            log.warning("rank %d: frame 0 attempt %s is stale: %s; waiting for another attempt of frame 0 "
                        "(%.0f s of the rendezvous timeout left)", rank, pub.attempt, why,
                        max(0.0, deadline - time.monotonic()))
            continue
        if result.code != 0:
            failed = _await_notice(notice, token, pub)
            if failed is not None:
                log.error("rank %d stops: frame 0 (attempt %s) failed the gang: %s", rank, failed.attempt,
                          failed.failed)
                return EXIT_GANG
        return result.code


def _await_notice(notice: rendezvous.FileSource, token: str | None,
                  pub: rendezvous.Publication) -> rendezvous.Publication | None:
    """Frame 0's failure notice for attempt ``pub.attempt``, looked for up to :data:`NOTICE_WAIT_S` seconds."""
    deadline = time.monotonic() + NOTICE_WAIT_S
    while True:
        failed = rendezvous.failure_notice(notice, token)
        if failed is not None and failed.attempt == pub.attempt:
            return failed
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


def gang_incomplete(paths: RunPaths) -> str:
    """Rank 0's ``run.json`` error when its trainer failed with ``failure_kind`` gang_incomplete, else "".

    (Exit code 3 on rank 0 is also "cannot listen on the port"; only an incomplete gang fails the layer.)
    """
    record = runrecord.read_record_or_empty(paths)
    incomplete = record.state == "failed" and record.kind is runrecord.FailureKind.GANG_INCOMPLETE
    return (record.error or "gang incomplete") if incomplete else ""


def eat_layer(job: str, layer: str, timeout_s: float = CUEBOT_TIMEOUT_S) -> None:
    """Eat every frame of ``job``/``layer`` through pycue (Cuebot kills the running ones).

    Raises:
        ImportError: pycue is not installed for this interpreter.
        Exception: pycue/gRPC errors (Cuebot unreachable, job not found).
    """
    import opencue

    opencue.Cuebot.setTimeout(timeout_s)  # gRPC deadline [s]
    opencue.api.findLayer(job, layer).eat()


def fail_layer(paths: RunPaths, pub: rendezvous.Publication, reason: str, cue: CueFrameEnv, token: str | None,
               notice: rendezvous.FileSource, eat: Callable[[str, str], None] | None = None) -> None:
    """Frame 0 after a gang timeout: failure notice, ``run.json`` ``gang_failure``, eat the layer (module doc)."""
    layer = cue.layer or LAYER_NAME
    log.error("%s", reason)
    log.error("frame 0 fails the whole layer %r of job %r: the gang cannot form, so no frame of it should hold a "
              "host or be retried into another wait", layer, cue.job or "?")
    try:
        notice.fail(pub, reason, token)
    except rendezvous.RendezvousError as exc:
        log.error("%s; waiting ranks will not learn why they stop", exc)
    record = {"reason": reason, "at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "attempt": pub.attempt,
              "layer": layer, "job": cue.job}
    if not cue.job:
        _record_failure(paths, {**record, "cuebot": "not failed in Cuebot: CUE_JOB is not set (not run by RQD)"})
        log.error("CUE_JOB is not set (not run by RQD): no layer to fail in Cuebot")
        return
    time.sleep(NOTICE_GRACE_S)  # waiting ranks read the notice and log why they stop
    action = f"eating the frames of {cue.job}/{layer} through Cuebot (pycue)"
    _record_failure(paths, {**record, "cuebot": action})
    log.error("%s; this frame is stopped by it too", action)
    try:
        (eat or eat_layer)(cue.job, layer)
    except Exception as exc:  # noqa: BLE001 - ImportError, CueException, grpc.RpcError: all mean "could not"
        action = (f"could not fail the layer through pycue ({type(exc).__name__}: {' '.join(str(exc).split())[:300]}); "
                  "check CUEBOT_HOSTS / opencue.yaml on the render node. Frames still waiting will start, read "
                  "frame 0's failure notice and stop; kill the job with `cuetrain cancel RUN_DIR` or in CueGUI")
        log.error("%s", action)
        _record_failure(paths, {**record, "cuebot": action})
        return
    log.error("layer %s of job %s eaten: frames stopped and not retried", layer, cue.job)
    _record_failure(paths, {**record, "cuebot": f"ate the frames of {cue.job}/{layer}"})


def _record_failure(paths: RunPaths, record: dict[str, str]) -> None:
    try:
        runrecord.update_record(paths, gang_failure=record)
    except RunDirError as exc:
        log.error("cannot record the gang failure in run.json: %s", exc)


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
        rank = frame_rank(ns.frame, cue, frames_of(ns.world_size, ns.ranks_per_frame)) * ns.ranks_per_frame
        paths = RunPaths.of(train_config(train_args).run_dir)
        paths.create()
        out = RankLog(paths, rank, prefix=ns.ranks_per_frame > 1)
    except (ValueError, EnvError, ConfigError, RunDirError, OSError) as exc:
        print(f"cue_plugin.frame: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    out.attach()
    try:
        log.info("frame %d of %d on %s (pid %d), rendezvous %s, rank(s) %d-%d of %d", rank // ns.ranks_per_frame,
                 ns.world_size // ns.ranks_per_frame, socket.gethostname(), os.getpid(), ns.rendezvous, rank,
                 rank + ns.ranks_per_frame - 1, ns.world_size)
        return _run(ns, rank, paths, train_args, cue, trainer_command or TRAINER_COMMAND, out)
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

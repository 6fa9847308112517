"""``cuetrain local``: run a gang of N ranks on this machine, each exactly as a farm frame would.

Each rank is a separate ``python -m trainer.cli train`` process that gets the COPYCAT variables
(main address 127.0.0.1, a free port, its rank, the world size, the sync interval) in its
environment, the same contract a farm frame gets from ``cue_plugin.frame``. Output lines are
relayed with a ``[rank N]`` prefix and also written to ``RUN_DIR/logs/rank_N.log``.

If a rank fails, the others are stopped (SIGTERM, then SIGKILL after a grace period) and, up to
``max_restarts`` times, the whole gang is started again with ``--resume`` so it continues from
the latest complete checkpoint (OpenCue retries frames one by one; the gang restarts whole).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from trainer.envvars import copycat_env
from trainer.config import ConfigError
from trainer.rundir import FILE_MODE, RunPaths
from trainer.stop import SUPERVISOR_GRACE_S

log = logging.getLogger(__name__)

STOP_GRACE_S = SUPERVISOR_GRACE_S  # seconds between SIGTERM and SIGKILL: ranks checkpoint within --stop-grace-s


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _relay(stream: IO[bytes], rank: int, log_path: Path) -> None:
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    with os.fdopen(fd, "ab") as fh:
        for raw in iter(stream.readline, b""):
            fh.write(raw)
            fh.flush()
            sys.stdout.write(f"[rank {rank}] {raw.decode(errors='replace')}")
            sys.stdout.flush()


def _start_gang(train_argv: list[str], world_size: int, sync_interval: int, paths: RunPaths,
                threads: int) -> tuple[list[subprocess.Popen[bytes]], list[threading.Thread]]:
    port = free_port()
    token = secrets.token_hex(16)  # per gang: a stray process cannot join (trainer.gang)
    procs, relays = [], []
    for rank in range(world_size):
        env = dict(os.environ)
        env.update(copycat_env("127.0.0.1", port, rank, world_size, sync_interval, token=token))
        env.update(OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
        proc = subprocess.Popen([sys.executable, "-u", "-m", "trainer.cli", "train", *train_argv], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        t = threading.Thread(target=_relay, args=(proc.stdout, rank, paths.rank_log(rank)), daemon=True)
        t.start()
        procs.append(proc)
        relays.append(t)
    log.info("started %d ranks (main address 127.0.0.1:%d, %d thread(s) each)", world_size, port, threads)
    return procs, relays


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _wait_gang(procs: list[subprocess.Popen[bytes]]) -> tuple[int, int | None]:
    """Wait until all ranks exit 0 (returns (0, None)) or one fails (returns (code, rank))."""
    while True:
        codes = [p.poll() for p in procs]
        for rank, code in enumerate(codes):
            if code not in (None, 0):
                return code, rank
        if all(c == 0 for c in codes):
            return 0, None
        time.sleep(0.2)


def launch_local(train_argv: list[str], world_size: int, run_dir: str, *, sync_interval: int = 1,
                 max_restarts: int = 0, threads_per_rank: int | None = None) -> int:
    """Run ``world_size`` ranks here; restart the whole gang with ``--resume`` up to ``max_restarts`` times.

    Args:
        train_argv: ``cuetrain train`` arguments (must include ``--run-dir run_dir``).
        world_size: ranks to start [processes].
        run_dir: the run directory (per-rank logs go to its ``logs/``).
        sync_interval: ``COPYCAT_SYNC_INTERVAL`` [steps].
        max_restarts: gang restarts after a failure [count].
        threads_per_rank: ``OMP_NUM_THREADS`` per rank (default: CPU cores // world size, at least 1).

    Returns: 0 on success, else the failing rank's exit code.
    """
    if world_size < 1 or max_restarts < 0:
        raise ConfigError(f"--world-size {world_size} must be >= 1 and --max-restarts {max_restarts} >= 0")
    paths = RunPaths.of(run_dir)
    paths.create()
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // world_size)
    argv = list(train_argv)
    for attempt in range(max_restarts + 1):
        procs, relays = _start_gang(argv, world_size, sync_interval, paths, threads)
        try:
            code, rank = _wait_gang(procs)
        except KeyboardInterrupt:
            _stop(procs)
            raise
        if code != 0:
            log.error("rank %s exited with code %s; stopping the gang", rank, code)
            _stop(procs)
        for t in relays:
            t.join(timeout=5)
        if code == 0:
            return 0
        if attempt < max_restarts:
            log.warning("restarting the gang from the latest checkpoint (restart %d of %d)", attempt + 1, max_restarts)
            if "--resume" not in argv:
                argv.append("--resume")
    return code

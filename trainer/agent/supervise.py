"""The one rank supervisor: run L trainer processes of a gang on this host, relay their output,
stop them all together.

It serves both launchers, which differ only in where the ranks and devices come from:

- a farm frame (``cue_plugin.node.frame``): ranks ``f*L .. f*L+L-1`` of frame f (L = ranks per frame),
  the main address from the rendezvous, GPUs and threads from RQD's reservation (``CUE_GPU_CORES``,
  ``CUE_THREADS``), processes in the frame's process group (RQD's kill reaches them);
- ``cuetrain local`` (``trainer.agent.launch``): one "frame" holding every rank, main address 127.0.0.1,
  threads from this machine, each rank in its own session (Ctrl-C reaches only the supervisor, which
  stops the ranks).

As torchrun's local elastic agent does (``torch.distributed.elastic.agent.server.local_elastic_agent``,
group-level failure), the first rank that fails stops the others (SIGTERM, SIGKILL after a grace
period) and its exit code is the result. A ``watch`` callback can stop the group for an outside
reason (frame 0 started again), and a SIGTERM sent to the supervisor is passed on to every rank.

Each rank's output lines go to ``RUN_DIR/logs/rank_N.log`` and to stdout (a frame's log in CueGUI,
or the terminal), prefixed ``[rank N]`` whenever the supervisor runs more than one rank.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Callable, Mapping, Sequence

from trainer.core import signals
from trainer.core.envvars import EnvError
from trainer.core.timeouts import GRACE
from trainer.record.rankfailure import ERROR_FILE_VAR, RankFailure, clear_failure, read_failure
from trainer.record.rundir import FILE_MODE, RunPaths
from trainer.record.storage import StorageWatch

log = logging.getLogger(__name__)

#: How every rank starts, on a farm frame and in ``cuetrain local`` (the train arguments are appended):
#: ``python -u -m trainer TRAIN_ARGS`` (trainer/__main__.py, which is ``cuetrain train``).
TRAINER_COMMAND = (sys.executable, "-u", "-m", "trainer")
EXIT_NO_TRAINER = 127  # the shell's "command not found": a rank process could not be started
POLL_S = 0.2  # seconds between looks at the rank processes


@dataclass(frozen=True)
class Devices:
    """What this host gives a group of ranks, to be split evenly over them.

    Attributes:
        gpus: GPU ids (``CUE_GPU_CORES`` on a frame; nvidia-smi / PCI bus order) [ids]; empty: no split.
        threads: CPU threads for the whole group (``CUE_THREADS``) [threads]; None: leave
            ``OMP_NUM_THREADS`` as inherited.
        gpu_source: the variable ``gpus`` came from (named in errors).
    """

    gpus: tuple[str, ...] = ()
    threads: int | None = None
    gpu_source: str = "CUE_GPU_CORES"


def split_gpus(gpus: Sequence[str], ranks: int, source: str = "CUE_GPU_CORES") -> list[tuple[str, ...]]:
    """GPU ids of each of ``ranks`` local ranks: consecutive, ``len(gpus) / ranks`` each (one each when equal).

    Raises:
        EnvError: ``gpus`` is not empty and its count is not a multiple of ``ranks`` (names both and the fix).
    """
    if not gpus:
        return [() for _ in range(ranks)]
    if len(gpus) % ranks:
        raise EnvError(f"{source}={','.join(gpus)} holds {len(gpus)} GPU(s), which do not split evenly over "
                       f"{ranks} ranks per frame; reserve a multiple of {ranks} GPUs per frame (the layer asks "
                       "ranks per frame x the GPUs of one rank) or change --ranks-per-frame")
    each = len(gpus) // ranks
    return [tuple(gpus[i * each:(i + 1) * each]) for i in range(ranks)]


def device_envs(devices: Devices, ranks: int) -> list[dict[str, str]]:
    """Per local rank: ``CUDA_VISIBLE_DEVICES`` (its share of ``devices.gpus``, with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``
    because RQD numbers GPUs like nvidia-smi) and ``OMP_NUM_THREADS`` = ``threads // ranks`` (at least 1).

    Raises:
        EnvError: see :func:`split_gpus`.
    """
    shares = split_gpus(devices.gpus, ranks, devices.gpu_source)
    out: list[dict[str, str]] = []
    for share in shares:
        env: dict[str, str] = {}
        if share:
            env.update(CUDA_VISIBLE_DEVICES=",".join(share), CUDA_DEVICE_ORDER="PCI_BUS_ID")
        if devices.threads:
            env["OMP_NUM_THREADS"] = str(max(1, devices.threads // ranks))
        out.append(env)
    if devices.threads and devices.threads < ranks:
        log.warning("%d thread(s) for %d ranks: each rank gets 1 thread and they share cores", devices.threads, ranks)
    return out


def rank_envs(base: Mapping[str, str], first_rank: int, ranks: int,
              devices: Devices = Devices()) -> list[dict[str, str]]:
    """The environment of each of ``ranks`` processes: ``base`` (with the COPYCAT variables of the gang),
    ``COPYCAT_RANK = first_rank + l`` and local rank l's share of ``devices``.

    Raises:
        EnvError: see :func:`split_gpus`.
    """
    return [{**base, **share, "COPYCAT_RANK": str(first_rank + local)}
            for local, share in enumerate(device_envs(devices, ranks))]


#: Log text of one rank held in memory while the run directory is full [bytes]; beyond it the oldest is dropped
#: (the terminal or the frame's log still shows every line).
LOG_HELD_BYTES = 1 << 20


class RankLogs:
    """Rank output lines to ``RUN_DIR/logs/rank_N.log`` (mode 0640) and to ``stream`` (default stdout).

    A full run directory (ENOSPC, EDQUOT; ``trainer.record.storage``) loses no line and stops no rank: the text a
    log file could not take is held (up to :data:`LOG_HELD_BYTES` per rank, the oldest dropped beyond it, with a
    line saying how much) and written before the next line, once space returns; ``stream`` gets every line at once.

    Args:
        paths: the run directory layout.
        prefix: prefix the ``stream`` copy with ``[rank N] `` (the log files are never prefixed).
        stream: where the shared copy goes (default ``sys.stdout``, looked up at each write).
    """

    def __init__(self, paths: RunPaths, *, prefix: bool, stream: IO[str] | None = None) -> None:
        paths.logs.mkdir(mode=0o750, parents=True, exist_ok=True)
        self._paths = paths
        self._prefix = prefix
        self._stream = stream
        self._fds: dict[int, int] = {}
        self._held: dict[int, bytes] = {}  # text a full disk kept out of rank N's log, oldest first
        self._lost: dict[int, int] = {}  # bytes of rank N's log dropped beyond LOG_HELD_BYTES [bytes]
        self._full = StorageWatch(None, "rank log lines held in memory")
        self._lock = threading.Lock()

    @property
    def paths(self) -> RunPaths:
        """The run directory the logs (and the ranks' failure records) go to."""
        return self._paths

    def write(self, rank: int, text: str, *, prefixed: bool = True) -> None:
        """Write ``text`` (whole lines) of ``rank``; ``prefixed=False``: no stream prefix (the frame's own log).

        Raises:
            OSError: the log file cannot be opened or written for another reason than a full disk.
        """
        with self._lock:
            self._to_file(rank, self._held.pop(rank, b"") + text.encode("utf-8", errors="replace"))
            stream = self._stream or sys.stdout
            stream.write(f"[rank {rank}] {text}" if self._prefix and prefixed else text)
            stream.flush()

    def _to_file(self, rank: int, data: bytes) -> None:
        path = self._paths.rank_log(rank)
        lost = self._lost.pop(rank, 0)
        buf = (f"[{lost} bytes of this log lost: the disk was full]\n".encode() if lost else b"") + data
        try:
            if rank not in self._fds:
                self._fds[rank] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
            while buf:
                buf = buf[os.write(self._fds[rank], buf):]
        except OSError as exc:
            if not self._full.failed(path.name, path, exc):
                raise
            if len(buf) > len(data):  # the note of what was lost is not (wholly) written: write it again later
                self._lost[rank], buf = lost, buf[len(buf) - len(data):]
            if len(buf) > LOG_HELD_BYTES:
                self._lost[rank] = self._lost.get(rank, 0) + len(buf) - LOG_HELD_BYTES
                buf = buf[-LOG_HELD_BYTES:]
            self._held[rank] = buf
            return
        self._full.cleared(path.name, path)

    def close(self) -> None:
        """Close the log files (idempotent)."""
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()


@dataclass(frozen=True)
class GangExit:
    """How the ranks of one supervisor ended.

    Attributes:
        code: 0 when every rank exited 0; else the first failed rank's exit code (128 + signal number when
            killed; :data:`EXIT_NO_TRAINER` when it could not be started).
        rank: the rank ``code`` belongs to (None when all succeeded).
        codes: every rank's exit code.
        stopped: the ``watch`` reason when it stopped the ranks; "" otherwise.
        terminated: the supervisor got SIGTERM and passed it on.
        failure: the failure record rank ``rank`` wrote (:mod:`trainer.record.rankfailure`), None when it wrote none
            (killed by a signal, or not started).
    """

    code: int
    rank: int | None = None
    codes: Mapping[int, int] = field(default_factory=dict)
    stopped: str = ""
    terminated: bool = False
    failure: RankFailure | None = None


def _code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class _Group:
    """The started processes of one run: signalling and stopping them."""

    def __init__(self, new_session: bool) -> None:
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.relays: list[threading.Thread] = []
        self.new_session = new_session
        self.terminated: set[int] = set()  # pids already sent SIGTERM

    def signal(self, sig: int, *, once: bool = False) -> None:
        """Send ``sig`` to every running rank; ``once``: not to a rank already sent SIGTERM."""
        for proc in self.procs.values():
            if proc.poll() is None and not (once and proc.pid in self.terminated):
                if sig == signal.SIGTERM:
                    self.terminated.add(proc.pid)
                try:
                    os.killpg(proc.pid, sig) if self.new_session else proc.send_signal(sig)
                except ProcessLookupError:
                    pass

    def stop(self, grace_s: float) -> None:
        """SIGTERM every running rank not yet sent one; SIGKILL those still running after ``grace_s`` seconds.

        One SIGTERM per rank: a rank restores the default disposition once its stop checkpoint is written, so a
        second SIGTERM during its teardown would kill it (exit 143 instead of 75).
        """
        self.signal(signal.SIGTERM, once=True)
        deadline = time.monotonic() + grace_s
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        self.signal(signal.SIGKILL)
        for proc in self.procs.values():
            proc.wait()


def _relay(stream: IO[bytes], rank: int, logs: RankLogs) -> None:
    for raw in iter(stream.readline, b""):
        logs.write(rank, raw.decode("utf-8", errors="replace"))


def _start(group: _Group, command: Sequence[str], envs: Sequence[tuple[int, Mapping[str, str]]],
           logs: RankLogs) -> int | None:
    """Start every rank; returns the rank that could not be started (None when all started)."""
    for rank, env in envs:
        error_file = logs.paths.rank_failure(rank)
        clear_failure(error_file)  # a record from an earlier start must not be read as this one's
        try:
            own = {ERROR_FILE_VAR: str(error_file), signals.SUPERVISOR_PID_VAR: str(os.getpid())}  # die with us
            proc = subprocess.Popen(list(command), env={**env, **own}, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=group.new_session)
        except OSError as exc:
            log.error("cannot start the trainer of rank %d (%s): %s", rank, command[0], exc)
            return rank
        group.procs[rank] = proc
        relay = threading.Thread(target=_relay, args=(proc.stdout, rank, logs), name=f"relay-{rank}", daemon=True)
        relay.start()
        group.relays.append(relay)
    return None


def _wait(group: _Group, watch: Callable[[], str | int | None] | None, watch_s: float,
          terminated: threading.Event) -> tuple[int | None, str]:
    """Until all ranks exit 0, one fails (returns its rank), ``watch`` gives a reason (returned) or SIGTERM arrives."""
    next_watch = time.monotonic() + watch_s
    while True:
        codes = {rank: proc.poll() for rank, proc in group.procs.items()}
        failed = [rank for rank, code in codes.items() if code not in (None, 0)]
        if failed:
            return failed[0], ""
        if all(code == 0 for code in codes.values()):
            return None, ""
        if terminated.is_set():
            return None, ""
        if watch is not None and time.monotonic() >= next_watch:
            next_watch = time.monotonic() + watch_s
            try:
                reason = watch()
            except Exception as exc:  # noqa: BLE001 - a failed look must not stop training
                log.debug("watch failed: %s", exc)
                reason = None
            if isinstance(reason, int) and not isinstance(reason, bool):
                log.info("sending signal %d to the trainer(s)", reason)
                group.signal(reason)
            elif reason:
                log.warning("stopping the trainer(s): %s", reason)
                return None, reason
        time.sleep(POLL_S)


def run_ranks(command: Sequence[str], envs: Sequence[tuple[int, Mapping[str, str]]], logs: RankLogs, *,
              watch: Callable[[], str | int | None] | None = None, watch_s: float = 5.0, stop_grace_s: float = GRACE.kill_after_s(),
              new_session: bool = False) -> GangExit:
    """Run one process per ``(rank, env)`` with ``command``; return when all have ended.

    Args:
        command: the trainer command line (the same for every rank; ranks differ by environment).
        envs: ``(rank, complete environment)`` per process (see :func:`rank_envs`).
        logs: where output lines go.
        watch: called every ``watch_s`` seconds [s]; a returned reason (str) stops every rank, a returned
            signal number (int) is sent to every rank (the node agent's SIGUSR1: regroup at the next checkpoint).
        stop_grace_s: seconds between SIGTERM and SIGKILL when stopping ranks [s]; default: the grace table's,
            strictly after the trainer's checkpoint grace (:mod:`trainer.core.timeouts`).
        new_session: start each rank in its own session and signal its process group (``cuetrain local``);
            False keeps them in the caller's group (a farm frame: RQD's kill reaches them).

    Raises:
        KeyboardInterrupt: after stopping every rank (Ctrl-C on a local run).
    """
    group = _Group(new_session)
    terminated = threading.Event()

    def on_sigterm(signum: int, frame: object) -> None:
        terminated.set()
        group.signal(signal.SIGTERM)

    previous = signals.install(signals.Process.SUPERVISOR, {signals.Action.PASS_ON: on_sigterm})
    try:
        bad = _start(group, command, envs, logs)
        if bad is not None:
            group.stop(stop_grace_s)
            return _result(group, bad, "", EXIT_NO_TRAINER, paths=logs.paths)
        try:
            failed, stopped = _wait(group, watch, watch_s, terminated)
        except KeyboardInterrupt:
            group.stop(stop_grace_s)
            raise
        if failed is not None or stopped or terminated.is_set():
            if failed is not None and not terminated.is_set():
                log.error("rank %d exited with code %d; stopping the other rank(s)", failed,
                          _code(group.procs[failed].returncode))
            group.stop(stop_grace_s)
        return _result(group, failed, stopped, terminated=terminated.is_set(), paths=logs.paths)
    finally:
        for relay in group.relays:
            relay.join(timeout=5)  # a grandchild holding the pipe open must not hang the supervisor
        signals.restore(previous)


def _result(group: _Group, failed: int | None, stopped: str, code: int | None = None, *,
            terminated: bool = False, paths: RunPaths | None = None) -> GangExit:
    codes = {rank: _code(proc.returncode) for rank, proc in group.procs.items() if proc.returncode is not None}
    if failed is None:
        bad = [rank for rank, c in codes.items() if c != 0]
        if not bad:
            return GangExit(0, None, codes, stopped, terminated)
        failed = bad[0]  # stopped by watch or SIGTERM: the first rank that did not exit 0
    failure = read_failure(paths.rank_failure(failed)) if paths is not None and failed in codes else None
    return GangExit(code if code is not None else codes[failed], failed, codes, stopped, terminated, failure)

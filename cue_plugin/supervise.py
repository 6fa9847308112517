"""The frame's trainer process: run it, tee its output, stop it when told.

Output lines go to stdout (the frame log CueGUI shows; paced by :mod:`cue_plugin.framelog` so that RQD
logs every line) and to ``RUN_DIR/logs/rank_N.log``. A SIGTERM sent to the frame is passed
on to the trainer.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import IO, Callable, Sequence

from cue_plugin.framelog import PacedLines
from trainer.rundir import FILE_MODE, RunPaths

log = logging.getLogger("cue_plugin.frame")

EXIT_NO_TRAINER = 127  # the shell's "command not found"


class RankLog:
    """Writes lines to stdout (the frame log) and to ``RUN_DIR/logs/rank_N.log`` (mode 0640), line by line.

    Also a logging handler target: :meth:`attach` sends ``cue_plugin`` log records to both. Stdout goes
    through :class:`cue_plugin.framelog.PacedLines`; :meth:`close` drains it.
    """

    def __init__(self, paths: RunPaths, rank: int) -> None:
        paths.logs.mkdir(mode=0o750, parents=True, exist_ok=True)
        fd = os.open(paths.rank_log(rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        self._file: IO[str] = os.fdopen(fd, "a", encoding="utf-8", errors="replace", buffering=1)
        self._lock = threading.Lock()
        self._stdout = PacedLines(sys.stdout)
        self._handler = logging.StreamHandler(self)  # type: ignore[arg-type]
        self._handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s [frame {rank}] %(name)s: %(message)s"))

    def write(self, text: str) -> None:
        with self._lock:
            self._file.write(text)
            self._file.flush()
            self._stdout.write(text)

    def flush(self) -> None:
        """Lines are flushed as written."""

    def attach(self) -> None:
        root = logging.getLogger("cue_plugin")
        root.addHandler(self._handler)
        if root.level == logging.NOTSET or root.level > logging.INFO:
            root.setLevel(logging.INFO)

    def close(self) -> None:
        """Detach, wait until RQD has read every stdout line, close the rank log."""
        logging.getLogger("cue_plugin").removeHandler(self._handler)
        with self._lock:
            self._stdout.drain()
        self._file.close()


@dataclass(frozen=True)
class TrainerExit:
    """How the trainer ended: ``code`` (128 + signal number if killed); ``stopped`` = why the frame
    stopped it (from the ``watch``), "" when it ended on its own."""

    code: int
    stopped: str = ""


def run_trainer(command: Sequence[str], env: dict[str, str], out: RankLog, *,
                watch: Callable[[], str | None] | None = None, watch_s: float = 5.0,
                stop_grace_s: float = 10.0) -> TrainerExit:
    """Run the trainer, relaying its output lines to ``out``.

    ``watch`` is called every ``watch_s`` seconds while the trainer runs; when it
    returns a reason, the trainer is stopped (SIGTERM, SIGKILL after ``stop_grace_s`` seconds) and the reason
    is returned in :attr:`TrainerExit.stopped`.
    """
    try:
        proc = subprocess.Popen(list(command), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        log.error("cannot start the trainer %s: %s", command[0], exc)
        return TrainerExit(EXIT_NO_TRAINER)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.terminate())
    stopped: list[str] = []
    done = threading.Event()
    watcher = None
    if watch is not None:
        watcher = threading.Thread(target=_watch, args=(proc, watch, watch_s, stop_grace_s, done, stopped),
                                   name="frame-watch", daemon=True)
        watcher.start()
    try:
        assert proc.stdout is not None  # PIPE above
        for raw in iter(proc.stdout.readline, b""):
            out.write(raw.decode("utf-8", errors="replace"))
        code = proc.wait()
    finally:
        done.set()
        if watcher is not None:
            watcher.join()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return TrainerExit(128 - code if code < 0 else code, stopped[0] if stopped else "")


def _watch(proc: subprocess.Popen[bytes], watch: Callable[[], str | None], every_s: float, grace_s: float,
           done: threading.Event, stopped: list[str]) -> None:
    while not done.wait(every_s):
        try:
            reason = watch()
        except Exception as exc:  # noqa: BLE001 - a failed look must not stop training
            log.debug("publication check failed: %s", exc)
            continue
        if reason:
            log.warning("stopping the trainer: %s", reason)
            stopped.append(reason)
            proc.terminate()
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
            return

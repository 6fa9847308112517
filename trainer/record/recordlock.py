"""The exclusive lock every write of ``run.json`` holds: ``fcntl.lockf`` on ``run.json.lock`` beside it.

Writes of ``run.json`` (``trainer.record.runrecord``) are serialised (:func:`locked`): three processes on
different hosts (the submit client, frame 0's node agent, rank 0) read, merge and rewrite the file, so each
read-merge-write holds an exclusive ``fcntl.lockf`` lock on ``run.json.lock`` beside it. Why ``lockf`` and not
a lock file made with ``O_CREAT | O_EXCL``: RQD ends frames with ``killpg(SIGKILL)`` (rqd/rqd/rqnetwork.py), and an
atomic-create lock file outlives a killed holder, so every later writer would wait on a guess about
staleness (a pid means nothing on another host); a POSIX record lock is dropped by the kernel when
its holder dies, and on NFS it goes to the server (NLM for NFSv3, the protocol's own LOCK for NFSv4,
lease-based recovery when a client dies), where ``flock`` was local to one client before Linux 2.6.12.
The lock is taken on a separate file because ``run.json`` itself is replaced by ``os.replace`` (a
lock on the old inode would not exclude a writer that opened the new one); the lock file is never
removed. POSIX locks belong to a process, so threads of one process are serialised by a
``threading.Lock`` as well. Readers take no lock: the atomic rename means they never see half a file.

Rank 0 removes the temp files of writes a killed writer left under this lock (:func:`remove_stale_temp_files`),
so it never removes the temp file of a ``run.json`` write in progress.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from trainer.record.rundir import FILE_MODE, RunDirError, RunPaths, stale_temp_files

LOCK_TIMEOUT_S = 60.0  # seconds a writer waits for run.json.lock before it gives up with RunDirError
_LOCK_POLL_S = 0.01  # seconds between tries
_THREAD_LOCK = threading.RLock()  # POSIX record locks are per process: threads of one process queue here
_HELD = threading.local()  # .depth: how deeply this thread holds the lock (re-entry takes no second lockf)

log = logging.getLogger(__name__)


@contextmanager
def locked(paths: RunPaths, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the exclusive ``fcntl.lockf`` lock on ``run.json.lock`` (see the module doc for why ``lockf``).

    Re-entrant within one thread of one process (a nested ``locked`` only takes the thread lock: a POSIX
    lock is released when ANY descriptor of the file is closed, so the file is opened once).

    Raises:
        RunDirError: the lock file cannot be opened, or another writer held the lock for ``timeout_s`` [s].
    """
    with _THREAD_LOCK:
        if getattr(_HELD, "depth", 0):
            _HELD.depth += 1
            try:
                yield
            finally:
                _HELD.depth -= 1
            return
        path = paths.root / "run.json.lock"
        fd, created = _open_lock(path)
        try:
            _acquire(fd, path, timeout_s)
            _HELD.depth = 1
            try:
                yield
            except BaseException:
                if created and not paths.run_json.exists():  # a failed first write leaves nothing behind
                    path.unlink(missing_ok=True)
                raise
            finally:
                _HELD.depth = 0
                fcntl.lockf(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _open_lock(path: Path) -> tuple[int, bool]:
    """Open (creating when missing) the lock file: (descriptor, created by this call)."""
    try:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE), True
        except FileExistsError:
            return os.open(path, os.O_RDWR), False
    except OSError as exc:
        raise RunDirError(f"cannot open the run.json lock {path}: {exc}") from exc


def _acquire(fd: int, path: os.PathLike[str], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise RunDirError(f"cannot lock {path}: {exc}") from exc
        if time.monotonic() >= deadline:
            raise RunDirError(f"{path} stayed locked by another writer for {timeout_s:.0f} s (a hung process on a "
                              "stuck NFS mount?); check the processes writing this run folder")
        time.sleep(_LOCK_POLL_S)


def remove_stale_temp_files(paths: RunPaths) -> list[Path]:
    """Remove the temp files a killed writer left (``trainer.record.rundir.stale_temp_files``); return the paths
    removed, each logged at INFO.

    Rank 0 calls it once as a run starts or resumes, holding the run's lease (``trainer.record.lease``: no other run
    writes here) and, where it found any, the run.json lock (:func:`locked`: the temp file of a ``run.json`` that the
    submit client or a node agent is writing now is not stale). A run directory with none is left exactly as it was
    (no lock file: bad input must leave nothing behind).
    """
    if not stale_temp_files(paths):
        return []
    removed = []
    with locked(paths):
        for path in stale_temp_files(paths):
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            log.info("removed %s: the temp file of a write that did not finish (its writer was killed)", path)
            removed.append(path)
    return removed

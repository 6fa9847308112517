"""Riding out a full disk: ENOSPC and EDQUOT while a run writes its run directory.

A file server that is full for a few seconds or minutes while a wrangler frees space must not end a multi-hour farm
run. A writer that can wait (rank 0's run writer, the lease renewal, the rank logs' tee) asks
:func:`storage_full_errno` whether a failed write is "storage full": the ``OSError`` behind it (itself, or the cause a
:class:`trainer.record.rundir.RunDirError` wraps) has errno ``ENOSPC`` ("No space left on device") or ``EDQUOT``
("Disk quota exceeded"), errno(3). It keeps what it could not write in memory and tries again; a
:class:`StorageWatch` logs one warning naming the path and the errno when storage first fills, one when every held
write landed, and raises :class:`StorageFull` once one write has failed for longer than its grace
(``TrainConfig.storage_full_grace_s``). Any other error (read-only file system, permissions, EIO) is not storage
full: the callers raise it as before. Stdlib only.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from typing import Callable, TypeVar

from trainer.record.rundir import RunDirError

log = logging.getLogger(__name__)

#: errno values that mean "the storage is full": no space left, or the user's or group's quota exceeded (errno(3)).
STORAGE_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: How often a write held back by a full disk is tried again [s].
RETRY_S = 1.0

T = TypeVar("T")


def storage_full_errno(exc: BaseException | None) -> int | None:
    """The errno (``ENOSPC`` or ``EDQUOT``) when ``exc``, or an exception it was raised from (``__cause__``,
    ``__context__``), is an ``OSError`` of a full disk; None for any other error."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in STORAGE_FULL_ERRNOS:
            return exc.errno
        exc = exc.__cause__ or exc.__context__
    return None


def unless_full(write: Callable[[], object]) -> int | None:
    """Run ``write()`` once: None when it wrote, the errno (``ENOSPC``/``EDQUOT``) when it failed for a full disk
    (nothing is held: the caller skips or logs what it could not write).

    Raises:
        RunDirError, OSError: any other failure of ``write``, as it raised it.
    """
    try:
        write()
    except (OSError, RunDirError) as exc:
        code = storage_full_errno(exc)
        if code is None:
            raise
        return code
    return None


def describe_errno(code: int) -> str:
    """``[Errno 28] ENOSPC: No space left on device``: the number, its name and its text."""
    return f"[Errno {code}] {errno.errorcode.get(code, '?')}: {os.strerror(code)}"


class StorageFull(RunDirError):
    """The run directory's storage stayed full (ENOSPC/EDQUOT) longer than ``--storage-full-grace-s``.

    Exit code 2 (:attr:`trainer.core.exitcodes.ExitCode.USAGE`, RunDirError's ``exit_code``, as any run directory
    that cannot be written); its
    ``kind`` is ``run.json``'s ``failure_kind`` ``storage_full`` (``trainer.record.runrecord.FailureKind``).
    """

    kind = "storage_full"


class StorageWatch:
    """Tracks the writes that a full disk holds back, for one process; thread-safe.

    Each held write has a key (``metrics.jsonl``, ``checkpoint``, ``run.json``, ``lease.json``...) and the time of
    its first failure; :meth:`failed` raises :class:`StorageFull` when a key has failed for longer than
    ``grace_s``, :meth:`cleared` forgets it once it landed.

    Args:
        grace_s: how long one write may keep failing for a full disk [s]; None: forever (the lease renewal).
        holding: what the warning says is kept meanwhile (e.g. "metrics rows and checkpoints held in memory").
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, grace_s: float | None, holding: str = "", clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_s, self.holding, self._clock = grace_s, holding, clock
        self._since: dict[str, float] = {}  # key -> clock() of its first failed write
        self._full_at: float | None = None  # clock() when storage was first seen full; None: not full
        self._lock = threading.Lock()

    @property
    def full(self) -> bool:
        """True while a write is held back by a full disk."""
        with self._lock:
            return self._full_at is not None

    def failed(self, key: str, path: os.PathLike[str] | str, exc: BaseException) -> bool:
        """Note that writing ``key`` (to ``path``) failed with ``exc``.

        Returns False when ``exc`` is not a full disk (the caller raises it as before); True when it is, and the
        write is held (the first one of a full spell logs a warning naming ``path`` and the errno).

        Raises:
            StorageFull: ``key`` has failed for a full disk for longer than ``grace_s`` (names the path, the errno,
                the time and the fix).
        """
        code = storage_full_errno(exc)
        if code is None:
            return False
        with self._lock:
            now = self._clock()
            first = self._since.setdefault(key, now)
            if self._full_at is None:
                self._full_at = now
                grace = "until it is freed" if self.grace_s is None else \
                    f"for up to {self.grace_s:g} s (--storage-full-grace-s)"
                log.warning("storage full: cannot write %s (%s); %sretrying every %g s %s", path, describe_errno(code),
                            f"{self.holding}, " if self.holding else "", RETRY_S, grace)
        if self.grace_s is not None and now - first > self.grace_s:
            raise StorageFull(f"storage full for {now - first:.0f} s, longer than --storage-full-grace-s "
                              f"{self.grace_s:g}: cannot write {path} ({describe_errno(code)}); free space on the run "
                              "directory's storage (or raise its quota), then resume the run with --resume") from exc
        return True

    def cleared(self, key: str, path: os.PathLike[str] | str) -> None:
        """``key`` was written (to ``path``); the last held write of a full spell logs that storage recovered."""
        with self._lock:
            if self._since.pop(key, None) is None or self._since or self._full_at is None:
                return
            held_s, self._full_at = self._clock() - self._full_at, None
        log.warning("storage writable again: %s written after %.1f s of a full disk; nothing held back is lost",
                    path, held_s)

    def patiently(self, key: str, path: os.PathLike[str] | str, write: Callable[[], T],
                  sleep: Callable[[float], None] = time.sleep) -> T:
        """``write()``, tried again every :data:`RETRY_S` while it fails for a full disk (on the calling thread).

        Raises:
            StorageFull: still full after ``grace_s``.
            RunDirError, OSError: any other failure of ``write``, as it raised it.
        """
        while True:
            try:
                result = write()
            except (OSError, RunDirError) as exc:
                if not self.failed(key, path, exc):
                    raise
                sleep(RETRY_S)
                continue
            self.cleared(key, path)
            return result


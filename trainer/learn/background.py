"""Rank 0's one background writer thread: contact sheets, previews and checkpoints, off the training thread.

The training thread queues a write (:meth:`BackgroundWrites.submit`) and goes on; encoding, ``torch.save`` and fsync
happen on the writer thread. A write's error is kept and raised on the training thread at its next call (as
``concurrent.futures`` would at ``result()``). A full run directory (ENOSPC, EDQUOT; ``trainer.record.storage``) is
not an error here until it outlasts the grace: a checkpoint that could not be written keeps its serialized bytes and
is tried again every :data:`trainer.record.storage.RETRY_S` until it lands or a newer checkpoint replaces it (old
checkpoints are pruned only after a write landed, so the newest good one is never removed for a pending one); a
contact sheet or preview that could not be written is skipped (logged).
"""

from __future__ import annotations

import io
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from trainer.learn.contact_sheet import png_bytes
from trainer.record import ckptcopies
from trainer.record.rundir import RunDirError, RunPaths, atomic_write_bytes
from trainer.record.storage import RETRY_S, StorageWatch, describe_errno, unless_full

log = logging.getLogger(__name__)


class BackgroundWrites:
    """The writer thread of rank 0's :class:`trainer.learn.run_writer.RunWriter`.

    Args:
        paths: the run directory layout.
        keep: how many checkpoints to keep [files].
        storage: the process's :class:`trainer.record.storage.StorageWatch` (its grace bounds a held checkpoint).
    """

    def __init__(self, paths: RunPaths, keep: int, storage: StorageWatch) -> None:
        self.paths, self.keep, self.storage = paths, keep, storage
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="run-writer")
        self._pending: list[Future[None]] = []
        self._held: tuple[int, bytes] | None = None  # (step, serialized checkpoint) a full disk held back
        self._failure: BaseException | None = None  # the first error of a background write, not yet raised
        self._retry_due = False  # a retry of the held checkpoint is scheduled
        self._closed = False
        self._lock = threading.Lock()

    @property
    def held_step(self) -> int | None:
        """The step of the checkpoint a full disk holds back, or None [steps]."""
        with self._lock:
            return None if self._held is None else self._held[0]

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue ``fn(*args)`` on the writer thread, after raising the error an earlier write met."""
        self.raise_failed()
        with self._lock:
            self._pending = [f for f in self._pending if not f.done()]
            self._pending.append(self._pool.submit(self._guarded, fn, *args))

    def raise_failed(self) -> None:
        """Raise (once) the first error a background write met, on the calling (training) thread.

        Raises:
            StorageFull: a checkpoint held past the grace. RunDirError, OSError...: any other write error.
        """
        with self._lock:
            failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def picture(self, what: str, path: Path, image: np.ndarray) -> None:
        """Task: ``image`` (H, W, 3) float 0..1 as a PNG at ``path``; skipped (logged) on a full disk."""
        if (code := unless_full(lambda: atomic_write_bytes(path, png_bytes(image)))) is not None:
            log.warning("%s %s skipped: storage full (%s)", what, path, describe_errno(code))

    def checkpoint(self, step: int, state: dict[str, Any]) -> None:
        """Task: serialize ``state`` (a CPU copy) and write ``checkpoints/step_NNNNNN.pt``, then prune."""
        buf = io.BytesIO()
        torch.save(state, buf)
        self._land(step, buf.getvalue())

    def _land(self, step: int, data: bytes) -> None:
        """Write checkpoint ``step`` (``data``: its bytes) and its second copy (``trainer.record.ckptcopies``), then
        prune; on a full disk hold it and retry later (both copies again)."""
        path = self.paths.checkpoint(step)
        try:
            atomic_write_bytes(path, data)
            atomic_write_bytes(self.paths.checkpoint_copy(step), data)
        except RunDirError as exc:
            if not self.storage.failed("checkpoint", path, exc):
                raise
            with self._lock:
                if self._held is None or self._held[0] <= step:  # a newer checkpoint replaces the held one
                    self._held = (step, data)
                due, self._retry_due = self._retry_due, True
            if not due:
                timer = threading.Timer(RETRY_S, self._queue_retry)
                timer.daemon = True
                timer.start()
            return
        with self._lock:
            if self._held is not None and self._held[0] <= step:
                self._held = None
        self.storage.cleared("checkpoint", path)
        ckptcopies.prune(self.paths, self.keep)  # only after a write landed: the newest stays

    def _queue_retry(self) -> None:
        with self._lock:
            self._retry_due = False
            if self._held is not None and not self._closed:
                self._pending.append(self._pool.submit(self._guarded, self._retry_held))

    def _retry_held(self) -> None:
        with self._lock:
            held = self._held
        if held is not None:
            self._land(*held)

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        """Run a background write; keep its error for the training thread (:meth:`raise_failed`)."""
        try:
            fn(*args)
        except BaseException as exc:  # noqa: BLE001 - raised again on the training thread
            with self._lock:
                self._failure = self._failure or exc

    def flush(self, wait_held: bool = True) -> None:
        """Wait for queued writes; raise the first error. ``wait_held``: also wait until the checkpoint a full disk
        held back lands, trying again every ``RETRY_S`` (the grace bounds it: StorageFull)."""
        while True:
            with self._lock:
                pending, self._pending = self._pending, []
            for f in pending:
                f.result()  # never raises: _guarded keeps the error
            self.raise_failed()
            if not wait_held:
                return
            with self._lock:
                if self._held is None:
                    if not self._pending:
                        return
                    continue
            time.sleep(RETRY_S)
            with self._lock:
                self._pending.append(self._pool.submit(self._guarded, self._retry_held))

    def close(self) -> None:
        """Stop retrying and wait for the writer thread to finish what is queued (idempotent)."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True)

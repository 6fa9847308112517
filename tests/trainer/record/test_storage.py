"""trainer/record/storage.py: which errors are a full disk, and the watch that holds writes through one: one warning
when storage fills, one when it recovers, StorageFull (exit 2, failure_kind storage_full) past the grace."""

from __future__ import annotations

import errno
import logging
import os

import pytest

from trainer.record.rundir import RunDirError
from trainer.record.runrecord import FailureKind, failure_fields
from trainer.record.storage import StorageFull, StorageWatch, storage_full_errno, unless_full


def wrapped(code: int) -> RunDirError:
    """A RunDirError raised from an OSError with ``code``, as rundir's writers raise them."""
    try:
        try:
            raise OSError(code, os.strerror(code))
        except OSError as exc:
            raise RunDirError(f"cannot write x: {exc.strerror}") from exc
    except RunDirError as exc:
        return exc


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("code, full", [(errno.ENOSPC, True), (errno.EDQUOT, True), (errno.EIO, False),
                                        (errno.EROFS, False), (errno.EACCES, False)])
def test_only_enospc_and_edquot_are_a_full_disk(code, full):
    assert storage_full_errno(wrapped(code)) == (code if full else None)
    assert storage_full_errno(OSError(code, "x")) == (code if full else None)
    assert storage_full_errno(RunDirError("no cause")) is None


def test_one_warning_when_it_fills_one_when_it_recovers_and_the_named_failure_past_the_grace(caplog):
    clock = Clock()
    watch = StorageWatch(10.0, "held", clock=clock)
    with caplog.at_level(logging.WARNING, logger="trainer.record.storage"):
        assert watch.failed("metrics.jsonl", "/r/metrics.jsonl", wrapped(errno.ENOSPC))
        clock.now += 5
        assert watch.failed("checkpoint", "/r/ckpt.pt", wrapped(errno.ENOSPC))
        assert not watch.failed("x", "/r/x", wrapped(errno.EIO))  # not storage full: the caller raises it
        watch.cleared("metrics.jsonl", "/r/metrics.jsonl")
        assert watch.full  # the checkpoint is still held
        clock.now += 6  # 11 s after the metrics' first failure, 6 s after the checkpoint's
        assert watch.failed("checkpoint", "/r/ckpt.pt", wrapped(errno.ENOSPC))
        watch.cleared("checkpoint", "/r/ckpt.pt")
        assert not watch.full
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "storage full: cannot write /r/metrics.jsonl ([Errno 28] ENOSPC: No space left on device); held, retrying "
        "every 1 s for up to 10 s (--storage-full-grace-s)",
        "storage writable again: /r/ckpt.pt written after 11.0 s of a full disk; nothing held back is lost"]
    watch.failed("checkpoint", "/r/ckpt.pt", wrapped(errno.EDQUOT))
    clock.now += 10.5
    with pytest.raises(StorageFull, match=r"storage full for 10 s, longer than --storage-full-grace-s 10: cannot "
                                          r"write /r/ckpt.pt \(\[Errno 122\] EDQUOT: Disk quota exceeded\)") as caught:
        watch.failed("checkpoint", "/r/ckpt.pt", wrapped(errno.EDQUOT))
    assert failure_fields(caught.value) == {"failure_kind": FailureKind.STORAGE_FULL.value, "exit_code": 2}


def test_patiently_retries_a_full_disk_and_raises_anything_else():
    attempts = []

    def write() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise wrapped(errno.ENOSPC)
        return "done"

    watch = StorageWatch(60.0)
    assert watch.patiently("k", "/r/k", write, sleep=lambda s: None) == "done" and len(attempts) == 3
    with pytest.raises(RunDirError, match="cannot write x") as caught:
        watch.patiently("k", "/r/k", lambda: (_ for _ in ()).throw(wrapped(errno.EROFS)), sleep=lambda s: None)
    assert not isinstance(caught.value, StorageFull)


def test_a_write_tried_once_says_whether_a_full_disk_refused_it_and_raises_anything_else():
    written = []
    assert unless_full(lambda: written.append(1)) is None and written == [1]

    def refuse(code: int):
        def write():
            raise wrapped(code)
        return write

    assert unless_full(refuse(errno.ENOSPC)) == errno.ENOSPC
    assert unless_full(refuse(errno.EDQUOT)) == errno.EDQUOT
    with pytest.raises(RunDirError):
        unless_full(refuse(errno.EROFS))

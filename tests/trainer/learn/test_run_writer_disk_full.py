"""trainer.learn.run_writer.RunWriter on a full run directory (ENOSPC, EDQUOT): it rides the full spell out (metrics
rows held and appended in order, the failed checkpoint held and retried off the training thread, the newest good
checkpoint never pruned) and fails with StorageFull only once a write failed for longer than the grace.

The disk is "full" by :class:`FullDisk`: ``os.write`` and ``os.fsync`` of a file under the run directory fail with
ENOSPC (or EDQUOT) while it is on, as a full file server fails them mid-write; nothing needs a mount.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from trainer.learn.run_writer import RunWriter
from trainer.record import runrecord
from trainer.record.rundir import RunDirError, RunPaths, read_metrics
from trainer.record.storage import StorageFull


class FullDisk:
    """``os.write``/``os.fsync`` on files under ``root`` fail with ``code`` while :attr:`full` is True."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path, code: int = errno.ENOSPC) -> None:
        self.full, self.code, self.root = False, code, str(root)
        real_write, real_fsync = os.write, os.fsync

        def write(fd: int, data: bytes) -> int:
            self._check(fd)
            return real_write(fd, data)

        def fsync(fd: int) -> None:
            self._check(fd)
            real_fsync(fd)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fsync", fsync)

    def _check(self, fd: int) -> None:
        if self.full and os.readlink(f"/proc/self/fd/{fd}").startswith(self.root):
            raise OSError(self.code, os.strerror(self.code))


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def run(tmp_path: Path) -> RunPaths:
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    return paths


def steps_of(paths: RunPaths) -> list[int]:
    return [row["step"] for row in read_metrics(paths)]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_spell_loses_no_row_and_no_checkpoint(run, monkeypatch, caplog, code):
    disk = FullDisk(monkeypatch, run.root, code)
    writer = RunWriter(run, enabled=True, keep_checkpoints=1, storage_full_grace_s=60)
    writer.metrics({"step": 1})
    writer.checkpoint(1, {"step": 1})
    writer.flush()
    disk.full = True
    with caplog.at_level(logging.WARNING):
        writer.metrics({"step": 2})  # no exception: held
        writer.metrics({"step": 3})
        writer.checkpoint(3, {"step": 3, "w": torch.arange(4.0)})
        writer.preview(3, np.zeros((8, 8, 3), np.float32))  # skipped
        assert wait_for(lambda: writer._writes.held_step == 3)  # its write failed off the training thread
        assert steps_of(run) == [1]
        assert [s for s, _ in run.list_checkpoints()] == [1]  # the newest good one is not pruned for a pending one
        disk.full = False
        assert wait_for(lambda: run.checkpoint(3).exists())  # retried off the training thread, no call needed
        writer.metrics({"step": 4})
        writer.finish("succeeded")
    assert steps_of(run) == [1, 2, 3, 4]  # complete and in order
    assert [s for s, _ in run.list_checkpoints()] == [3]  # step 1 pruned once step 3 landed (keep 1)
    assert torch.equal(torch.load(run.checkpoint(3), weights_only=True)["w"], torch.arange(4.0))
    assert run.list_previews() == [] and not [p for p in run.root.rglob("*") if ".tmp" in p.name]
    messages = [r.getMessage() for r in caplog.records]
    full = [m for m in messages if m.startswith("storage full: cannot write")]
    assert len(full) == 1 and f"[Errno {code}] {errno.errorcode[code]}" in full[0] and str(run.metrics) in full[0]
    assert len([m for m in messages if m.startswith("storage writable again")]) == 1
    assert any("preview" in m and "skipped: storage full" in m for m in messages)


def test_a_newer_checkpoint_replaces_the_held_one(run, monkeypatch):
    disk = FullDisk(monkeypatch, run.root)
    writer = RunWriter(run, enabled=True, keep_checkpoints=2, storage_full_grace_s=60)
    writer.checkpoint(1, {"step": 1})
    writer.flush()
    disk.full = True
    writer.checkpoint(2, {"step": 2})
    writer.checkpoint(3, {"step": 3})
    assert wait_for(lambda: writer._writes.held_step == 3)
    disk.full = False
    writer.finish("succeeded")  # waits for the held checkpoint
    assert [s for s, _ in run.list_checkpoints()] == [1, 3]  # step 2 was never written: step 3 superseded it


def test_the_end_of_the_run_waits_for_the_held_writes(run, monkeypatch):
    disk = FullDisk(monkeypatch, run.root)
    writer = RunWriter(run, enabled=True, keep_checkpoints=3, storage_full_grace_s=60)
    disk.full = True
    writer.metrics({"step": 1})
    writer.checkpoint(1, {"step": 1})
    freed = threading.Timer(1.5, lambda: setattr(disk, "full", False))
    freed.start()
    writer.finish("succeeded", final_step=1)
    assert steps_of(run) == [1] and [s for s, _ in run.list_checkpoints()] == [1]


def test_storage_full_past_the_grace_fails_with_the_named_reason(run, monkeypatch):
    disk = FullDisk(monkeypatch, run.root)
    writer = RunWriter(run, enabled=True, keep_checkpoints=3, storage_full_grace_s=0.3)
    disk.full = True
    writer.metrics({"step": 1})
    time.sleep(0.35)
    with pytest.raises(StorageFull, match=r"longer than --storage-full-grace-s 0.3: cannot write .*metrics\.jsonl "
                                          r"\(\[Errno 28\] ENOSPC: No space left on device\)") as caught:
        writer.metrics({"step": 2})
    assert caught.value.kind == "storage_full" and caught.value.exit_code == 2
    writer.finish("failed")
    assert not run.metrics.exists() or steps_of(run) == []


def test_a_checkpoint_still_held_at_the_end_fails_the_flush_past_the_grace(run, monkeypatch):
    disk = FullDisk(monkeypatch, run.checkpoints)
    writer = RunWriter(run, enabled=True, keep_checkpoints=3, storage_full_grace_s=0.3)
    disk.full = True
    writer.checkpoint(1, {"step": 1})
    with pytest.raises(StorageFull, match=r"step_000001\.pt \(\[Errno 28\]"):
        writer.flush()
    writer.checkpoint(2, {"step": 2})  # fails past the grace again, as a retry's timer may after the raise
    writer.finish("failed")  # logs it: a second error must not replace the run's own
    assert run.list_checkpoints() == [] and runrecord.read_record(run).state == "failed"


def test_a_checkpoint_held_past_the_grace_fails_the_next_metrics_row(run, monkeypatch):
    disk = FullDisk(monkeypatch, run.checkpoints)  # metrics.jsonl still takes its rows
    writer = RunWriter(run, enabled=True, keep_checkpoints=3, storage_full_grace_s=0.3)
    disk.full = True
    writer.checkpoint(2, {"step": 2})
    with pytest.raises(StorageFull, match=r"step_000002\.pt"):  # raised by a retry, on the training thread
        wait_for(lambda: writer.metrics({"step": 3}), timeout_s=10)
    writer.finish("failed")


@pytest.mark.parametrize("code", [errno.EIO, errno.EROFS, errno.EACCES])
def test_any_other_write_error_fails_as_before(run, monkeypatch, code):
    disk = FullDisk(monkeypatch, run.root, code)
    writer = RunWriter(run, enabled=True, keep_checkpoints=3, storage_full_grace_s=60)
    disk.full = True
    with pytest.raises(RunDirError, match=f"cannot append to {run.metrics}") as caught:
        writer.metrics({"step": 1})
    assert not isinstance(caught.value, StorageFull)
    writer.checkpoint(1, {"step": 1})
    with pytest.raises(RunDirError, match=f"cannot write {run.checkpoint(1)}"):
        writer.flush()
    disk.full = False
    writer.finish("failed")

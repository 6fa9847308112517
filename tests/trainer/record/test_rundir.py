"""The run-directory contract: layout, atomic writes, incremental metrics reading."""

import json
import os
import stat

import pytest

from trainer.record.rundir import MetricsReader, RunDirError, RunPaths, append_metrics, atomic_write_bytes
from trainer.record.runrecord import update_record


def test_layout_and_listing(tmp_path):
    p = RunPaths.of(tmp_path / "run")
    p.create()
    for d in (p.contact_sheets, p.checkpoints, p.logs, p.rendezvous.parent):
        assert d.is_dir()
    assert p.checkpoint(250).name == "step_000250.pt" and p.contact_sheet(7).name == "step_000007.png"
    for s in (500, 250):
        p.checkpoint(s).write_bytes(b"x")
    (p.checkpoints / ".step_000750.pt.abc.tmp").write_bytes(b"partial")
    assert [s for s, _ in p.list_checkpoints()] == [250, 500]
    assert stat.S_IMODE(os.stat(p.root).st_mode) & 0o002 == 0


def test_atomic_write_keeps_old_content_when_the_rename_fails(tmp_path, monkeypatch):
    target = tmp_path / "run.json"
    atomic_write_bytes(target, b"old")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640

    def boom(*a):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(RunDirError, match=r"cannot write .*run.json: No space left on device"):
        atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(os.listdir(tmp_path)) == ["run.json"]


def test_update_record_merges_into_run_json(tmp_path):
    p = RunPaths.of(tmp_path)
    update_record(p, state="running", world_size=2)
    update_record(p, state="succeeded")
    written = json.loads(p.run_json.read_text())
    assert (written["state"], written["world_size"], written["version"]) == ("succeeded", 2, 1)


def test_metrics_reader_reads_only_new_complete_lines(tmp_path):
    p = RunPaths.of(tmp_path)
    r = MetricsReader(p.metrics)
    assert r.read_new() == []
    append_metrics(p, [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.4}])
    with open(p.metrics, "a") as fh:
        fh.write('{"step": 3, "lo')  # a writer caught mid-line
    assert [row["step"] for row in r.read_new()] == [1, 2]
    with open(p.metrics, "a") as fh:
        fh.write('ss": 0.3}\n')
    assert r.read_new() == [{"step": 3, "loss": 0.3}]
    assert r.read_new() == []
    p.metrics.write_text('{"step": 1}\n')  # restarted from scratch: file shrank
    assert r.read_new() == [{"step": 1}]


def test_a_metrics_row_cut_short_by_a_full_disk_is_taken_back_and_raised(tmp_path, monkeypatch):
    """Found by benchmarks/soak.py (disk_full on a tmpfs): a full filesystem accepted part of a row (a short
    ``write``), which was ignored; the next row, once there was space again, continued the cut line, so
    ``metrics.jsonl`` held one unreadable line in place of two rows."""
    p = RunPaths.of(tmp_path)
    append_metrics(p, [{"step": 5, "loss": 0.5}])
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:7]))  # the disk took 7 bytes
    with pytest.raises(RunDirError, match=r"cannot append to .*metrics.jsonl: No space left on device"):
        append_metrics(p, [{"step": 10, "loss": 0.4}])
    monkeypatch.setattr(os, "write", real_write)
    append_metrics(p, [{"step": 15, "loss": 0.3}])  # space again
    assert [json.loads(line)["step"] for line in p.metrics.read_text().splitlines()] == [5, 15]


def test_create_in_read_only_location_is_clear(tmp_path, monkeypatch):
    from pathlib import Path

    def read_only(self, *a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(RunDirError, match=r"cannot create run directory folder .*run: Read-only file system; choose"):
        RunPaths.of(tmp_path / "run").create()

"""trainer/agent/supervise.py RankLogs on a full run directory: the relay thread never dies of ENOSPC (a dead relay
would stop reading the rank's pipe and block the rank); the lines a full disk kept out are written, in order, once
it frees, and the terminal copy gets every line at once."""

from __future__ import annotations

import errno
import io
import os

import pytest

from trainer.agent import supervise
from trainer.agent.supervise import RankLogs
from trainer.record.rundir import RunPaths


@pytest.fixture
def full_logs(tmp_path, monkeypatch):
    paths = RunPaths.of(tmp_path / "run")
    disk = {"full": False, "code": errno.ENOSPC}
    real_write = os.write

    def write(fd, data):
        if disk["full"] and os.readlink(f"/proc/self/fd/{fd}").startswith(str(paths.logs)):
            raise OSError(disk["code"], os.strerror(disk["code"]))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    return paths, disk


def test_lines_a_full_disk_kept_out_are_written_in_order_once_it_frees(full_logs):
    paths, disk = full_logs
    shown = io.StringIO()
    logs = RankLogs(paths, prefix=True, stream=shown)
    logs.write(0, "one\n")
    disk["full"] = True
    logs.write(0, "two\n")  # no exception: held
    logs.write(1, "other rank\n")
    assert paths.rank_log(0).read_text() == "one\n"
    disk["full"] = False
    logs.write(0, "three\n")
    logs.write(1, "again\n")
    logs.close()
    assert paths.rank_log(0).read_text() == "one\ntwo\nthree\n"
    assert paths.rank_log(1).read_text() == "other rank\nagain\n"
    assert shown.getvalue() == "[rank 0] one\n[rank 0] two\n[rank 1] other rank\n[rank 0] three\n[rank 1] again\n"


def test_a_long_spell_keeps_the_newest_text_and_says_how_much_was_lost(full_logs, monkeypatch):
    paths, disk = full_logs
    monkeypatch.setattr(supervise, "LOG_HELD_BYTES", 10)
    logs = RankLogs(paths, prefix=False, stream=io.StringIO())
    disk["full"] = True
    logs.write(0, "0123456789\n")
    logs.write(0, "abc\n")
    disk["full"] = False
    logs.write(0, "end\n")
    logs.close()
    assert paths.rank_log(0).read_text() == "[5 bytes of this log lost: the disk was full]\n56789\nabc\nend\n"


def test_any_other_write_error_is_raised(full_logs):
    paths, disk = full_logs
    logs = RankLogs(paths, prefix=False, stream=io.StringIO())
    disk.update(full=True, code=errno.EIO)
    with pytest.raises(OSError) as caught:
        logs.write(0, "x\n")
    assert caught.value.errno == errno.EIO
    logs.close()

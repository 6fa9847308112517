"""Ranks write a structured failure record; the supervisor reads it (no log scraping)."""

from __future__ import annotations

import io
import socket
import sys
from pathlib import Path

from trainer.record.rankfailure import RankFailure, read_failure, record_failure
from trainer.record.rundir import RunPaths, atomic_write_json
from trainer.agent.supervise import RankLogs, run_ranks


def test_a_trainer_refusing_its_settings_records_usage_with_its_message(tmp_path: Path) -> None:
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    missing = tmp_path / "no_such_folder"
    command = [sys.executable, "-m", "trainer.cli", "train", "--input", str(missing), "--target",
               str(missing), "--run-dir", str(paths.root), "--steps", "1"]
    logs = RankLogs(paths, prefix=True, stream=io.StringIO())
    result = run_ranks(command, [(1, {"PATH": "/usr/bin:/bin", "COPYCAT_RANK": "1"})], logs, stop_grace_s=5)
    logs.close()
    assert result.code == 2 and result.rank == 1
    failure = result.failure
    assert failure is not None, "the rank wrote no failure record"
    assert (failure.exit_code, failure.kind, failure.rank, failure.host) == (2, "usage", 1, socket.gethostname())
    assert str(missing) in failure.message
    assert "cuetrain: error: " + failure.message in paths.rank_log(1).read_text()  # the same words as the log line
    assert read_failure(paths.rank_failure(1)) == failure


def test_a_stale_record_is_cleared_and_a_killed_rank_has_none(tmp_path: Path) -> None:
    paths = RunPaths.of(tmp_path)
    paths.create()
    atomic_write_json(paths.rank_failure(0), {"exit_code": 2, "kind": "usage", "message": "old", "rank": 0,
                                              "host": "h", "at": 0.0})
    logs = RankLogs(paths, prefix=False, stream=io.StringIO())
    kill_self = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    result = run_ranks([sys.executable, "-c", kill_self], [(0, {"PATH": "/usr/bin:/bin"})], logs, stop_grace_s=5)
    logs.close()
    assert result.code == 128 + 9 and result.failure is None
    assert not paths.rank_failure(0).exists()


def test_record_failure_writes_only_when_a_supervisor_asked(tmp_path: Path) -> None:
    exc = ValueError("bad value")
    assert record_failure(2, exc, env={}) is None
    target = tmp_path / "rank_3.failure.json"
    written = record_failure(1, exc, "ValueError: bad value",
                             env={"CUETRAIN_ERROR_FILE": str(target), "COPYCAT_RANK": "3"})
    assert isinstance(written, RankFailure) and written.kind == "error" and written.rank == 3
    assert read_failure(target) == written


def test_an_argument_error_is_recorded_with_argparse_message(tmp_path: Path) -> None:
    paths = RunPaths.of(tmp_path)
    paths.create()
    logs = RankLogs(paths, prefix=False, stream=io.StringIO())
    command = [sys.executable, "-m", "trainer.cli", "train", "--no-such-flag", "--run-dir", str(tmp_path)]
    result = run_ranks(command, [(0, {"PATH": "/usr/bin:/bin", "COPYCAT_RANK": "0"})], logs, stop_grace_s=5)
    logs.close()
    assert result.code == 2 and result.failure is not None
    assert result.failure.kind == "usage" and "--no-such-flag" in result.failure.message

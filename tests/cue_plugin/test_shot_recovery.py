"""Bad input on the file server, through a real frame (node agent + 2 real trainers): a Ground Truth frame
deleted while the gang trains stops it with one error naming the file and a rank (exit 80); the node agent's
recovery restarts the gang from its checkpoint, which trains to the end once the file is back, and which
fails the frame with the same file named when it stays missing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import CHILD_PYTHONPATH, ROOT, make_pairs
from trainer.record import runrecord
from trainer.core.exitcodes import ExitCode
from trainer.record.rundir import RunPaths


def _start_frame(tmp_path: Path, dirs: tuple[Path, Path], max_restarts: int) -> tuple[subprocess.Popen, RunPaths]:
    run = tmp_path / "run"
    cmd = [sys.executable, "-u", "-m", "cue_plugin.frame", "--frame", "0", "--world-size", "2", "--ranks-per-frame",
           "2", "--rendezvous", "file", "--rendezvous-timeout", "60", "--max-restarts", str(max_restarts), "--",
           "--input", str(dirs[0]), "--target", str(dirs[1]), "--run-dir", str(run), "--steps", "150",
           "--batch-size", "2", "--crop-size", "16", "--log-interval", "2", "--checkpoint-interval", "10",
           "--shot-check-s", "0.2"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COPYCAT_", "CUE_", "MASTER_", "RANK"))}
    env.update(PYTHONPATH=CHILD_PYTHONPATH, OMP_NUM_THREADS="1", CUETRAIN_MAIN_HOST="127.0.0.1", CUE_IFRAME="0",
               CUE_JOB_ID="job-shot-recovery", CUETRAIN_GANG_TOKEN="e" * 32, CUETRAIN_EXPORT_ONNX="0")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, RunPaths.of(run)


def _wait_for(what, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert proc.poll() is None and time.monotonic() < deadline, "the frame ended or took too long"
        time.sleep(0.1)


def _checkpointed(paths: RunPaths) -> bool:
    return bool(paths.list_checkpoints())  # not the folder: checkpoints/copy/ is there from the start


def _errors(paths: RunPaths) -> list[str]:
    return [m for r in (0, 1) if paths.rank_log(r).exists()
            for m in re.findall(r"cuetrain: error: (.*)", paths.rank_log(r).read_text())]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_gang_restarts_from_its_checkpoint_when_the_deleted_frame_is_back(tmp_path):
    dirs = make_pairs(tmp_path / "data", frames=4, ext="exr")
    proc, paths = _start_frame(tmp_path, dirs, max_restarts=2)
    victim, away = dirs[1] / "plate.1002.exr", tmp_path / "away.exr"
    try:
        _wait_for(lambda: _checkpointed(paths), 120, proc)
        os.rename(victim, away)  # deleted on the file server
        _wait_for(lambda: len(_errors(paths)) >= 2, 60, proc)  # both ranks said why they stopped
        os.rename(away, victim)  # and back, during the agent's backoff
        out, _ = proc.communicate(timeout=200)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-4000:]
    first = _errors(paths)
    assert len(set(first)) == 1 and re.match(rf"rank \d \(host .*\): {victim} was deleted .*after training started",
                                             first[0]), first
    record = runrecord.read_record(paths)
    assert record.state == "succeeded" and record.final_step == 150 and record.gang["restarts"] == 1, record
    assert len(record.attempts) == 2 and record.attempts[1]["start_step"] >= 10  # resumed from its checkpoint
    (host,) = record.data["hosts"].values()  # the restart found the host copy in place: it read no frame again
    assert host["ranks"] == [0, 1] and host["frames"] == 0 and host["shot_reads"] == 0.0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_frame_that_stays_missing_fails_the_frame_with_the_file_named(tmp_path):
    dirs = make_pairs(tmp_path / "data", frames=4, ext="exr")
    proc, paths = _start_frame(tmp_path, dirs, max_restarts=1)
    victim = dirs[1] / "plate.1002.exr"
    try:
        _wait_for(lambda: _checkpointed(paths), 120, proc)
        victim.unlink()
        out, _ = proc.communicate(timeout=200)
    finally:
        proc.kill()
    assert proc.returncode == ExitCode.DATA_CHANGED, out[-4000:]
    record = runrecord.read_record(paths)
    assert (record.state, record.failure_kind, record.exit_code) == ("failed", "data_changed", 80)
    assert f"{victim}; restore them" in record.error and "gone from the file server" in record.error
    assert record.gang["restarts"] == 1
    assert "restart budget is spent" in out

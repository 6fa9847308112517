"""The data phase (trainer.data.shot_loading): run.json's record of the shot and the bytes each host read, the shot
watch, and a changed file stopping a real 2-rank gang with one message."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import CHILD_PYTHONPATH, ROOT, make_pairs
from trainer.record import runrecord
from trainer.data.colour import ColourSpec
from trainer.core.config import TrainConfig
from trainer.data.shot_loading import open_data
from trainer.gang.distributed import Runtime
from trainer.core.envvars import DistEnv
from trainer.core.exitcodes import ExitCode
from trainer.record.rundir import RunPaths
from trainer.data.shot import ShotChanged

ALONE = Runtime(DistEnv(distributed=False), torch.device("cpu"), "none")


def _cfg(dirs, run: Path, **kw) -> TrainConfig:
    return TrainConfig(input_dir=str(dirs[0]), target_dir=str(dirs[1]), run_dir=str(run), **kw)


def test_run_json_records_the_shot_the_copy_and_what_the_host_read(tmp_path):
    dirs = make_pairs(tmp_path / "data", frames=3, ext="exr")
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    data = open_data(_cfg(dirs, paths.root, data_cache_mb=0), ALONE, ColourSpec(), paths)
    data.close()
    record = runrecord.read_record(paths).data
    shot_bytes = sum(p.stat().st_size for d in dirs for p in d.iterdir())
    assert record["shot"]["frames"] == [1001, 1002, 1003] and record["shot"]["bytes"] == shot_bytes
    assert record["cache"]["data_cache_mb"] == 0 and Path(record["cache"]["folder"]).is_dir()
    host = record["hosts"][socket.gethostname()]
    assert host["ranks"] == [0] and host["frames"] == 3 and host["decoded_bytes"] == shot_bytes
    assert host["shot_reads"] == 1.0
    assert shot_bytes <= host["rchar"] < 3 * shot_bytes  # /proc/self/io: the files, read once (and headers)


def test_a_bad_file_fails_the_data_phase_with_a_record_naming_the_rank_and_the_file(tmp_path):
    dirs = make_pairs(tmp_path / "data", frames=3, ext="exr")
    victim = dirs[1] / "plate.1002.exr"
    victim.write_bytes(b"not an exr")
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    with pytest.raises(Exception, match=rf"^rank 0 \(host .*\): cannot read image {victim}"):
        open_data(_cfg(dirs, paths.root), ALONE, ColourSpec(), paths)
    assert not paths.run_json.exists()  # a fresh run: bad input writes no record (tests/test_bad_input.py)
    runrecord.update_record(paths, state="running")  # a restart: the run has a record, the failure goes in it
    with pytest.raises(Exception, match=rf"^rank 0 \(host .*\): cannot read image {victim}"):
        open_data(_cfg(dirs, paths.root), ALONE, ColourSpec(), paths)
    record = runrecord.read_record(paths)
    assert (record.state, record.failure_kind, record.exit_code, record.failed_rank) == ("failed", "error", 2, 0)
    assert str(victim) in record.error


def test_the_watch_raises_at_its_vote_steps_once_a_file_changed(tmp_path):
    dirs = make_pairs(tmp_path / "data", frames=3, ext="exr")
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    data = open_data(_cfg(dirs, paths.root, log_interval=5, shot_check_s=0.05), ALONE, ColourSpec(), paths)
    data.watch(5)  # nothing changed
    victim = dirs[0] / "plate.1003.exr"
    victim.unlink()
    deadline = time.monotonic() + 10
    while not data.watch.problem and time.monotonic() < deadline:
        time.sleep(0.05)
    data.watch(7)  # not a vote step
    with pytest.raises(ShotChanged, match=rf"^rank 0 \(host .*\): {victim} was deleted .* after training started"):
        data.watch(10)
    data.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_file_deleted_during_training_stops_the_gang_with_one_message_and_no_hang(tmp_path):
    """2 ranks train; a Ground Truth frame is deleted: every rank exits 80 within seconds with the same error line,
    which names the file and a rank; run.json records it. ``--max-restarts 1``: the restarted gang finds the
    frame still missing and fails again with the file named, so a missing file that stays missing ends the run."""
    dirs = make_pairs(tmp_path / "data", frames=4, ext="exr")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "trainer.cli", "local", "--world-size", "2", "--max-restarts", "1", "--input",
           str(dirs[0]), "--target", str(dirs[1]), "--run-dir", str(run), "--steps", "100000", "--batch-size", "2",
           "--crop-size", "16", "--log-interval", "2", "--checkpoint-interval", "20", "--shot-check-s", "0.2"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    paths = RunPaths.of(run)
    try:
        deadline = time.monotonic() + 120
        while not _checkpointed(paths) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert _checkpointed(paths), "training did not reach its first checkpoint"
        victim = dirs[1] / "plate.1003.exr"
        victim.unlink()
        t0 = time.monotonic()
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == ExitCode.DATA_CHANGED, out[-3000:]
    errors = re.findall(r"\[rank (\d)\] cuetrain: error: (.*)", out)
    first = [msg for _, msg in errors[:2]]  # the first attempt: both ranks, one message
    assert len(set(first)) == 1 and re.match(rf"rank \d \(host .*\): {victim} was deleted .*after training started",
                                             first[0]), out[-3000:]
    again = [msg for _, msg in errors[2:]]  # the restart (--resume): the frame is still gone
    assert again and all(f"{victim}" in m and "gone from the file server" in m for m in again), out[-3000:]
    record = runrecord.read_record(paths)
    assert (record.state, record.failure_kind, record.exit_code) == ("failed", "data_changed", 80)
    assert str(victim) in record.error and len(record.attempts) == 1  # the restart failed before training
    assert time.monotonic() - t0 < 90  # no rank waited out a timeout


def _checkpointed(paths: RunPaths) -> bool:
    return bool(paths.list_checkpoints())  # not the folder: checkpoints/copy/ is there from the start


def _env(tmp_path: Path) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("COPYCAT_", "MASTER_", "RANK", "WORLD_SIZE"))}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": CHILD_PYTHONPATH, "CUETRAIN_SCRATCH": str(tmp_path / "scratch")}

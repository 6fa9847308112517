"""An attempt that fails before its steps begin (trainer.learn.train.train, runrecord.record_failed_start): run.json
says so when the run has one, and keeps what the writer recorded when the steps had begun."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import CHILD_PYTHONPATH, CPU_BF16_HOOK, ROOT, run_cli
from tests.trainer.learn.test_train import NON_DIST, _crash_after_step_4, cfg
from trainer.core.config import ConfigError
from trainer.learn import train as train_mod
from trainer.record import runrecord
from trainer.record.rundir import RunPaths


def _record(run_dir) -> dict:
    return json.loads(RunPaths.of(run_dir).run_json.read_text())


def test_a_resume_refused_after_a_killed_attempt_says_failed_not_running(pairs, tmp_path):
    """RQD kills with SIGKILL, which leaves run.json at ``running``; the retry's ``--resume`` is refused (its
    checkpoints were written by Muon, the retry asks for Adam) and exits 2: run.json must say failed, why, and with
    that exit code, not ``running`` for a run nothing trains."""
    run = tmp_path / "run"
    train_mod.train(cfg(pairs, run, optimizer="muon"), NON_DIST)
    runrecord.update_record(RunPaths.of(run), state="running")  # as a killed attempt leaves it
    attempts = len(_record(run)["attempts"])
    proc = run_cli("train", "--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir", str(run),
                   "--steps", "12", "--batch-size", "4", "--crop-size", "16", "--resume", "--optimizer", "adam")
    assert proc.returncode == 2, proc.stderr
    record = _record(run)
    assert record["state"] == "failed" and record["exit_code"] == 2 and record["failed_rank"] == 0
    assert "trained with --optimizer muon, but --optimizer is adam" in record["error"]
    assert record["error"].startswith("ConfigError: ") and record["failure_kind"] == "error" and record["failed_at"]
    assert len(record["attempts"]) == attempts  # no attempt began


def test_a_resume_refused_after_a_finished_run_says_failed(pairs, tmp_path):
    run = tmp_path / "run"
    train_mod.train(cfg(pairs, run, optimizer="muon"), NON_DIST)
    assert _record(run)["state"] == "succeeded"
    with pytest.raises(ConfigError, match="--optimizer is adam"):
        train_mod.train(cfg(pairs, run, steps=12, resume=True, optimizer="adam"), NON_DIST)
    assert _record(run)["state"] == "failed"


def test_a_failure_after_the_steps_began_keeps_the_writers_record(pairs, tmp_path, monkeypatch):
    run = tmp_path / "run"
    _crash_after_step_4(monkeypatch, cfg(pairs, run))
    record = _record(run)
    assert record["state"] == "failed" and record["error"] == "RuntimeError: simulated node loss"
    assert record["failed_at"] == "" and len(record["attempts"]) == 1  # the writer's record, not a second one


def test_a_fresh_run_refused_after_its_data_phase_says_failed(pairs, tmp_path):
    """The data phase wrote run.json's data record (the Runs panel lists the run from then on); a source model that
    is not one is refused after it: run.json says failed and why. (Before the data phase there is no run.json, and
    bad input is the error message alone: tests/trainer/data.)"""
    bad = tmp_path / "not_a_model.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match="not_a_model.pt"):
        train_mod.train(cfg(pairs, tmp_path / "run", init_from=str(bad)), NON_DIST)
    record = _record(tmp_path / "run")
    assert record["state"] == "failed" and record["exit_code"] == 2 and "not_a_model.pt" in record["error"]
    assert record["data"]["shot"] and record["attempts"] == []


#: A ``sitecustomize`` for rank 1 only: every checkpoint fails its CRC-32 check there (``ckptcopies.damage``), as on a
#: host whose mount of the run directory serves damaged files; then the --cpu-bf16 hook it shadows.
_RANK1_SEES_DAMAGE = f"""
import os, runpy, zipfile
if os.environ.get("COPYCAT_RANK") == "1":
    zipfile.ZipFile.testzip = lambda self: "data.pkl"
runpy.run_path({str(CPU_BF16_HOOK / "sitecustomize.py")!r})
"""


def test_a_gang_whose_rank_1_cannot_resume_says_rank_lost_in_run_json(pairs, tmp_path):
    """Rank 1 cannot load the step rank 0 resumes from and exits before the steps begin; rank 0's next collective
    fails. run.json names the lost rank, as a failure during training does (``explain_failure``), not the succeeded
    the first run left."""
    run, hook = tmp_path / "run", tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_RANK1_SEES_DAMAGE)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(hook), CHILD_PYTHONPATH])}
    common = ["local", "--world-size", "2", "--max-restarts", "0", "--input", str(pairs[0]), "--target",
              str(pairs[1]), "--run-dir", str(run), "--batch-size", "2", "--crop-size", "16",
              "--checkpoint-interval", "10", "--collective-timeout-s", "30"]
    first = run_cli(*common, "--steps", "10")
    assert first.returncode == 0 and _record(run)["state"] == "succeeded", first.stdout + first.stderr
    again = subprocess.run([sys.executable, "-m", "trainer.cli", *common, "--steps", "20", "--resume"], env=env,
                           cwd=ROOT, text=True, capture_output=True, timeout=300)
    assert again.returncode != 0
    assert "neither" in RunPaths.of(run).rank_log(1).read_text()  # rank 1's own error: no intact copy of step 10
    record = _record(run)
    assert record["state"] == "failed" and record["failure_kind"] == "rank_lost" and record["exit_code"] == 4
    assert "lost rank 1" in record["error"] and len(record["attempts"]) == 1, record


def test_a_record_that_cannot_be_written_leaves_the_attempts_own_error(pairs, tmp_path, monkeypatch, caplog):
    """A full disk or a lost mount as the failure is recorded: the rank still raises its own error, and says why
    run.json was not updated."""
    from trainer.record.rundir import RunDirError

    run = tmp_path / "run"
    train_mod.train(cfg(pairs, run, optimizer="muon"), NON_DIST)

    def full(*_args, **_kw):
        raise RunDirError(f"cannot write {RunPaths.of(run).run_json}: No space left on device")

    monkeypatch.setattr(runrecord, "record_failed_start", full)
    with pytest.raises(ConfigError, match="--optimizer is adam"):
        train_mod.train(cfg(pairs, run, steps=12, resume=True, optimizer="adam"), NON_DIST)
    assert "could not record the failed start" in caplog.text and "No space left" in caplog.text
    assert _record(run)["state"] == "succeeded"

"""An attempt that fails before its steps begin (trainer.learn.train.train, runrecord.record_failed_start): run.json
says so when the run has one, and keeps what the writer recorded when the steps had begun."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli
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

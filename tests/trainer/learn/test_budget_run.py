"""``--time-budget`` and ``--stop-when-flat`` through real training runs (trainer.learn.train with
trainer.core.stopping deciding, trainer.learn.stopping recording and scoring, trainer.data.holdout's frames)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.trainer.learn.test_train import NON_DIST, cfg
from trainer.core import stopping as budget_mod
from trainer.data.holdout import HOLDOUT_EVERY, FrameSubset, split_frames
from trainer.learn import stopping as stopping_mod
from trainer.learn import train as train_mod
from trainer.record.rundir import RunPaths, read_metrics
from trainer.core.exitcodes import ExitCode
from trainer.record import runrecord
from trainer.record.runrecord import read_record

CAP = 100_000


def _deadline_in(seconds: float) -> str:
    return datetime.fromtimestamp(time.time() + seconds, timezone.utc).isoformat()


class _StepClock(budget_mod.BudgetClock):
    """A BudgetClock whose clock reads :data:`STEP_S` a step from a whole second T0: the plan is exact, whatever this
    machine's load. Both are binary fractions, so T0 + STEP_S * step and the ISO deadline T0 + 10 s are exact floats
    (0.05 s steps at 1.8e9 s rounded the 200th step's plan down to 199 on a CI run)."""

    T0 = 0.0
    STEP_S = 0.0625  # 1/16 s

    def mark(self, step, now=None):
        super().mark(step, self.T0 + self.STEP_S * step)

    def propose(self, step, now=None):
        return super().propose(step, self.T0 + self.STEP_S * step)


def test_a_budget_run_ends_on_the_planned_step_with_the_cosine_run_over_it(pairs, tmp_path, monkeypatch):
    """10 s at 1/16 s a step: 160 steps, whose last update is the schedule's last (lr at its floor)."""
    monkeypatch.setattr(budget_mod, "DEFAULT_EXPORT_S", 0.0)
    monkeypatch.setattr(budget_mod, "SHUTDOWN_S", 0.0)
    monkeypatch.setattr(budget_mod, "ONNX_EXPORT_S", 0.0)
    _StepClock.T0 = float(int(time.time()))
    monkeypatch.setattr(stopping_mod, "BudgetClock", _StepClock)
    text = datetime.fromtimestamp(_StepClock.T0 + 10.0, timezone.utc).isoformat()
    c = cfg(pairs, tmp_path / "run", steps=CAP, time_budget=text, log_interval=5, checkpoint_interval=10_000,
            contact_sheet_interval=10_000, warmup_steps=5, ema_decay=0.0)
    result = train_mod.train(c, NON_DIST)
    record = read_record(RunPaths.of(c.run_dir))
    assert record.state == "succeeded" and result.step == 160 == record.final_step == record.budget["stop_step"]
    assert record.budget["text"] == text and record.budget["export_s"] >= 0.0
    rows = read_metrics(RunPaths.of(c.run_dir))
    peak = train_mod.effective_lr(c, 1)
    floor = c.cosine_floor  # colour with Muon: 0.3
    assert rows[-1]["step"] == 160 and rows[-1]["lr"] == pytest.approx(train_mod.lr_at(159, 160, peak, 5, floor=floor))
    assert rows[-1]["lr"] < (floor + 0.01) * peak and max(r["lr"] for r in rows) > 0.95 * peak  # the whole cosine


def test_a_budget_run_stops_by_its_deadline_on_the_real_clock(pairs, tmp_path, monkeypatch):
    monkeypatch.setattr(budget_mod, "DEFAULT_EXPORT_S", 0.0)
    monkeypatch.setattr(budget_mod, "SHUTDOWN_S", 0.0)
    monkeypatch.setattr(budget_mod, "ONNX_EXPORT_S", 0.0)
    c = cfg(pairs, tmp_path / "run", steps=CAP, time_budget=_deadline_in(12.0), log_interval=5,
            checkpoint_interval=10_000, contact_sheet_interval=10_000)
    result = train_mod.train(c, NON_DIST)
    record = read_record(RunPaths.of(c.run_dir))
    # stopped at the deadline, not at --steps (hours away); the slack is for a CI machine whose steps slow down
    assert time.time() < record.budget["deadline_unix"] + 10.0 and result.step == record.budget["stop_step"] < CAP


def test_a_restart_resumes_the_saved_plan_and_its_cosine_from_the_first_update(pairs, tmp_path, monkeypatch):
    """The first attempt planned step 40 and was lost at its checkpoint of step 20; the restart's lr follows the
    cosine over 40 steps from its first update (without the saved plan it ran over --steps, 100,000, near the peak
    lr, until the first plan at step 25)."""
    for name in ("DEFAULT_EXPORT_S", "SHUTDOWN_S", "ONNX_EXPORT_S"):
        monkeypatch.setattr(budget_mod, name, 0.0)
    _StepClock.T0 = float(int(time.time()) + 1000)  # the fake clock's deadline lies ahead of the real one too
    monkeypatch.setattr(stopping_mod, "BudgetClock", _StepClock)
    text = datetime.fromtimestamp(_StepClock.T0 + 2.5, timezone.utc).isoformat()  # 40 steps at 1/16 s from T0
    common = dict(log_interval=5, checkpoint_interval=20, contact_sheet_interval=10_000, warmup_steps=5, ema_decay=0.0)
    train_mod.train(cfg(pairs, tmp_path / "run", steps=20, **common), NON_DIST)  # the checkpoint of step 20
    paths = RunPaths.of(tmp_path / "run")
    runrecord.update_record(paths, budget={"text": text, "deadline_unix": _StepClock.T0 + 2.5, "stop_step": 40})
    first_rows = len(read_metrics(paths))
    c = cfg(pairs, tmp_path / "run", steps=CAP, time_budget=text, resume=True, **common)
    assert train_mod.train(c, NON_DIST).step == 40
    rows = read_metrics(paths)[first_rows:]
    peak = train_mod.effective_lr(c, 1)
    assert [r["step"] for r in rows] == [25, 30, 35, 40]
    assert [r["lr"] for r in rows] == pytest.approx([train_mod.lr_at(s - 1, 40, peak, 5, floor=c.cosine_floor)
                                                     for s in (25, 30, 35, 40)])


def test_a_budget_duration_counts_from_the_start_of_training(pairs, tmp_path):
    """Not from the process's start (this pytest process started long before): the deadline is at least the
    duration after train() was called."""
    called = time.time()
    train_mod.train(cfg(pairs, tmp_path / "run", steps=4, time_budget="600s"), NON_DIST)
    assert read_record(RunPaths.of(tmp_path / "run")).budget["deadline_unix"] >= called + 600.0


def test_a_deadline_past_before_the_first_start_is_an_error_with_nothing_written(pairs, tmp_path):
    run = tmp_path / "run"
    out = run_cli("train", "--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir", str(run),
                  "--batch-size", "4", "--crop-size", "16", "--time-budget", _deadline_in(-60.0))
    assert out.returncode == ExitCode.USAGE, out.stderr[-2000:]
    assert "passed before this run started training, and it has no checkpoint to export" in out.stderr
    paths = RunPaths.of(run)
    assert not paths.list_checkpoints() and not paths.model.exists() and not read_metrics(paths)
    assert not paths.run_json.exists() or read_record(paths).state != "succeeded"


def test_a_restart_past_its_deadline_exports_its_checkpoint_at_once(pairs, tmp_path, caplog):
    train_mod.train(cfg(pairs, tmp_path / "run", steps=4, checkpoint_interval=4), NON_DIST)
    paths = RunPaths.of(tmp_path / "run")
    paths.model.unlink()
    c = cfg(pairs, tmp_path / "run", steps=CAP, time_budget=_deadline_in(-60.0), resume=True, log_interval=2)
    with caplog.at_level("WARNING"):
        result = train_mod.train(c, NON_DIST)
    record = read_record(paths)
    assert result.step == result.start_step == 4 and paths.model.is_file()
    assert (record.state, record.final_step, record.budget["stop_step"]) == ("succeeded", 4, 4)
    assert [r["step"] for r in read_metrics(paths)] == [2, 4]  # the first attempt's rows only: nothing trained
    assert "the deadline passed before this restart; exporting the checkpoint of step 4" in caplog.text


def test_two_ranks_stop_on_the_step_rank_0_plans(pairs, tmp_path):
    run = tmp_path / "run"
    out = run_cli("local", "--world-size", "2", "--input", str(pairs[0]), "--target", str(pairs[1]),
                  "--run-dir", str(run), "--batch-size", "4", "--crop-size", "16", "--log-interval", "5",
                  "--contact-sheet-interval", "100000", "--checkpoint-interval", "100000",
                  "--time-budget", _deadline_in(25.0), timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    record = json.loads((run / "run.json").read_text())
    assert record["state"] == "succeeded" and 0 < record["final_step"] == record["budget"]["stop_step"] < 10_000_000
    assert (run / "model.pt").is_file()


def test_stop_when_flat_stops_once_the_window_shows_too_little_gain(pairs, tmp_path):
    """Every gain is under 100 dB: the first evaluation a whole window after another stops the run there."""
    c = cfg(pairs, tmp_path / "run", steps=40, stop_when_flat=100.0, flat_window=4, contact_sheet_interval=2,
            log_interval=2)
    assert train_mod.train(c, NON_DIST).step == 6  # evaluations at 2, 4, 6: at 6 the one at 2 is a window back
    assert read_record(RunPaths.of(c.run_dir)).final_step == 6
    assert read_record(RunPaths.of(c.run_dir)).budget == {}
    never = cfg(pairs, tmp_path / "never", steps=12, stop_when_flat=100.0, flat_window=40, contact_sheet_interval=2,
                log_interval=2)
    assert train_mod.train(never, NON_DIST).step == 12  # a window longer than the run: never flat


def test_a_flat_stop_under_a_time_budget_is_logged_as_the_plateau(pairs, tmp_path, caplog):
    """The budget (an hour) has time for every step; the flat gain stops the run at 6 and the log names it."""
    c = cfg(pairs, tmp_path / "run", steps=40, stop_when_flat=100.0, flat_window=4, contact_sheet_interval=2,
            log_interval=2, time_budget="1h")
    with caplog.at_level("INFO", logger="trainer.learn.stopping"):
        assert train_mod.train(c, NON_DIST).step == 6
    lines = [r.getMessage() for r in caplog.records if r.name == "trainer.learn.stopping"]
    assert "last step 6 (--stop-when-flat: the held-out gain is flat)" in lines, lines
    assert not any("time budget" in line for line in lines), lines
    assert read_record(RunPaths.of(c.run_dir)).budget["stop_step"] == 6


class _Recorder:
    """A FrameSource of n pairs that records which images were read."""

    def __init__(self, n: int) -> None:
        self.count, self.size, self.scale, self.read = n, (8, 8), 1, set()

    def crop(self, image, y, x, c):
        self.read.add(image)
        return np.full((c, c, 3), image / 100, np.float16)

    def image(self, image):
        self.read.add(image)
        return np.full((8, 8, 3), image / 100, np.float16)


def test_held_out_frames_are_every_tenth_and_never_cropped_for_training():
    assert split_frames(25) == ([i for i in range(25) if i not in (9, 19)], [9, 19])
    assert split_frames(3) == ([0, 1], [2])  # fewer than 10: the last frame
    with pytest.raises(Exception, match="needs at least 2 frame pairs; the shot has 1"):
        split_frames(1)
    from trainer.data.crops import CropSampler

    source = _Recorder(30)
    train_idx, held = split_frames(source.count)
    sampler = CropSampler(FrameSubset(source, train_idx), 4, 64)
    source.read.clear()
    for step in range(1, 20):
        sampler.batch(step)
    pairs_read = {image // 2 for image in source.read}
    assert pairs_read and not pairs_read & set(held) and len(held) == 30 // HOLDOUT_EVERY

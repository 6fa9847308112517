"""``cuetrain demo`` trains to a time budget by default (``trainer.demo``): the ranks' deadline, the cap, and a real
budgeted run that ends inside its budget."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path

import pytest

from trainer import demo
from trainer.data.images import DataError


def test_the_ranks_deadline_is_the_commands_end_less_the_time_after_training():
    started = 1_800_000_000.0
    deadline = datetime.fromisoformat(demo.training_deadline("150s", started)).timestamp()
    assert deadline == started + 150 - demo.AFTER_TRAINING_S
    assert datetime.fromisoformat(demo.training_deadline("3m", started)).timestamp() == started + 180 - 10
    with pytest.raises(DataError, match=r"demo --time-budget '2026-11-27T18:00\+01:00': give the whole command's"):
        demo.training_deadline("2026-11-27T18:00+01:00", started)
    with pytest.raises(DataError, match="leaves no time to train: give more than 20s"):
        demo.training_deadline("15s", started)
    with pytest.raises(DataError, match="demo --time-budget 'soon'"):
        demo.training_deadline("soon", started)


@pytest.fixture()
def captured(monkeypatch, tmp_path):
    """run_demo with the training, extraction and scoring replaced: what it passes to the ranks."""
    seen: dict = {}
    monkeypatch.setattr(demo, "extract", lambda folder, task="repair": demo.DemoData(*(tmp_path / n for n in "abcd")))

    def train(run_dir, data, world_size, steps, train_args, progress=True):
        seen.update(steps=steps, args=train_args)
        return 0

    monkeypatch.setattr(demo, "train_demo", train)
    monkeypatch.setattr(demo, "holdout_psnr", lambda run_dir, data, task="repair": (20.0, 24.0))
    monkeypatch.setattr(demo, "find_sequence", lambda folder: {1: folder})
    return seen


def _budget(args: list[str]) -> float | None:
    return datetime.fromisoformat(args[args.index("--time-budget") + 1]).timestamp() if "--time-budget" in args \
        else None


def test_by_default_the_demo_trains_to_its_budget_with_its_steps_as_the_cap(captured, tmp_path):
    t0 = time.time()
    assert demo.run_demo(tmp_path, 2, None, list(demo.DEMO_TRAIN_ARGS)) == 0
    assert captured["steps"] == demo.DEMO_STEPS
    assert abs(_budget(captured["args"]) - (t0 + 150 - demo.AFTER_TRAINING_S)) < 2


def test_steps_alone_train_exactly_that_many_and_with_a_budget_cap_it(captured, tmp_path):
    demo.run_demo(tmp_path, 2, 40, list(demo.DEMO_TRAIN_ARGS))
    assert captured["steps"] == 40 and _budget(captured["args"]) is None
    t0 = time.time()
    demo.run_demo(tmp_path, 2, 40, list(demo.DEMO_TRAIN_ARGS), budget="5m")
    assert captured["steps"] == 40 and abs(_budget(captured["args"]) - (t0 + 300 - demo.AFTER_TRAINING_S)) < 2


def test_a_budgeted_demo_ends_inside_its_budget_and_says_what_it_reached(tmp_path, capsys):
    """A real run (1 rank, the carphone clip): a 40 s budget stops long before the 3,000-step cap, the command
    ends inside the budget, and the printed step is the exported model's."""
    t0 = time.monotonic()
    # the plan is revised every --log-interval steps: 10 here, so a CI worker sharing its 2 cores with a fault soak
    # (a step of 1-2 s) still revises it every few seconds (the demo's 50 took 132 s of a 40 s budget there)
    args = [*demo.DEMO_TRAIN_ARGS, "--log-interval", "10"]
    code = demo.run_demo(tmp_path / "run", 1, None, args, progress=False, budget="40s")
    took = time.monotonic() - t0
    out = capsys.readouterr().out
    assert code == 0, out
    assert took <= 40 + 30, f"the demo took {took:.1f} s of a 40 s budget"
    reached = json.loads((tmp_path / "run" / "model.json").read_text())["step"]
    assert 0 < reached < demo.DEMO_STEPS
    assert re.search(rf"dB\) +at step {reached} of {demo.DEMO_STEPS} in \d+ s", out), out
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["budget"]["stop_step"] == reached

"""``--time-budget`` text (trainer.core.budget) and config checks."""

from __future__ import annotations

import pytest

from trainer.core.budget import BudgetError, format_duration, parse_time_budget
from trainer.core.config import ConfigError, TrainConfig
from trainer.core.config_args import BUDGET_STEP_CAP


@pytest.mark.parametrize("text, seconds", [("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400),
                                           ("1.5h", 5400), ("1d", 86400), (" 45S ", 45)])
def test_durations(text, seconds):
    b = parse_time_budget(text)
    assert (b.seconds, b.deadline_unix) == (seconds, None)
    assert b.deadline_from(1000.0) == 1000.0 + seconds


def test_a_deadline_keeps_its_offset_and_ignores_the_start():
    b = parse_time_budget("2026-11-27T18:00+01:00")
    assert b.seconds is None and b.deadline_unix == 1795798800.0  # 17:00 UTC
    assert b.deadline_from(0.0) == b.deadline_unix


@pytest.mark.parametrize("text, message", [
    ("tomorrow", "neither a duration"), ("0s", "more than 0 seconds"), ("90", "neither a duration"),
    ("2026-11-27T18:00", "has no UTC offset; farm hosts may keep another time zone: write e.g. 2026-11-27T18:00+00:00")])
def test_bad_budgets_say_what_to_write(text, message):
    with pytest.raises(BudgetError, match=message.replace("(", r"\(").replace("+", r"\+")):
        parse_time_budget(text)
    with pytest.raises(ConfigError, match="--time-budget"):
        TrainConfig("i", "t", "r", time_budget=text)


def test_config_checks_the_plateau_fields():
    with pytest.raises(ConfigError, match=r"stop_when_flat=-0.1 must be a gain in dB >= 0"):
        TrainConfig("i", "t", "r", stop_when_flat=-0.1)
    with pytest.raises(ConfigError, match=r"flat_window=0 must be a positive whole number of steps"):
        TrainConfig("i", "t", "r", flat_window=0)


def test_a_budget_without_steps_is_capped_high_and_with_steps_keeps_them(tmp_path):
    import argparse

    from trainer.core.config_args import add_train_arguments, config_from_args

    p = argparse.ArgumentParser()
    add_train_arguments(p)
    paths = ["--input", str(tmp_path), "--target", str(tmp_path), "--run-dir", str(tmp_path)]
    assert config_from_args(p.parse_args([*paths, "--time-budget", "60s"])).steps == BUDGET_STEP_CAP
    assert config_from_args(p.parse_args([*paths, "--time-budget", "60s", "--steps", "500"])).steps == 500
    assert config_from_args(p.parse_args([*paths, "--stop-when-flat", "0.05"])).steps == 1000


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (45.4, "45 s"), (89, "89 s"), (90, "2 min"),
                                           (720, "12 min"), (7500, "2 h 05 min")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_a_budget_runs_total_steps_is_rank_0s_plan():
    from trainer.record.runrecord import RunRecord

    assert RunRecord.from_dict({"config": {"steps": BUDGET_STEP_CAP}, "budget": {"stop_step": 420}}).total_steps == 420
    assert RunRecord.from_dict({"config": {"steps": BUDGET_STEP_CAP}, "budget": {"text": "2h"}}).total_steps == \
        BUDGET_STEP_CAP  # not planned yet
    assert RunRecord.from_dict({"config": {"steps": 1000}}).total_steps == 1000

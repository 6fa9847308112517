"""When a run stops (trainer.core.stopping): the time budget's plan (BudgetClock) on a fake clock, the plateau rule
(FlatRule) and the last step with its reason (StopRule).

Expected plans are worked out by hand from the module's rule (steps that fit in the time left less the reserve, at
the measured seconds per step, rounded up to an optimizer update), not recomputed with it."""

from __future__ import annotations

import pytest

from trainer.core.stopping import (DEFAULT_EXPORT_S, SHUTDOWN_S, BudgetClock, FlatRule, StopReason, StopRule,
                                   deadline_passed, recorded_deadline)

RESERVE = DEFAULT_EXPORT_S + SHUTDOWN_S  # 3 s


def test_no_budget_plans_nothing():
    clock = BudgetClock("", 1000)
    clock.start(now=0.0)
    clock.mark(1, now=0.0)
    rule = StopRule(clock)
    assert (clock.active, rule.propose(10, now=1.0), rule.last_step, clock.record(None)) == (False, 0, 1000, {})
    assert rule.reason is StopReason.CAP


def test_a_duration_starts_when_training_starts_not_when_the_process_did():
    clock = BudgetClock("100s", 10_000)
    assert clock.deadline_unix is None and clock.record(None) == {}  # nothing fixed before training starts
    clock.start(now=2000.0)
    assert clock.deadline_unix == 2100.0 and clock.record(None)["deadline_unix"] == 2100.0
    clock.start(now=3000.0)  # a second call keeps it
    assert clock.deadline_unix == 2100.0


def test_the_plan_fits_the_steps_left_at_the_measured_rate_before_the_reserve():
    assert RESERVE == 3.0
    clock = BudgetClock("100s", 10_000)
    clock.start(now=1000.0)  # deadline 1100
    clock.mark(1, now=1005.0)  # the first step (start-up) is not timed
    rule = StopRule(clock)
    assert rule.propose(11, now=1006.0) == 921  # 0.1 s a step, (1100 - 3 - 1006) / 0.1 = 910 more steps
    assert rule.agree(921.0, 11) and rule.last_step == 921 and rule.total_updates == 921
    assert rule.reason is StopReason.BUDGET and rule.describe().startswith("last step 921 (time budget: ")
    assert not rule.agree(0.0, 12) and rule.last_step == 921  # the other ranks add 0: no change


def test_a_spent_budget_stops_at_the_current_step_and_never_beyond_the_cap():
    clock = BudgetClock("10s", 50)
    clock.start(now=0.0)
    clock.mark(1, now=0.0)
    rule = StopRule(clock)
    assert rule.propose(20, now=1.0) == 50  # time for thousands of steps: the cap
    assert not rule.agree(50.0, 20) and rule.reason is StopReason.CAP
    assert rule.propose(20, now=9.5) == 20  # less than the reserve left: stop after this step
    assert rule.agree(20.0, 20) and rule.last_step == 20 and rule.reason is StopReason.BUDGET


def test_the_plan_ends_on_an_optimizer_update():
    clock = BudgetClock("100s", 10_000, sync_interval=4)
    clock.start(now=0.0)
    clock.mark(1, now=0.0)
    assert clock.propose(9, now=0.8) == 972  # 0.1 s a step: 9 + (100 - 3 - 0.8) / 0.1 = 971, up to a multiple of 4
    assert clock.propose(10, now=99.9) == 12  # spent: the next update, not step 10 with gradients pending


def test_a_restart_keeps_the_deadline_the_measured_export_and_the_plan():
    first = BudgetClock("60s", 10_000)
    first.start(now=500.0)
    record = first.record(stop_step=300, export_s=4.0)
    later = BudgetClock("60s", 10_000, record)
    later.start(now=5000.0)
    assert (later.deadline_unix, later.reserve_s, later.saved_plan) == (560.0, 4.0 + SHUTDOWN_S, 300)
    rule = StopRule(later)
    rule.take(rule.restart_plan(200, late=False))  # resumed at 200: the saved plan, and the lr over it
    assert (rule.last_step, rule.total_updates, rule.reason) == (300, 300, StopReason.BUDGET)
    stale = StopRule(later)
    stale.take(stale.restart_plan(300, late=False))  # a plan not ahead of the resumed step is stale: the cap
    assert (stale.last_step, stale.reason) == (10_000, StopReason.CAP)
    late = StopRule(later)
    late.take(late.restart_plan(250, late=True))  # the deadline passed before the restart: stop at once
    assert late.last_step == 250
    assert record["stop_step"] == 300 and record["deadline"] == "1970-01-01T00:09:20+00:00"
    other = BudgetClock("90s", 10_000, record)  # another budget: a new deadline, no plan yet
    other.start(now=5000.0)
    assert (other.deadline_unix, other.reserve_s, other.saved_plan) == (5090.0, RESERVE, None)


def test_a_rank_that_writes_model_onnx_reserves_time_for_it():
    from trainer.core.stopping import ONNX_EXPORT_S

    assert BudgetClock("1h", 10, onnx_in_run=True).reserve_s == DEFAULT_EXPORT_S + ONNX_EXPORT_S + SHUTDOWN_S


@pytest.mark.parametrize("text, record, now, passed", [
    ("", {}, 1e12, False),
    ("2h", {}, 1e12, False),  # a duration not started yet has no deadline
    ("2h", {"text": "2h", "deadline_unix": 100.0}, 100.0, True),
    ("2h", {"text": "3h", "deadline_unix": 100.0}, 200.0, False),  # another budget's record
    ("2026-11-27T18:00+01:00", {}, 1795798799.0, False),
    ("2026-11-27T18:00+01:00", {}, 1795798800.0, True),
])
def test_a_deadline_passed_before_the_start(text, record, now, passed):
    assert deadline_passed(text, record, now) is passed
    assert recorded_deadline("2h", {"text": "2h", "deadline_unix": 7}) == 7.0


def test_flat_rule_compares_the_best_score_a_window_apart():
    rule = FlatRule(min_gain_db=0.5, window=100)
    for step, psnr in [(100, 20.0), (200, 21.0), (300, 21.2)]:
        rule.add(step, psnr)
    assert not rule.flat(250)  # nothing a whole window before 250 but step 100: 21.0 - 20.0 >= 0.5
    assert rule.flat(300)  # best 21.2 against 21.0 at step <= 200: +0.2 dB
    rule.add(400, 21.8)
    assert not rule.flat(400)


def test_a_flat_stop_under_a_budget_names_the_plateau_and_is_never_moved_later():
    """With a budget that has time for hundreds of steps, a flat gain stops at the next update, and the log line
    says --stop-when-flat (it said "time budget" while the budget's clock held the last step)."""
    clock = BudgetClock("100s", 10_000, sync_interval=4)
    clock.start(now=0.0)
    clock.mark(1, now=0.0)
    flat = FlatRule(min_gain_db=1.0, window=10)
    flat.add(10, 20.0)
    flat.add(22, 20.1)
    rule = StopRule(clock, flat)
    assert rule.propose(22, now=2.1) == 24  # the next update after 22, not the budget's ~950
    assert rule.agree(24.0, 22) and (rule.last_step, rule.reason) == (24, StopReason.PLATEAU)
    assert rule.describe() == "last step 24 (--stop-when-flat: the held-out gain is flat)"
    assert rule.propose(23, now=2.2) == 0 and not rule.agree(900.0, 23) and rule.last_step == 24

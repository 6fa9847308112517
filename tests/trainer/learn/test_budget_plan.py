"""Rank 0's plan of the last step under a time budget (trainer.learn.budget.BudgetClock), on a fake clock."""

from __future__ import annotations

from trainer.learn.budget import DEFAULT_EXPORT_S, SHUTDOWN_S, BudgetClock


def test_no_budget_plans_nothing():
    clock = BudgetClock("", 1000)
    clock.mark(1, now=0.0)
    assert (clock.active, clock.propose(10, now=1.0), clock.last_step, clock.record()) == (False, 0, 1000, {})


def test_the_plan_fits_the_steps_left_at_the_measured_rate_before_the_reserve():
    clock = BudgetClock("100s", 10_000, now=1000.0)
    assert clock.deadline_unix <= 1100.0  # from this process's start, at the latest now
    clock.deadline_unix = 1100.0
    reserve = DEFAULT_EXPORT_S + SHUTDOWN_S
    clock.mark(1, now=1005.0)  # the first step (start-up) is not timed
    plan = clock.propose(11, now=1006.0)  # 0.1 s a step
    assert plan == 11 + int((1100.0 - reserve - 1006.0) / 0.1)
    assert clock.agree(float(plan), 11) and clock.last_step == plan
    assert not clock.agree(0.0, 12) and clock.last_step == plan  # the other ranks add 0: no change


def test_a_spent_budget_stops_at_the_current_step_and_never_beyond_the_cap():
    clock = BudgetClock("10s", 50, now=0.0)
    clock.deadline_unix = 10.0
    clock.mark(1, now=0.0)
    assert clock.propose(20, now=9.5) == 20  # less than the reserve left: stop after this step
    assert clock.propose(20, now=1.0) == 50  # time for thousands of steps: the cap
    assert clock.agree(20.0, 20) and clock.last_step == 20


def test_the_plan_ends_on_an_optimizer_update():
    clock = BudgetClock("100s", 10_000, now=0.0, sync_interval=4)
    clock.deadline_unix = 100.0
    clock.mark(1, now=0.0)
    plan = clock.propose(9, now=0.8)  # 0.1 s a step
    assert plan % 4 == 0 and 9 + int((100.0 - clock.reserve_s - 0.8) / 0.1) <= plan < 9 + 973 + 4
    assert clock.propose(10, now=99.9) == 12  # spent: the next update, not step 10 with gradients pending


def test_a_restart_keeps_the_first_attempts_deadline_and_measured_export():
    first = BudgetClock("60s", 10_000, now=500.0)
    record = first.record(stop_step=300, export_s=4.0)
    later = BudgetClock("60s", 10_000, record, now=5000.0)
    assert later.deadline_unix == first.deadline_unix and later.reserve_s == 4.0 + SHUTDOWN_S
    assert record["stop_step"] == 300 and record["deadline"].startswith("1970-01-01T00:")
    other = BudgetClock("90s", 10_000, record, now=5000.0)  # another budget: a new deadline
    assert other.deadline_unix > first.deadline_unix and other.reserve_s == DEFAULT_EXPORT_S + SHUTDOWN_S


def test_a_rank_that_writes_model_onnx_reserves_time_for_it():
    from trainer.learn.budget import ONNX_EXPORT_S

    assert BudgetClock("1h", 10, onnx_in_run=True).reserve_s == DEFAULT_EXPORT_S + ONNX_EXPORT_S + SHUTDOWN_S

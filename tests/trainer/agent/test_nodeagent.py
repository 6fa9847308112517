"""The node agent's one loop (trainer.agent.nodeagent.NodeAgent) with a scripted role: the states it passes,
the restart budget (only FAILED generations count, only for a role that counts), the backoff it sleeps and
the exit code each role gets to choose. The roles themselves run in the launch, frame and farm tests."""

from __future__ import annotations

import pytest

from trainer.agent import nodeagent
from trainer.core.exitcodes import ExitCode
from trainer.agent.nodeagent import Ended, Generation, NodeAgent, WorkerState, classify
from trainer.record.rundir import RunPaths, atomic_write_json
from trainer.agent.supervise import GangExit


class Scripted:
    """A role whose generations exit with the given codes, in order; it records what the agent asked."""

    def __init__(self, codes: list[int], *, counts: bool = True, delay: float = 0.0) -> None:
        self.codes, self.counts_restarts, self.delay = list(codes), counts, delay
        self.restarts, self.formed, self.paused, self.calls = 0, [], [], []

    def form(self, previous: Ended | None) -> Generation | int:
        if previous is not None and previous.state is WorkerState.FAILED:
            self.restarts += 1
        if not self.codes:
            return 99  # the role ends the loop itself (a member whose run finished while it waited)
        self.formed.append(previous.state if previous else None)
        return Generation(len(self.formed), resume=previous is not None, restarts=self.restarts)

    def run(self, generation: Generation) -> GangExit:
        return GangExit(self.codes.pop(0), rank=1)

    def judge(self, generation: Generation, result: GangExit) -> tuple[WorkerState, int]:
        return classify(result.code, terminated=False), result.code

    def stopped(self, ended: Ended) -> int:
        self.calls.append(("stopped", ended.code))
        return ended.code

    def budget_spent(self, ended: Ended, max_restarts: int) -> int:
        self.calls.append(("budget", ended.generation.restarts, max_restarts))
        return ended.code

    def pause(self, ended: Ended) -> float:
        self.paused.append(ended.state)
        return self.delay


def test_failed_generations_restart_until_the_budget_is_spent() -> None:
    role = Scripted([1, 137, 1, 0])
    agent = NodeAgent(role, max_restarts=2)
    assert agent.run() == 1
    assert role.formed == [None, WorkerState.FAILED, WorkerState.FAILED], "3 generations: the first + 2 restarts"
    assert role.calls == [("budget", 2, 2)] and agent.state is WorkerState.FAILED


def test_regroups_do_not_spend_the_budget_and_success_exits_0() -> None:
    role = Scripted([int(ExitCode.REGROUP), int(ExitCode.REGROUP), 1, 0])
    agent = NodeAgent(role, max_restarts=1)
    assert agent.run() == 0
    assert role.paused == [WorkerState.REGROUP, WorkerState.REGROUP, WorkerState.FAILED]
    assert agent.state is WorkerState.SUCCEEDED and role.calls == []


def test_a_code_no_restart_can_help_stops_at_once_whatever_the_budget() -> None:
    role = Scripted([int(ExitCode.USAGE), 0])
    assert NodeAgent(role, max_restarts=5).run() == ExitCode.USAGE
    assert role.calls == [("stopped", ExitCode.USAGE)] and len(role.formed) == 1


def test_a_role_that_does_not_count_restarts_keeps_going_and_can_end_the_loop() -> None:
    role = Scripted([1, 1, 1], counts=False)
    assert NodeAgent(role, max_restarts=0).run() == 99, "frames > 0 leave the budget to frame 0"
    assert role.paused == [WorkerState.FAILED] * 3


def test_the_agent_sleeps_the_backoff_its_role_asks_for(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(nodeagent.time, "sleep", slept.append)
    NodeAgent(Scripted([1, 1, 0], delay=2.5), max_restarts=3).run()
    assert slept == [2.5, 2.5]


@pytest.mark.parametrize("code,terminated,state", [
    (0, True, WorkerState.SUCCEEDED),  # finished before the SIGTERM arrived
    (int(ExitCode.REGROUP), True, WorkerState.STOPPED),  # this agent was stopped: never a new generation
    (int(ExitCode.STOP_TIMEOUT), False, WorkerState.FAILED),
])
def test_exit_code_table_edges(code: int, terminated: bool, state: WorkerState) -> None:
    assert classify(code, terminated=terminated) is state


def _record(tmp_path, **fields) -> RunPaths:
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    atomic_write_json(paths.run_json, {"version": 1, **fields})
    return paths


GENERATION = Generation(1, resume=False, formed_at=1_800_000_000.0)  # formed at 2027-01-15T08:00:00+00:00
DURING, BEFORE = "2027-01-15T08:05:00+00:00", "2027-01-15T07:55:00+00:00"  # run.json finished_at


@pytest.mark.parametrize("fields, state, code", [
    ({"state": "succeeded", "final_step": 40, "config": {"steps": 40}, "finished_at": DURING},
     WorkerState.SUCCEEDED, 0),  # complete
    ({"state": "succeeded", "final_step": 30, "config": {"steps": 40}, "finished_at": DURING},
     WorkerState.FAILED, 134),  # not at its end
    ({"state": "succeeded", "final_step": 40, "config": {"steps": 40}, "finished_at": BEFORE},
     WorkerState.FAILED, 134),  # an earlier job's success (a finished run resumed with more steps)
    ({"state": "running", "config": {"steps": 40}}, WorkerState.FAILED, 134),
    ({}, WorkerState.FAILED, 134),
])
def test_a_gang_that_fails_after_the_run_was_recorded_complete_succeeded(tmp_path, fields, state, code) -> None:
    paths = _record(tmp_path, **fields)
    assert nodeagent.judge_exit(GENERATION, GangExit(134, rank=0, codes={0: 134, 1: 0}), paths) == (state, code)


def test_a_stopped_gang_stays_stopped_even_when_the_run_is_complete(tmp_path) -> None:
    paths = _record(tmp_path, state="succeeded", final_step=40, config={"steps": 40}, finished_at=DURING)
    stopped = GangExit(75, rank=0, codes={0: 75}, terminated=True)  # SIGTERM to the agent: the trainers exited 75
    assert nodeagent.judge_exit(GENERATION, stopped, paths) == (WorkerState.STOPPED, 75)

"""The node agent's rules (cue_plugin.node.agent) and the elastic gang's presence records (cue_plugin.node.membership)."""

from __future__ import annotations

import time

import pytest

from cue_plugin.node import membership
from cue_plugin.node.agent import AgentPolicy, record_gang
from trainer.agent.nodeagent import WorkerState, classify
from trainer.core.exitcodes import ExitCode
from trainer.record.rundir import RunPaths, atomic_write_json
from trainer.record.runrecord import read_gang, read_record, update_record


@pytest.mark.parametrize("code,terminated,state", [
    (0, False, WorkerState.SUCCEEDED),
    (ExitCode.RANK_LOST, False, WorkerState.FAILED),  # a peer died: the gang restarts inside the frames
    (ExitCode.REJECTED, False, WorkerState.FAILED),
    (ExitCode.STOPPED, False, WorkerState.FAILED),  # a PEER got SIGTERM and checkpointed: wait for its retry
    (ExitCode.STOPPED, True, WorkerState.STOPPED),  # this frame got SIGTERM: it exits, the farm decides
    (ExitCode.REGROUP, False, WorkerState.REGROUP),
    (137, False, WorkerState.FAILED),  # a trainer SIGKILLed (OOM killer, a wrangler)
    (1, False, WorkerState.FAILED),  # a crash: the budget bounds a deterministic one
    (ExitCode.USAGE, False, WorkerState.STOPPED),  # bad settings: no retry helps
    (ExitCode.GANG, False, WorkerState.STOPPED),  # gang incomplete / unreachable: frame 0 fails the layer
    (ExitCode.PORT_UNAVAILABLE, False, WorkerState.STOPPED),
    (ExitCode.NO_TRAINER, False, WorkerState.STOPPED),
])
def test_what_the_agent_does_after_each_exit(code, terminated, state):
    assert classify(int(code), terminated=terminated) is state


def test_backoff_doubles_up_to_its_cap():
    policy = AgentPolicy(backoff_s=2.0, backoff_max_s=30.0)
    assert [policy.backoff(n) for n in range(1, 7)] == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]


@pytest.mark.parametrize("policy,match", [
    (AgentPolicy(max_restarts=-1), "--max-restarts -1"),
    (AgentPolicy(min_world_size=5), "--min-world-size 5 must be between"),
    (AgentPolicy(min_world_size=3), "not a multiple of --ranks-per-frame 2"),
])
def test_bad_policies_name_the_argument(policy, match):
    with pytest.raises(ValueError, match=match):
        policy.check(4, 2)


def test_elastic_only_below_the_world_size():
    assert AgentPolicy(min_world_size=2).elastic(4) and not AgentPolicy(min_world_size=4).elastic(4)
    assert not AgentPolicy().elastic(4)


def test_gang_record_counts_restarts_not_regroups_and_belongs_to_one_job(tmp_path):
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    record = read_gang(paths, "job-a")
    for reason, restart in (("first", False), ("restart 1", True), ("regroup", False), ("restart 2", True)):
        record = record.next(reason, (0, 1) if "regroup" in reason else (), 4, restart=restart)
        record_gang(paths, record)
    again = read_gang(paths, "job-a")  # a Cuebot retry of frame 0 continues the count
    assert (again.generation, again.restarts, again.members) == (4, 2, ())
    assert [e["reason"] for e in again.events] == ["first", "restart 1", "regroup", "restart 2"]
    assert read_gang(paths, "job-b").generation == 0  # a new submit starts again
    update_record(paths, state="running")  # other writers keep the record
    assert read_record(paths).gang["generation"] == 4


def presence(paths: RunPaths, frame: int, age_s: float = 0.0) -> None:
    path = paths.presence(frame)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"version": 1, "frame": frame, "agent": "h:1", "after_generation": 1,
                             "at": time.time() - age_s})


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_gather_returns_every_frame_as_soon_as_all_are_back(tmp_path):
    paths = RunPaths.of(tmp_path)
    for f in (1, 2):
        presence(paths, f)
    clock = FakeClock()
    assert membership.gather(paths, 3, 2, 30.0, 600.0, clock, clock.sleep) == (0, 1, 2)
    assert clock.now == 0.0


def test_gather_shrinks_after_the_window_and_ignores_stale_records(tmp_path):
    paths = RunPaths.of(tmp_path)
    presence(paths, 1)
    presence(paths, 2, age_s=membership.FRESH_S + 1)  # an agent that died while waiting
    clock = FakeClock()
    assert membership.gather(paths, 3, 2, 30.0, 600.0, clock, clock.sleep) == (0, 1)
    assert 30.0 <= clock.now < 31.0


def test_gather_below_the_minimum_times_out_naming_the_missing_frames(tmp_path):
    paths = RunPaths.of(tmp_path)
    clock = FakeClock()
    with pytest.raises(TimeoutError, match=r"only frames \[0\] came back within 60 s.*missing: \[1, 2\]"):
        membership.gather(paths, 3, 2, 5.0, 60.0, clock, clock.sleep)


def test_a_waiting_frame_keeps_its_record_fresh_and_removes_it_when_it_joins(tmp_path, monkeypatch):
    monkeypatch.setattr(membership, "REFRESH_S", 0.05)
    paths = RunPaths.of(tmp_path)
    with membership.present(paths, 2, after_generation=3):
        time.sleep(0.2)
        record = membership.Presence.read(paths.presence(2))
        assert record is not None and (record.frame, record.after_generation) == (2, 3) and record.fresh()
        assert membership.returned(paths, 3, (0, 1)) == [2] and membership.returned(paths, 3, ()) == []
        assert membership.returned(paths, 3, (0, 1, 2)) == []
    assert not paths.presence(2).exists() and membership.waiting(paths, 3) == {}

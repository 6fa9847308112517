"""Cuebot's frame-completion rules in the double (tests/cuebot/completion.py), without RQDs."""

from __future__ import annotations

from opencue_proto import host_pb2, job_pb2

import pytest

from tests.cuebot.completion import (CUEBOT_BEFORE_2169, CUEBOT_SINCE_2169, FRAME_TIME_NO_RETRY_S, MEMORY_INCREASE_KB,
                                     Completion, CuebotRules)
from tests.cuebot.records import FarmState, FrameRecord, HostRecord, JobRecord, LayerRecord, ProcRecord, new_id

GB4_KB = 4 * 1024 * 1024


def farm(max_retries: int = 1, timeout: int = 0, timeout_llu: int = 0,
         rules: CuebotRules | None = None) -> tuple[FarmState, FrameRecord]:
    """One job, one layer, one frame; one host that pinged now."""
    state = FarmState(rules=rules)
    job_id, layer_id = new_id(), new_id()
    layer = LayerRecord(layer_id, job_id, "train", job_pb2.PRE, "true", "0", 1, 0, 100, 100, GB4_KB, 0, 0, False,
                        [], [], {}, timeout=timeout, timeout_llu=timeout_llu)
    frame = FrameRecord(new_id(), job_id, layer_id, "0000-train", 0, 0)
    state.add_job(JobRecord(job_id, "j", "show", "shot", "u", 1000, "local", "linux", 100, False, False,
                            max_retries, "/tmp", {}, [layer], [frame]))
    state.hosts["node1"] = HostRecord("node1", "127.0.0.1:1", 400, 8 * GB4_KB, 8 * GB4_KB, [], 0,
                                      int(state.clock()))
    return state, frame


def run(state: FarmState, frame: FrameRecord, done: Completion | None = None) -> int:
    """Start the frame on node1; when ``done`` is given, complete it with that report. Returns its state."""
    layer = state.jobs[frame.job_id].layer(frame.layer_id)
    proc = ProcRecord(new_id(), frame.id, 100, 0, layer.min_memory)  # as the dispatcher books it
    with state.lock:  # as the dispatcher does
        state.start_frame(frame, state.hosts["node1"], proc)
        state.confirm_launch(frame, proc.id)
    if done is not None:
        state.complete_frame("node1", proc.id, frame.id, done, 0)
    return frame.state


def test_ordinary_failures_retry_by_count_then_die():
    state, frame = farm(max_retries=1)
    assert run(state, frame, Completion(exit_status=4)) == job_pb2.WAITING
    assert run(state, frame, Completion(exit_status=4)) == job_pb2.DEAD and frame.retry_count == 1


def test_memory_failures_33_and_137_retry_past_the_limit_and_raise_the_layer_memory():
    state, frame = farm(max_retries=0)
    layer = state.jobs[frame.job_id].layers[0]
    for status in (137, 33, 137):
        assert run(state, frame, Completion(exit_status=status)) == job_pb2.WAITING
    assert layer.min_memory == GB4_KB + 3 * MEMORY_INCREASE_KB
    assert run(state, frame, Completion(exit_status=1, exit_signal=9)) == job_pb2.DEAD  # RQD's SIGKILL: no


def test_nimby_kills_retry_past_the_limit():
    state, frame = farm(max_retries=0)
    assert run(state, frame, Completion(exit_status=1, exit_signal=15, nimby_locked=True)) == job_pb2.WAITING
    assert run(state, frame, Completion(exit_status=286, exit_signal=9, nimby_locked=True)) == job_pb2.WAITING  # RQD's
    assert run(state, frame, Completion(exit_status=1, exit_signal=15)) == job_pb2.DEAD  # SIGTERM, no NIMBY


def test_a_frame_that_ran_over_12_hours_dies_with_retries_left():
    state, frame = farm(max_retries=1)
    run(state, frame)
    state.clock.advance(FRAME_TIME_NO_RETRY_S + 1)
    proc_id = frame.resource_id
    state.complete_frame("node1", proc_id, frame.id, Completion(exit_status=4), 0)
    assert frame.state == job_pb2.DEAD and frame.retry_count == 0
    state, frame = farm(max_retries=1)
    run(state, frame)
    state.clock.advance(FRAME_TIME_NO_RETRY_S - 60)
    state.complete_frame("node1", frame.resource_id, frame.id, Completion(exit_status=137), 0)
    assert frame.state == job_pb2.WAITING  # under 12 h: retried


def test_layer_and_last_log_update_timeouts_kill_the_frame():
    state, frame = farm(max_retries=1, timeout=60)
    run(state, frame)
    state.clock.advance(61 * 60)
    state.complete_frame("node1", frame.resource_id, frame.id, Completion(exit_status=137), 0)
    assert frame.state == job_pb2.DEAD  # before the memory rule
    state, frame = farm(max_retries=1, timeout_llu=10)
    run(state, frame)
    last_log = int(state.clock())
    state.clock.advance(10 * 60)
    state.complete_frame("node1", frame.resource_id, frame.id, Completion(4, llu_time=last_log), 0)
    assert frame.state == job_pb2.DEAD


def test_a_host_that_stops_pinging_goes_down_and_its_frames_wait_again():
    state, frame = farm(max_retries=0)
    run(state, frame)
    state.clock.advance(298)  # Cuebot: DOWN after more than 300 s without a ping
    assert state.sweep_down_hosts() == []
    state.clock.advance(4)
    assert state.sweep_down_hosts() == ["node1"]
    assert state.hosts["node1"].state == host_pb2.DOWN and not state.hosts["node1"].procs
    assert (frame.state, frame.exit_status, frame.resource_id) == (job_pb2.WAITING, 399, "")


def test_the_job_spec_retry_limit_is_bounded_like_cuebots_jobspec(tmp_path):
    from cue_plugin.submit.builder import dry_run
    from cue_plugin.submit.spec import TrainingJob
    from tests.cuebot.jobspec import parse_spec
    from trainer.core.config import TrainConfig

    train = TrainConfig(input_dir="/in", target_dir="/gt", run_dir=str(tmp_path / "run"))
    spec = dry_run(TrainingJob(train, 2, "show", "sh010", "artist", max_retries=3))
    assert "<maxretries>3</maxretries>" in spec
    assert parse_spec(spec, log_root=tmp_path)[0].max_retries == 1  # JobSpec.FRAME_RETRIES_MAX


def lose_host(state: FarmState, frame: FrameRecord) -> None:
    """Start the frame on node1, then let node1 stop pinging until the sweep marks it DOWN (exit 399)."""
    run(state, frame)
    state.clock.advance(301)
    assert state.sweep_down_hosts() == ["node1"]
    state.hosts["node1"].state, state.hosts["node1"].ping_time = host_pb2.UP, int(state.clock())  # it reboots


def test_a_frame_whose_host_goes_down_twice_runs_a_third_time_with_its_retry_left():
    # FrameDaoJdbc.updateFrameStarted: a start after exit 399 (EXIT_STATUS_DOWN_HOST) adds no retry, so two host
    # losses leave the one retry (JobSpec.FRAME_RETRIES_MAX) unspent: the third run fails and is still retried.
    state, frame = farm(max_retries=1)
    lose_host(state, frame)
    lose_host(state, frame)
    assert (frame.state, frame.exit_status, frame.retry_count) == (job_pb2.WAITING, 399, 0)
    assert run(state, frame, Completion(exit_status=1)) == job_pb2.WAITING and frame.retry_count == 0
    assert run(state, frame, Completion(exit_status=0)) == job_pb2.SUCCEEDED and frame.retry_count == 1
    assert frame.runs == 4
    state, frame = farm(max_retries=1)  # and the plain case: down twice, then the third run succeeds
    lose_host(state, frame)
    lose_host(state, frame)
    assert run(state, frame, Completion(exit_status=0)) == job_pb2.SUCCEEDED and frame.retry_count == 0


def test_a_frame_that_exits_1_twice_is_dead():
    state, frame = farm(max_retries=1)
    assert run(state, frame, Completion(exit_status=1)) == job_pb2.WAITING and frame.retry_count == 0
    assert run(state, frame, Completion(exit_status=1)) == job_pb2.DEAD and frame.retry_count == 1


@pytest.mark.parametrize("status", [286, 256])  # SKIP_RETRY (RQD's NIMBY kill), FAILED_LAUNCH
def test_nimby_kill_and_failed_launch_spend_no_retry(status):
    state, frame = farm(max_retries=1)
    assert run(state, frame, Completion(exit_status=status)) == job_pb2.WAITING
    assert run(state, frame, Completion(exit_status=status)) == job_pb2.WAITING and frame.retry_count == 0
    assert run(state, frame, Completion(exit_status=1)) == job_pb2.WAITING and frame.retry_count == 0
    assert run(state, frame, Completion(exit_status=1)) == job_pb2.DEAD and frame.retry_count == 1


def test_a_refused_launch_is_cleared_and_spends_no_retry():
    state, frame = farm(max_retries=1)
    assert run(state, frame, Completion(exit_status=1)) == job_pb2.WAITING
    proc = ProcRecord(new_id(), frame.id, 100, 0)
    with state.lock:  # Cuebot counts the retry at start, then RQD refuses: updateFrameCleared (299)
        state.start_frame(frame, state.hosts["node1"], proc)
        assert frame.retry_count == 1
        state.clear_launch(frame, state.hosts["node1"], proc.id)
    assert (frame.state, frame.exit_status) == (job_pb2.WAITING, 299)
    assert run(state, frame, Completion(exit_status=1)) == job_pb2.DEAD and frame.retry_count == 1


@pytest.mark.parametrize("rules, dead_after_h", [(CUEBOT_BEFORE_2169, 8), (CUEBOT_SINCE_2169, 12)])
def test_the_no_retry_limit_is_8_hours_before_opencue_2169_and_12_hours_from_it(rules, dead_after_h):
    for hours, expected in ((dead_after_h - 0.5, job_pb2.WAITING), (dead_after_h + 0.5, job_pb2.DEAD),
                            (10, job_pb2.WAITING if dead_after_h == 12 else job_pb2.DEAD)):
        state, frame = farm(max_retries=1, rules=rules)
        run(state, frame)
        state.clock.advance(hours * 3600)
        state.complete_frame("node1", frame.resource_id, frame.id, Completion(exit_status=1), 0)
        assert frame.state == expected, (hours, rules)


def test_the_retry_cap_is_a_facility_setting(tmp_path):
    from cue_plugin.submit.builder import dry_run
    from cue_plugin.submit.spec import TrainingJob
    from tests.cuebot.jobspec import parse_spec
    from trainer.core.config import TrainConfig

    train = TrainConfig(input_dir="/in", target_dir="/gt", run_dir=str(tmp_path / "run"))
    spec = dry_run(TrainingJob(train, 2, "show", "sh010", "artist", max_retries=3))
    assert parse_spec(spec, log_root=tmp_path, retries_max=5)[0].max_retries == 3
    assert parse_spec(spec, log_root=tmp_path, retries_max=2)[0].max_retries == 2
    state, frame = farm(max_retries=2, rules=CuebotRules(frame_retries_max=2))
    for _ in range(2):
        assert run(state, frame, Completion(exit_status=1)) == job_pb2.WAITING
    assert run(state, frame, Completion(exit_status=1)) == job_pb2.DEAD and frame.retry_count == 2


def test_a_memory_failure_raises_the_minimum_to_the_reservation_plus_2_gb_once_and_the_retry_reserves_it():
    # FrameCompleteHandler.retryFrameWithRaisedMemory + LayerDaoJdbc.increaseLayerMinMemory ("UPDATE layer SET
    # int_mem_min=? ... AND int_mem_min < ?", val = proc.memoryReserved + 2 GB): two frames of one layer that fail
    # with the same 4 GB reservation raise the minimum to 6 GB, not 8; the retry is booked with, and told, 6 GB.
    from tests.cuebot.dispatcher import FrameIdentity, build_run_frame

    state, frame = farm(max_retries=0)
    job = state.jobs[frame.job_id]
    layer = job.layers[0]
    other = FrameRecord(new_id(), job.id, layer.id, "0001-train", 1, 1)
    job.frames.append(other)
    state.frames[other.id] = other
    procs = {}
    for f in (frame, other):
        procs[f.id] = ProcRecord(new_id(), f.id, 100, 0, layer.min_memory)
        with state.lock:
            state.start_frame(f, state.hosts["node1"], procs[f.id])
            state.confirm_launch(f, procs[f.id].id)
    assert frame.reserved_memory == other.reserved_memory == GB4_KB
    for f in (frame, other):
        state.complete_frame("node1", procs[f.id].id, f.id, Completion(exit_status=33), 0)
        assert f.state == job_pb2.WAITING  # retried past max_retries=0
    assert layer.min_memory == GB4_KB + MEMORY_INCREASE_KB == 6 * 1024 * 1024
    retry = ProcRecord(new_id(), frame.id, 100, 0, layer.min_memory)  # dispatcher.dispatch_once's booking
    with state.lock:
        state.start_frame(frame, state.hosts["node1"], retry)
    assert frame.reserved_memory == 6 * 1024 * 1024
    env = build_run_frame(job, layer, frame, retry, FrameIdentity(uid=1000, gid=1000, user="u")).environment
    assert env["CUE_MEMORY"] == str(6 * 1024 * 1024)  # KB, DispatchSupportService: proc.memoryReserved
    state.complete_frame("node1", retry.id, frame.id, Completion(exit_status=137), 0)
    assert layer.min_memory == 8 * 1024 * 1024  # the 6 GB run failed too: 6 + 2


def test_a_frame_within_its_reservation_changes_nothing_and_one_over_it_grows_it_unless_overboard_is_on():
    # HostReportHandler.handleMemoryUsage (tests/cuebot/memory.py): with opencue.properties' default overboard
    # threshold (-1.0, off) a frame over its reservation is NOT killed; its proc's reservation grows to its RSS
    # when the host has the memory, and the layer's minimum follows the peak RSS (updateLayerMemoryUsage).
    from tests.cuebot.memory import MemoryAction, decide

    within = decide(rss_kb=3 * 2**20, max_rss_kb=3 * 2**20, reserved_kb=GB4_KB, host_idle_kb=GB4_KB, layer_min_kb=GB4_KB)
    assert (within.action, within.reserved_kb, within.layer_min_kb) == (MemoryAction.NONE, GB4_KB, GB4_KB)
    over = decide(rss_kb=5 * 2**20, max_rss_kb=5 * 2**20, reserved_kb=GB4_KB, host_idle_kb=GB4_KB, layer_min_kb=GB4_KB)
    assert (over.action, over.reserved_kb, over.layer_min_kb) == (MemoryAction.RESERVATION_RAISED, 5 * 2**20, 5 * 2**20)
    full = decide(rss_kb=5 * 2**20, max_rss_kb=5 * 2**20, reserved_kb=GB4_KB, host_idle_kb=2**19, layer_min_kb=GB4_KB)
    assert full.action is MemoryAction.NONE and full.reserved_kb == GB4_KB  # no idle memory: stays, not killed
    on = dict(reserved_kb=GB4_KB, host_idle_kb=GB4_KB, layer_min_kb=GB4_KB, overboard_threshold=0.5)
    assert decide(rss_kb=int(5.9 * 2**20), max_rss_kb=int(5.9 * 2**20), **on).action is MemoryAction.RESERVATION_RAISED
    assert decide(rss_kb=6 * 2**20, max_rss_kb=6 * 2**20, **on).action is MemoryAction.KILL_MEMORY_FAILURE  # 4 * 1.5
    # a spike: peak >= 1 + 2 * 0.5 (8 GB) and RSS now >= 0.9 of the reservation
    assert decide(rss_kb=int(3.7 * 2**20), max_rss_kb=8 * 2**20, **on).action is MemoryAction.KILL_MEMORY_FAILURE
    assert decide(rss_kb=int(3.5 * 2**20), max_rss_kb=8 * 2**20, **on).action is MemoryAction.NONE
    oom = decide(rss_kb=3 * 2**20, max_rss_kb=3 * 2**20, reserved_kb=GB4_KB, host_idle_kb=GB4_KB, layer_min_kb=GB4_KB,
                 host_used_fraction=0.95)  # host under OOM pressure: killed (exit 33) whatever its reservation
    assert oom.action is MemoryAction.KILL_MEMORY_FAILURE


def test_the_double_reports_a_frames_peak_rss_and_reservation(tmp_path):
    from tests.cuebot.double import CuebotDouble

    cuebot = CuebotDouble(log_root=str(tmp_path))
    state, frame = farm()
    cuebot.state = state
    run(state, frame)
    frame.max_rss = 3 * 2**20  # as ReportStatus records RQD's RunningFrameInfo.max_rss
    assert cuebot.frame_memory("j", "0000-train") == (3 * 2**20, GB4_KB)
    with pytest.raises(KeyError, match="no frame"):
        cuebot.frame_memory("j", "0001-train")

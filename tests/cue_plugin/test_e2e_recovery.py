"""Recovery on the farm end to end, under Cuebot's completion rules (tests/cuebot/completion.py).

Same farm as test_e2e_training.py (the Cuebot double, two real RQDs, the real trainer), 2 ranks and
small steps. Each test prints its figures: steps lost (the step training had reached at the fault
minus the step the next attempt started from) and seconds from the fault to training again (the
next attempt recorded in run.json, i.e. the gang formed and rank 0 resumed).

The step reached at the fault is read AFTER the fault is confirmed (:func:`at_fault`: the killed
process is gone, then the last metrics line and the newest checkpoint on disk), never before the kill,
so training that went on between a read and the kill cannot hide lost steps. Every test asserts
(:func:`assert_resumed_within_one_interval`) that the next attempt started from the newest checkpoint
written before the fault (or a newer one), so at most one checkpoint interval is lost and a restart
from step 0, or from an older checkpoint, fails the test.

Recovery is the node agent in every frame (cue_plugin.node.agent): a gang that fails is restarted inside
the frames with ``--resume``; only a frame whose process or host is gone needs Cuebot's retry. The
double clamps ``max_retries`` to 1 as Cuebot's JobSpec does and never retries a failed frame that ran
more than 12 h (8 h before OpenCue #2169: the 13 h test runs under both); neither decides whether these
runs survive.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time

import psutil
import pytest

from cue_plugin.submit.spec import RunState
from tests.cue_plugin.test_e2e_training import (assert_model_loads, farm, find_trainer, running_farm,  # noqa: F401
                                                submit, wait_finished)
from tests.cuebot.completion import CUEBOT_BEFORE_2169, CUEBOT_SINCE_2169, HOST_DOWN_INTERVAL_S
from trainer.record.rundir import RunPaths, read_metrics
from trainer.record.runrecord import read_record_or_empty


def wait_step(paths: RunPaths, at_least: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while True:
        rows = read_metrics(paths)
        if rows and rows[-1]["step"] >= at_least:
            return int(rows[-1]["step"])
        assert time.monotonic() < deadline, f"training did not reach step {at_least}"
        time.sleep(0.05)


def wait_attempt(paths: RunPaths, n: int, timeout: float = 150) -> float:
    """Block until run.json records training attempt ``n``; returns time.monotonic() then."""
    deadline = time.monotonic() + timeout
    while len(read_record_or_empty(paths).attempts) < n:
        assert time.monotonic() < deadline, f"no training attempt {n} after {timeout} s"
        time.sleep(0.05)
    return time.monotonic()


def find_frame(rank: int, run: str, timeout: float = 30) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            if "cue_plugin.frame" in cmd and any(run in c for c in cmd):
                with contextlib.suppress(psutil.Error):
                    if p.environ().get("CUE_IFRAME") == str(rank):
                        return p
        time.sleep(0.1)
    pytest.fail(f"no frame process of rank {rank} for {run}")


def at_fault(paths: RunPaths, killed: psutil.Process, timeout: float = 30) -> tuple[int, int]:
    """Once ``killed`` has exited (the fault confirmed): ``(step reached, newest checkpoint step)`` from what
    the run directory holds then: the last metrics line and the newest complete checkpoint (0: none).
    Rank 0 writes both and cannot pass a step its gang has not finished, so nothing newer appears from the
    faulted gang; the next attempt needs a new gang, seconds away."""
    with contextlib.suppress(psutil.NoSuchProcess):
        killed.wait(timeout=timeout)
    rows = read_metrics(paths)
    checkpoints = paths.list_checkpoints()
    newest = checkpoints[-1][0] if checkpoints else 0
    return max(int(rows[-1]["step"]) if rows else 0, newest), newest


def assert_resumed_within_one_interval(start: int, reached: int, newest: int, interval: int) -> int:
    """The next attempt's ``start`` step is the newest checkpoint at the fault (or newer: one being written as
    the fault hit), so steps lost = reached - start <= one checkpoint interval; returns the steps lost.
    The fault must come after >= 2 checkpoints: then resuming the second-newest (scripts/mutant_resume.sh)
    fails here."""
    # two checkpoints or more before the fault, so that resuming an older one than the newest fails the test
    assert newest >= 2 * interval, f"fewer than 2 checkpoints before the fault (newest step {newest}): add steps"
    assert start >= newest, f"resumed from step {start}, not from the newest checkpoint (step {newest})"
    reached = max(reached, start)  # a checkpoint the gang finished as the fault hit: that step was reached
    assert 0 <= reached - start <= interval, f"lost {reached - start} steps (> {interval}): {start=} {reached=}"
    return reached - start


FIGURES_ENV = "CUETRAIN_FAULT_FIGURES"  # test-side only: a JSON-lines file the measured figures are appended to


def report(name: str, lost: int, seconds: float) -> None:
    """Print one fault's figures; with ``$CUETRAIN_FAULT_FIGURES`` set, also append them there as one JSON line
    ``{"fault", "steps_lost" [steps], "seconds_to_training" [s]}`` (scripts/fault_figures.py takes medians)."""
    print(f"{name}: steps lost {lost}, fault -> training again {seconds:.1f} s")
    if os.environ.get(FIGURES_ENV):
        with open(os.environ[FIGURES_ENV], "a", encoding="utf-8") as out:
            out.write(json.dumps({"fault": name, "steps_lost": lost, "seconds_to_training": round(seconds, 2)}) + "\n")


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sigterm_to_a_frame_checkpoints_and_the_retry_loses_no_step(farm, tmp_path):  # noqa: F811
    cue, handle, paths = submit(farm, tmp_path, "sigterm", max_retries=1, steps=300, checkpoint_interval=50, log_interval=10,
                                contact_sheet_interval=1000)
    wait_step(paths, 110)  # checkpoints at 50 and 100 before the stop's own: resuming an older one fails
    trainer = find_trainer(1, paths.root)
    find_frame(1, str(paths.root)).send_signal(signal.SIGTERM)  # the frame passes it on to its trainer
    fault = time.monotonic()
    reached, _ = at_fault(paths, trainer)  # the trainer checkpointed and exited 75
    again = wait_attempt(paths, 2)
    status = wait_finished(cue, handle, paths, timeout=180)
    assert status.state is RunState.SUCCEEDED, status
    record = read_record_or_empty(paths)
    stopped = record.attempts[1]["start_step"]
    assert stopped >= reached > 0 and record.final_step == 300  # no step lost: the checkpoint at the stop step
    assert {f["exit_status"] for f in status.frames.values()} == {0}
    logs = paths.rank_log(0).read_text() + paths.rank_log(1).read_text()
    assert f"stopped at step {stopped}" in logs and "trainer exited with code 75" in logs
    report("SIGTERM to frame 1", 0, again - fault)


THIRTEEN_HOURS_S = 13 * 3600


@pytest.fixture(params=[CUEBOT_BEFORE_2169, CUEBOT_SINCE_2169], ids=["cuebot-8h-before-2169", "cuebot-12h-from-2169"])
def versioned_farm(request):
    """The 2-RQD farm under each Cuebot no-retry limit: 8 h before OpenCue #2169, 12 h from it."""
    yield from running_farm(2, request.param)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_frame_over_12_hours_that_loses_a_rank_recovers_inside_its_frames(versioned_farm, tmp_path):
    """Issue 10, item 2 (and issue 5's killed rank): both frames are made 13 h old on the double's clock
    (Cuebot's FRAME_TIME_NO_RETRY is 8 h before OpenCue #2169 and 12 h from it: a failed frame that old is
    DEAD, never retried), then rank 1's trainer is killed. The node agents restart the gang inside the
    frames, which never exit: SUCCEEDED with no Cuebot retry, under either limit."""
    farm = versioned_farm
    assert THIRTEEN_HOURS_S > farm.cuebot.state.rules.frame_time_no_retry_s  # past the no-retry limit
    cue, handle, paths = submit(farm, tmp_path, "longframe", max_retries=1, steps=300, checkpoint_interval=50,
                                log_interval=10, contact_sheet_interval=1000)
    wait_step(paths, 110)  # after 2 checkpoints (50, 100)
    job = next(j for j in farm.cuebot.jobs() if j.id == handle.job_id)
    for frame in job.frames:
        farm.cuebot.state.backdate(frame.id, THIRTEEN_HOURS_S)
    trainer = find_trainer(1, paths.root)
    trainer.send_signal(signal.SIGKILL)
    fault = time.monotonic()
    reached, newest = at_fault(paths, trainer)
    again = wait_attempt(paths, 2)
    status = wait_finished(cue, handle, paths, timeout=180)
    assert status.state is RunState.SUCCEEDED, status
    assert [f["retries"] for f in status.frames.values()] == [0, 0]  # Cuebot retried nothing
    record = read_record_or_empty(paths)
    start = record.attempts[1]["start_step"]
    lost = assert_resumed_within_one_interval(start, reached, newest, 50)
    assert record.final_step == 300
    assert (record.gang["generation"], record.gang["restarts"]) == (2, 1)
    logged = [row["step"] for row in read_metrics(paths)]
    resumed = list(range(start + 10, 301, 10))
    assert logged[-len(resumed):] == resumed  # the new generation continues from the checkpoint (issue 5)
    assert f"resumed from {paths.checkpoint(start)}" in paths.rank_log(0).read_text()
    assert "lost rank 1 during training" in paths.rank_log(0).read_text()
    assert_model_loads(paths)
    assert "waiting for frame 0's next generation (node agent: this frame does not exit)" in \
        paths.rank_log(1).read_text()
    no_retry_h = farm.cuebot.state.rules.frame_time_no_retry_s // 3600
    report(f"13 h frame loses rank 1's trainer (Cuebot no-retry limit {no_retry_h} h)", lost, again - fault)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_losses_a_whole_frame_then_rank_0s_trainer_recover(farm, tmp_path):  # noqa: F811
    """Loss 1: frame 1 killed whole (SIGKILL to its process group: RQD's /usr/bin/time, the frame, its
    trainer); RQD reports signal 9: frame 1 spends its one retry (JobSpec bounds max_retries to 1),
    while frame 0's node agent restarts its trainer without exiting and waits for it. Loss 2: rank 0's
    trainer SIGKILLed: frame 0's agent restarts it; frame 1's agent sees frame 0's new generation,
    stops its trainer and joins. SUCCEEDED, and Cuebot retried only the frame that was gone.
    """
    cue, handle, paths = submit(farm, tmp_path, "twolosses", max_retries=3, steps=450, checkpoint_interval=50,
                                log_interval=10, contact_sheet_interval=1000)
    for loss in (1, 2):
        wait_step(paths, (read_record_or_empty(paths).attempts[-1]["start_step"] if loss > 1 else 50) + 60)  # >= 2 checkpoints
        if loss == 1:
            what = "whole frame 1 killed"
            killed = find_trainer(1, paths.root)
            os.killpg(os.getpgid(find_frame(1, str(paths.root)).pid), signal.SIGKILL)
        else:
            what = "rank 0's trainer killed"
            killed = find_trainer(0, paths.root)
            killed.send_signal(signal.SIGKILL)
        fault = time.monotonic()
        reached, newest = at_fault(paths, killed)
        again = wait_attempt(paths, loss + 1)
        start = read_record_or_empty(paths).attempts[loss]["start_step"]
        lost = assert_resumed_within_one_interval(start, reached, newest, 50)
        report(f"two losses, loss {loss} ({what})", lost, again - fault)
    status = wait_finished(cue, handle, paths, timeout=200)
    assert status.state is RunState.SUCCEEDED, status
    assert (status.frames["0"]["retries"], status.frames["1"]["retries"]) == (0, 1)
    assert read_record_or_empty(paths).gang["restarts"] == 2


@pytest.fixture
def farm3():
    """The farm with a spare third host (the double books one frame per host)."""
    yield from running_farm(3)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_rqd_killed_with_its_host_recovers_through_the_down_host_rule(farm3, tmp_path):
    """The host of frame 1 dies: its RQD and its frames are SIGKILLed, so Cuebot hears nothing. Frame 0's
    agent restarts rank 0 and waits. Cuebot marks a host DOWN once its last ping is HOST_DOWN_INTERVAL
    (300 s) old (here made 301 s old on the double's clock) and puts its frames back to WAITING (exit 399);
    frame 1 runs again on the spare host and joins frame 0's new generation. SUCCEEDED."""
    farm = farm3
    cue, handle, paths = submit(farm, tmp_path, "rqdkilled", max_retries=1, steps=300, checkpoint_interval=50,
                                log_interval=10, contact_sheet_interval=1000)
    wait_step(paths, 110)  # after 2 checkpoints (50, 100)
    status = cue.describe(handle)
    host1 = status.frames["1"]["host"]
    rqd = next(r for r in farm.rqds if r.hostname == host1)
    frame1 = find_frame(1, str(paths.root))
    trainer1 = find_trainer(1, paths.root)
    rqd.process.kill()  # the host dies: RQD first, then everything it ran
    os.killpg(os.getpgid(frame1.pid), signal.SIGKILL)
    fault = time.monotonic()
    reached, newest = at_fault(paths, trainer1)
    farm.cuebot.state.backdate_ping(host1, HOST_DOWN_INTERVAL_S + 1)  # its silence has lasted 5 min
    again = wait_attempt(paths, 2, timeout=200)
    status = wait_finished(cue, handle, paths, timeout=200)
    assert status.state is RunState.SUCCEEDED, status
    record = read_record_or_empty(paths)
    start = record.attempts[1]["start_step"]
    lost = assert_resumed_within_one_interval(start, reached, newest, 50)
    assert record.final_step == 300
    # a down host (exit 399) spends no retry (FrameDaoJdbc.updateFrameStarted): frame 1 ran again, retries 0
    assert status.frames["1"]["host"] != host1 and (status.frames["0"]["retries"], status.frames["1"]["retries"]) == (0, 0)
    report(f"RQD of {host1} killed with its frame", lost, again - fault)

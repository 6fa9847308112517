"""Training across hosts with nothing set by hand (issue 9): 3 namespace hosts, real RQDs, real trainer.

Every job is submitted through real pyoutline (``OpenCueFarm.submit``, which passes ``CUEBOT_HOSTS``
on to the frames, as ``cuetrain submit`` does) with the ``cpu-test`` template, and its frames run
exactly what ``cuetrain submit`` writes, with only ``PYTHONPATH`` and ``OMP_NUM_THREADS=1`` added:
no ``CUETRAIN_MAIN_HOST``, no ``COPYCAT_LOCAL_ADDR``. On every host the host name resolves to
127.0.1.1 (bed.py), the trap that made frame 1 wait for frame 0 at its own loopback before.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from cue_plugin.node import rendezvous_cuebot

from cue_plugin.submit import templates
from cue_plugin.submit.opencue_farm import OpenCueFarm
from cue_plugin.submit.spec import JobHandle, JobStatus, RunState
from tests.cue_plugin.test_e2e_training import wait_finished
from tests.conftest import CHILD_PYTHONPATH, ROOT, make_pairs
from tests.cuebot.fixtures import use_pycue
from tests.multihost.farm import FRAME_CORES, MultiHostFarm, multihost_farm  # noqa: F401  (a fixture)
from trainer.core.config import TrainConfig
from trainer.record.rundir import RunPaths, read_json, read_metrics

pytestmark = pytest.mark.slow


def submit(farm: MultiHostFarm, tmp_path: Path, name: str, *, world_size: int = 3, env: dict | None = None,
           max_retries: int = 0, rendezvous: str = "file", ranks_per_frame: int = 1,
           **train) -> tuple[OpenCueFarm, JobHandle, RunPaths]:
    inp, tgt = make_pairs(tmp_path / "data")
    values = dict(steps=4, batch_size=3, crop_size=16, model_size="small", log_interval=2, checkpoint_interval=2,
                  contact_sheet_interval=4)
    values.update(train)
    cfg = TrainConfig(input_dir=str(inp), target_dir=str(tgt), run_dir=str(tmp_path / name), **values)
    extra = {"PYTHONPATH": CHILD_PYTHONPATH, "OMP_NUM_THREADS": "1", **(env or {})}
    job = templates.make_job(cfg, template="cpu-test", world_size=world_size, show="cuetrain", shot="multihost",
                             user="trainer", extra_env=extra, rendezvous=rendezvous, rendezvous_timeout_s=40,
                             max_retries=max_retries, ranks_per_frame=ranks_per_frame,
                             cores=FRAME_CORES / ranks_per_frame)  # per rank: a frame of L ranks fills one host
    cue = OpenCueFarm(hosts=[farm.cuebot.bridge_address], allow_root=True)
    return cue, cue.submit(job), RunPaths.of(cfg.run_dir)


def logs(paths: RunPaths) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(paths.logs.glob("rank_*.log")))


def run_to_success(farm: MultiHostFarm, tmp_path: Path, name: str,
                   **job) -> tuple[JobHandle, RunPaths, JobStatus, float]:
    """Submit job ``name`` (:func:`submit`), wait until OpenCue finishes it, check it SUCCEEDED; returns the
    handle, run paths, final status and seconds from submit to finished."""
    t0 = time.monotonic()
    with use_pycue(farm.cuebot.bridge_address):
        cue, handle, paths = submit(farm, tmp_path, name, **job)
        status = wait_finished(cue, handle, paths, timeout=120)
    took = time.monotonic() - t0
    assert status.state is RunState.SUCCEEDED, f"{status}\n{logs(paths)}"
    return handle, paths, status, took


@pytest.mark.timeout(150)
def test_a_three_host_job_trains_with_no_address_settings(multihost_farm, tmp_path):
    farm = multihost_farm
    handle, paths, status, took = run_to_success(farm, tmp_path, "a")
    assert {f["host"] for f in status.frames.values()} == {h.ip for h in farm.bed.hosts}  # booked by cores
    record = read_json(paths.run_json)
    assert record["state"] == "succeeded" and record["world_size"] == 3 and record["final_step"] == 4
    assert [row["step"] for row in read_metrics(paths)] == [2, 4]
    pub_host = json.loads(paths.rendezvous.read_text())["host"] if paths.rendezvous.exists() else None
    frame0_ip = status.frames["0"]["host"]
    log0, log1 = paths.rank_log(0).read_text(), paths.rank_log(1).read_text()
    assert f"main address {frame0_ip}:" in log0 and pub_host in (None, frame0_ip)
    assert "routes to Cuebot" in log0  # why this IP: the interface that routes to CUEBOT_HOSTS
    assert "collective interface eth0" in log1 and "routes to the main address" in log1
    print(f"(a) 3 hosts, no address settings: submit -> SUCCEEDED in {took:.1f} s")


@pytest.mark.timeout(150)
def test_b_the_cuebot_rendezvous_finds_frame_0_through_pycue_find_frame(multihost_farm, tmp_path):
    farm = multihost_farm
    handle, paths, status, took = run_to_success(farm, tmp_path, "b", rendezvous="cuebot")
    assert {f["host"] for f in status.frames.values()} == {h.ip for h in farm.bed.hosts}
    port = rendezvous_cuebot.cuebot_port(handle.job_id, 0)
    frame0_ip = status.frames["0"]["host"]  # Cuebot's last_resource host: RQD reports its IP as its name
    for rank in (1, 2):
        assert f"rank {rank}: frame 0 (attempt retry-0) is at {frame0_ip}:{port}" in paths.rank_log(rank).read_text()
    assert not paths.rendezvous.exists()  # nothing is published in the run directory in this mode
    assert read_json(paths.run_json)["final_step"] == 4
    print(f"(b) --rendezvous cuebot, 3 hosts: submit -> SUCCEEDED in {took:.1f} s")


@pytest.mark.timeout(150)
def test_two_hosts_with_two_ranks_per_frame(multihost_farm, tmp_path):
    """Issue 9 item 4 in the bed: world size 4, 2 ranks per frame = 2 frames, one per host, 4 ranks in one gang."""
    handle, paths, status, took = run_to_success(multihost_farm, tmp_path, "rpf", world_size=4, ranks_per_frame=2,
                                                 batch_size=4)
    assert sorted(status.frames) == ["0", "1"]  # ONE layer of 2 frames
    assert len({f["host"] for f in status.frames.values()}) == 2  # each frame booked a whole host (2 x 1 core)
    record = read_json(paths.run_json)
    assert record["world_size"] == 4 and record["final_step"] == 4
    frame1_ip = status.frames["1"]["host"]
    for rank in (2, 3):  # frame 1's ranks reach frame 0's host through the bridge, not loopback
        text = paths.rank_log(rank).read_text()
        assert f"collective interface eth0 ({frame1_ip})" in text, text[-3000:]
    print(f"2 hosts x 2 ranks per frame: submit -> SUCCEEDED in {took:.1f} s")


def wait_for(predicate, timeout: float, what: str, paths: RunPaths) -> float:
    """Poll ``predicate`` until true; returns when (monotonic)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen after {timeout} s\n{logs(paths)[-6000:]}")
        time.sleep(0.1)
    return time.monotonic()


@pytest.mark.timeout(240)
def test_c_a_host_whose_link_goes_down_fails_the_survivors_in_time_and_the_gang_recovers(multihost_farm, tmp_path):
    farm, collective_s = multihost_farm, 15
    t0 = time.monotonic()
    with use_pycue(farm.cuebot.bridge_address):
        cue, handle, paths = submit(farm, tmp_path, "c", max_retries=2, steps=120, checkpoint_interval=10,
                                    log_interval=10, contact_sheet_interval=120, collective_timeout_s=collective_s)
        # 2 checkpoints before the fault: resuming the second-newest (scripts/mutant_resume.sh) then fails
        wait_for(lambda: len(paths.list_checkpoints()) >= 2, 90, "2 checkpoints", paths)
        victim = farm.host_of(cue.describe(handle).frames["2"]["host"])
        farm.bed.link_down(victim)
        down = time.monotonic()
        try:
            lost = [wait_for(lambda r=r: "lost rank" in paths.rank_log(r).read_text(), 60, f"rank {r} failing", paths)
                    for r in (0, 1)]
            # the fault is confirmed (both survivors named the lost rank): the step reached and the newest
            # checkpoint now, before any new gang can form (it needs the link back)
            reached = max([int(row["step"]) for row in read_metrics(paths)[-1:]] + [0])
            newest = paths.list_checkpoints()[-1][0]
        finally:
            farm.bed.link_up(victim)
        status = wait_finished(cue, handle, paths, timeout=150)
    took = time.monotonic() - t0
    failed_after = max(lost) - down
    # the collective times out; rank 2's heartbeat has been still since the link went down, so it is named at once
    assert failed_after < collective_s + 8, failed_after
    assert status.state is RunState.SUCCEEDED, f"{status}\n{logs(paths)}"
    # the frames' node agents restart the gang (frame 2's own trainer also fails, or is retried by the farm)
    record = read_json(paths.run_json)
    assert record["gang"]["restarts"] >= 1 and status.frames["0"]["retries"] == 0, (record["gang"], status.frames)
    starts = [a["start_step"] for a in record["attempts"]]
    assert record["final_step"] == 120 and len(starts) >= 2 and starts[-1] > 0, starts
    # the next attempt resumed from the newest checkpoint at the fault: at most one checkpoint interval (10) lost
    assert starts[1] >= newest >= 20 and 0 <= max(reached, starts[1]) - starts[1] <= 10, (starts, reached, newest)
    assert "lost rank 2 during training" in paths.rank_log(0).read_text()
    print(f"(c) link of host {victim} down at {down - t0:.1f} s: survivors failed {failed_after:.1f} s later "
          f"(collective timeout {collective_s} s); job SUCCEEDED at {took:.1f} s, attempts start at {starts}")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["COPYCAT_LOCAL_ADDR", "GLOO_SOCKET_IFNAME"])
def test_d_a_wrong_interface_setting_fails_every_rank_with_a_clear_line(multihost_farm, tmp_path, name):
    """``lo`` on a multi-host job. COPYCAT_LOCAL_ADDR=lo is refused before any connection: frame 0's
    trainer exits 2 and its failure notice stops the waiting frames at once (exit 3). A
    GLOO_SOCKET_IFNAME=lo left in the farm's environment (kept, as if an admin set it) makes gloo
    fail to connect; the failing rank tells the others through the store and every rank exits 3."""
    farm = multihost_farm
    t0 = time.monotonic()
    with use_pycue(farm.cuebot.bridge_address):
        cue, handle, paths = submit(farm, tmp_path, f"d{name[0].lower()}", env={name: "lo"}, collective_timeout_s=20)
        deadline = time.monotonic() + 90
        while {f["state"] for f in cue.describe(handle).frames.values()} != {"DEAD"}:
            assert time.monotonic() < deadline, f"{cue.describe(handle)}\n{logs(paths)}"
            time.sleep(0.3)
        status = cue.describe(handle)
        cue.cancel(handle)  # DEAD frames keep a job PENDING
    took = time.monotonic() - t0
    codes = [status.frames[str(r)]["exit_status"] for r in range(3)]
    for rank in range(3):
        text = paths.rank_log(rank).read_text()
        assert "Traceback" not in text, text
        if name == "COPYCAT_LOCAL_ADDR":
            assert "COPYCAT_LOCAL_ADDR=lo is loopback, but this host reaches the main address" in text, text
            assert "unset COPYCAT_LOCAL_ADDR (cuetrain then uses eth0)" in text, text
        else:
            errors = [line for line in text.splitlines() if "cuetrain: error:" in line]
            assert len(errors) == 1 and "interface lo 127.0.0.1" in errors[0], text
            assert "loopback address" in errors[0] and "set COPYCAT_LOCAL_ADDR" in errors[0], errors
    assert codes == ([2, 3, 3] if name == "COPYCAT_LOCAL_ADDR" else [3, 3, 3]), status.frames
    assert took < 60, took  # not the 40 s rendezvous timeout plus more: nobody waits it out
    print(f"(d) {name}=lo: every rank failed with a clear line in {took:.1f} s (exit codes {codes})")

"""benchmarks/soak.py: its seeded schedule, its judgements, and the seeded 10-fault soak CI runs (issue 48).

The soak itself (``--faults 10 --seed 0 --steps 200``, the ``cuetrain local`` path: 2 real ranks, real faults, the
demo's carphone clip) must end with exit 0 and its one summary line; so must one elastic run on the farm
(``--faults 1 --seed 0 --paths elastic``: a 3-frame job loses a frame's host, shrinks to 2 ranks and grows back). The
figures of its 100-fault run are in docs/failure_handling.md ("Randomized fault soak").
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import soak  # noqa: E402
from lib import soak_checks  # noqa: E402
from lib import soak_plan  # noqa: E402
from lib.soak_plan import Fault, FaultOutcome  # noqa: E402

LOCAL = [name for name, kind in soak_plan.KINDS.items() if "local" in kind.paths]
SUMMARY = re.compile(r"^(\d+) faults, (\d+) hangs, (\d+) lost runs, (\d+) orphans, worst steps lost (\d+)$")


def test_the_schedule_is_seeded_and_every_fault_hits_a_run_with_two_checkpoints_behind_it():
    plan = soak_plan.schedule(40, 7, {"local": LOCAL, "farm": ["kill_rank"]}, steps=300, interval=25)
    assert plan == soak_plan.schedule(40, 7, {"local": LOCAL, "farm": ["kill_rank"]}, steps=300, interval=25)
    assert plan != soak_plan.schedule(40, 8, {"local": LOCAL, "farm": ["kill_rank"]}, steps=300, interval=25)
    assert sum(len(r.faults) for r in plan) == 40
    assert [r.path for r in plan[:4]] == ["local", "farm", "local", "farm"]  # round robin over the paths
    for run in plan:
        steps = [f.step for f in run.faults]
        assert all(50 <= s < 275 for s in steps), steps  # >= 2 checkpoints before, >= 1 interval of room after
        assert all(b - a > 25 for a, b in zip(steps, steps[1:])), steps  # the last recovery is behind
        assert all(f.kind in (LOCAL if run.path == "local" else ["kill_rank"]) for f in run.faults)
    with pytest.raises(ValueError, match="--steps 75 leaves no room"):
        soak_plan.schedule(1, 0, {"local": LOCAL}, steps=75, interval=25)


def test_a_second_writer_must_be_refused_now_that_the_lease_is_required():
    assert soak_checks.LEASE_REQUIRED
    assert soak_checks.judge_second_submit(2) == (True, "second submit refused (exit 2)")
    ok, note = soak_checks.judge_second_submit(0)
    assert not ok and "not refused (exit 0)" in note
    ok, note = soak_checks.judge_second_submit(None, lease_required=False)
    assert ok and note.startswith("known gap")


def test_a_supervisor_exit_is_accepted_only_where_its_fault_explains_it():
    assert soak_checks.expected_exit("sigterm_agent", 75, "stopped")
    assert not soak_checks.expected_exit("sigterm_agent", 75, "failed")
    assert soak_checks.expected_exit("kill_agent", -9, "running")
    assert not soak_checks.expected_exit("kill_rank", 4, "failed")  # the supervisor restarts a lost rank itself
    assert not soak_checks.expected_exit("disk_full", 2, "failed")  # rank 0 rides a full disk out: no exit
    assert (soak_plan.KINDS["disk_full"].attempts, soak_plan.KINDS["disk_full"].lost_intervals) == (0, 0)


def test_the_limit_of_each_fault_is_the_documented_chain_of_timeouts():
    # notice: max(collective 5 s, 3 heartbeats + 1 s = 10 s); SIGTERM -> SIGKILL: max(20, 5) + 10 s; gang: 60 s
    assert soak_plan.resolve_limit_s("kill_rank", 5, 5, 60) == pytest.approx(10 + 30 + 60)
    # a SIGSTOP or a cut link is held twice the collective timeout + 3 s: past it from every peer's view
    assert soak_plan.resolve_limit_s("sigstop_rank", 5, 5, 60) == pytest.approx(10 + 13 + 30 + 60)
    assert soak_plan.resolve_limit_s("cut_host", 5, 5, 60) == pytest.approx(10 + 13 + 30 + 60)


def test_kind_table_gives_count_median_worst_and_steps_lost():
    outs = [FaultOutcome(Fault("kill_rank", 60, 1), "local", seconds=s, steps_lost=n)
            for s, n in ((4.0, 10), (6.0, 0), (20.0, 25))]
    outs.append(FaultOutcome(Fault("second_submit", 80, 0), "local", seconds=None))
    table = soak.kind_table(outs)
    assert "| local | kill_rank | 3 | 6.0 | 20.0 | 10 / 25 |" in table
    assert "| local | second_submit | 1 | - | - | 0 / 0 |" in table


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_seeded_10_fault_soak_of_cuetrain_local_loses_nothing(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--faults", "10", "--seed", "0",
                           "--steps", "200", "--work-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=570, cwd=ROOT)
    lines = proc.stdout.strip().splitlines()
    assert lines and SUMMARY.match(lines[-1]), proc.stdout[-3000:] + proc.stderr[-3000:]
    faults, hangs, lost, orphans, worst = map(int, SUMMARY.match(lines[-1]).groups())
    assert (proc.returncode, faults, hangs, lost, orphans) == (0, 10, 0, 0, 0), proc.stdout[-4000:]
    assert worst <= 2 * soak_plan.RunConfig().interval
    assert "| local | " in proc.stdout  # the per-kind table came before the summary


def test_a_process_left_behind_by_a_run_is_found_unless_it_was_there_before():
    before = frozenset(c.pid for c in __import__("psutil").Process().children(recursive=True))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in [p.pid for p in soak.stray_children(set(before))]
        assert child.pid not in [p.pid for p in soak.stray_children(set(before) | {child.pid})]
    finally:
        child.kill()
        child.wait()
    assert child.pid not in [p.pid for p in soak.stray_children(set(before))]


def test_the_netns_path_cuts_a_host_and_its_jobs_set_no_address_by_hand(tmp_path):
    from types import SimpleNamespace

    from lib.soak_farm import FarmDriver
    from lib.soak_netns import NetnsDriver, netns_unavailable

    kinds, notes = soak.available_kinds(["netns"])
    if netns_unavailable() is None:
        assert "cut_host" in kinds["netns"] and not {"disk_full", "second_submit", "cuebot_stop"} & set(kinds["netns"])
    else:
        assert kinds["netns"] == [] and any(n.startswith("netns: skipped: ") for n in notes), notes
    farm = SimpleNamespace(cuebot=SimpleNamespace(address="127.0.0.1:1", bridge_address="10.77.20.1:2"))
    args = (soak_plan.RunConfig(), (tmp_path, tmp_path), tmp_path / "run", tmp_path, farm)
    netns, local_farm = NetnsDriver(*args).job_env(), FarmDriver(*args).job_env()
    assert "CUETRAIN_MAIN_HOST" not in netns and netns["CUEBOT_HOSTS"] == "10.77.20.1:2"  # rank 1 is across the bridge
    assert local_farm["CUETRAIN_MAIN_HOST"] == "127.0.0.1" and local_farm["CUEBOT_HOSTS"] == "127.0.0.1:1"
    assert NetnsDriver(*args).job_options() == {"cores": 2.0}  # one frame per host


def test_a_frame_cuebot_started_again_is_never_killed_as_a_whole_group_again():
    # run 14 of the 100-fault soak at seed 1: kill_agent then kill_frame of frame 0; the group kill reports exit
    # status 1, the frame had spent the job's one retry on the first restart, so it went DEAD and the job hung
    plan = soak_plan.schedule(200, 3, {"farm": ["kill_frame", "kill_agent"], "local": ["kill_frame"]}, 300, 25)
    assert any(f.kind == "kill_frame" for r in plan if r.path == "farm" for f in r.faults)
    for run in plan:
        restarted: set[int] = set()
        for f in run.faults:
            if run.path == "farm":
                assert not (f.kind == "kill_frame" and f.target in restarted), run
                restarted.add(f.target)
    # cuetrain local has no Cuebot: its kill_frame are left as drawn, twice on one rank too
    assert any(len([f for f in r.faults if f.kind == "kill_frame" and f.target == 0]) > 1
               for r in plan if r.path == "local")
    two = (Fault("kill_agent", 60, 0), Fault("kill_frame", 120, 0), Fault("kill_frame", 180, 1))
    assert soak_plan.within_cuebot_retries("netns", two) == (two[0], Fault("kill_agent", 120, 0), two[2])
    assert soak_plan.within_cuebot_retries("local", two) == two


def test_a_farm_job_with_a_dead_frame_ends_its_run_as_lost_not_as_a_hang(tmp_path):
    from types import SimpleNamespace

    from lib.soak_farm import FarmDriver

    frames = {"0": {"state": "DEAD", "exit_status": 1, "retries": 1}, "1": {"state": "RUNNING"}}
    driver = FarmDriver(soak_plan.RunConfig(), (tmp_path, tmp_path), tmp_path / "run", tmp_path, farm=None)
    driver.cue = SimpleNamespace(describe=lambda handle: SimpleNamespace(native_state="IN_PROGRESS", frames=frames))
    driver.poll_state()
    assert driver.exit_code() == 1  # a PENDING job whose frame is DEAD never finishes by itself
    assert driver.notes == ["PROBLEM: frame 0 DEAD (exit status 1, retries 1)"]
    frames["0"]["state"] = "RUNNING"
    driver = FarmDriver(soak_plan.RunConfig(), (tmp_path, tmp_path), tmp_path / "run", tmp_path, farm=None)
    driver.cue = SimpleNamespace(describe=lambda handle: SimpleNamespace(native_state="IN_PROGRESS", frames=frames))
    driver.poll_state()
    assert driver.exit_code() is None and driver.notes == []


def test_asking_a_farm_job_its_state_never_stalls_the_wait_for_a_faults_step(tmp_path):
    # 100-fault soak at e7eb8cb, farm run 4: after a cuebot_stop, pycue's describe retried for seconds inside the
    # wait for the next fault's step, and the job trained past it to its end ("run ended (exit 0) before the fault")
    import threading
    from types import SimpleNamespace

    from lib.soak_farm import FarmDriver

    inside, release = threading.Event(), threading.Event()

    def describe(handle):
        inside.set()
        release.wait(5)  # pycue retrying against a double that is away
        inside.clear()
        return SimpleNamespace(native_state="FINISHED", state=SimpleNamespace(value="succeeded"), frames={})

    driver = FarmDriver(soak_plan.RunConfig(), (tmp_path, tmp_path), tmp_path / "run", tmp_path, farm=None)
    driver.cue = SimpleNamespace(describe=describe, cancel=lambda handle: None)
    driver.start_polling()
    assert inside.wait(5)
    assert driver.exit_code() is None
    assert inside.is_set()  # answered while the describe was still in flight
    release.set()
    assert driver._poller is not None
    driver._poller.join(5)
    assert driver.exit_code() == 0
    driver.kill_all()


def test_a_fault_the_run_trains_on_through_is_the_last_of_its_run():
    # the disk_full soak at seed 2: a run trained to its end during a full disk's 3 s hold, so the fault planned
    # after it was never injected
    plan = soak_plan.schedule(300, 5, {"local": ["disk_full", "kill_rank", "sigstop_rank"]}, 300, 25)
    assert sum(f.kind == "disk_full" for r in plan for f in r.faults) > 10
    for run in plan:
        kinds = [f.kind for f in run.faults]
        assert "disk_full" not in kinds[:-1], kinds
        assert [f.step for f in run.faults] == sorted(f.step for f in run.faults)
    two = (Fault("disk_full", 60, 1), Fault("kill_rank", 120, 0), Fault("disk_full", 180, 0), Fault("sigstop_rank", 240, 1))
    assert soak_plan.held_faults_last(two) == (Fault("sigstop_rank", 60, 1), Fault("kill_rank", 120, 0),
                                               Fault("disk_full", 180, 0), Fault("disk_full", 240, 1))


def test_an_elastic_run_takes_one_fault_early_against_a_frame_that_is_not_frame_0():
    plan = soak_plan.schedule(40, 5, {"local": LOCAL, "elastic": ["elastic"]}, steps=300, interval=25)
    elastic = [r for r in plan if r.path == "elastic"]
    assert elastic and all(len(r.faults) == 1 for r in elastic)
    assert all(50 <= r.faults[0].step < 75 for r in elastic)  # the first slot: the rest of the run to grow back in
    assert {r.faults[0].target for r in elastic} == {1, 2}  # frame 0 hosts the gang: never the lost frame
    assert all(f.kind != "elastic" for r in plan if r.path == "local" for f in r.faults)
    cfg = soak_plan.RunConfig().for_path("elastic")
    assert (cfg.world_size, cfg.crop, cfg.steps, cfg.seed) == (3, soak_plan.ELASTIC_CROP, 300, 0)
    assert soak_plan.RunConfig().for_path("farm") == soak_plan.RunConfig()
    with pytest.raises(SystemExit) as exc:
        soak.parse_args(["--faults", "1", "--paths", "elastic", "--steps", "200"])
    assert exc.value.code == 2  # too few steps for the grow-back: a usage error, not a lost run


def test_the_elastic_limits_are_the_window_for_the_shrink_and_their_own_for_the_grow_back():
    # notice 10 s + the elastic window 3 s + SIGTERM -> SIGKILL 30 s + gang 60 s
    assert soak_plan.resolve_limit_s("elastic", 5, 5, 60) == pytest.approx(10 + soak_plan.ELASTIC_WINDOW_S + 30 + 60)
    assert soak_plan.grow_limit_s(60) == pytest.approx(soak_plan.GROW_HOLD_S + 60)


def test_an_elastic_job_is_submitted_with_3_frames_and_min_world_size_2(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from cue_plugin.submit.builder import frame_argv
    from cue_plugin.submit.opencue_farm import OpenCueFarm
    from lib.soak_elastic import ElasticFarmDriver

    jobs = []
    monkeypatch.setattr(OpenCueFarm, "submit", lambda self, job: jobs.append(job) or "handle")
    # no job to ask about: a describe would point this worker's pycue at 127.0.0.1:1 for the farm tests after it
    monkeypatch.setattr(ElasticFarmDriver, "start_polling", lambda self: None)
    farm = SimpleNamespace(cuebot=SimpleNamespace(address="127.0.0.1:1"))
    driver = ElasticFarmDriver(soak_plan.RunConfig().for_path("elastic"), (tmp_path, tmp_path), tmp_path / "run",
                               tmp_path, farm)
    driver.start()
    (job,) = jobs
    assert (job.world_size, job.min_world_size, job.train.crop_size) == (3, 2, soak_plan.ELASTIC_CROP)
    argv = frame_argv(job)
    assert argv[argv.index("--min-world-size"):][:4] == ["--min-world-size", "2", "--elastic-window-s", "3"]
    with pytest.raises(ValueError, match="frame 1 or more"):  # frame 0 hosts the gang
        driver.inject(Fault("elastic", 60, 0))


class _ElasticJob:
    """A scripted elastic job for :class:`soak_elastic.ElasticFault`, both its driver and its watcher: each poll of
    the job's exit code moves ``run.json`` on to the next of ``states`` ((gang generation, attempts))."""

    path = "elastic"

    def __init__(self, states: list[tuple[int, list[dict]]]) -> None:
        from trainer.record.runrecord import RunRecord

        self.RunRecord, self.states, self.notes = RunRecord, list(states), []
        self.first = {"attempt": 1, "world_size": 3, "start_step": 0}
        self.record, self.attempts = RunRecord(attempts=[self.first], gang={"generation": 1}), 1
        self.unlocked_with: int | None = None  # attempts in run.json when the soak unlocked the host

    def inject(self, fault):
        return lambda: setattr(self, "unlocked_with", self.attempts)

    def exit_code(self):
        if self.states:
            generation, more = self.states.pop(0)
            self.record = self.RunRecord(attempts=[self.first, *more], gang={"generation": generation})
            self.attempts = len(self.record.attempts)
        return None

    def reached_before(self, n: int) -> int:
        return {2: 60, 3: 75}.get(n, 0)


def test_an_elastic_fault_passes_when_the_gang_shrinks_then_grows_back_and_fails_when_it_restarts_whole():
    from lib.soak_elastic import ElasticFault

    shrunk, grown = {"attempt": 2, "world_size": 2, "start_step": 50}, {"attempt": 3, "world_size": 3, "start_step": 75}
    job = _ElasticJob([(2, []), (2, [shrunk]), (3, [shrunk]), (3, [shrunk, grown])])
    out = ElasticFault(job, job, Fault("elastic", 63, 2), soak_plan.RunConfig().for_path("elastic")).run()
    assert (out.problem, out.hang, out.steps_lost) == ("", False, 10)  # 60 - 50 by the shrink, 0 by the regroup
    assert out.seconds is not None and job.unlocked_with == 1  # the host came back before the 2-rank attempt
    assert "2 ranks from step 50" in out.note and "3 again from step 75" in out.note and job.notes
    whole = {"attempt": 2, "world_size": 3, "start_step": 50}
    job = _ElasticJob([(2, []), (2, [whole])])
    out = ElasticFault(job, job, Fault("elastic", 63, 1), soak_plan.RunConfig().for_path("elastic")).run()
    assert out.problem == "elastic: the gang did not shrink (attempt 2 has 3 ranks, not 2)"
    assert job.unlocked_with == 1


def test_an_elastic_run_must_show_its_gang_shrunk_and_grown_back_in_run_json(tmp_path):
    from trainer.record.rundir import RunPaths
    from trainer.record.runrecord import start_attempt, update_record

    cfg = soak_plan.RunConfig().for_path("elastic")
    outcomes = [FaultOutcome(Fault("elastic", 60, 1), "elastic", seconds=9.0, steps_lost=10)]
    assert soak_checks.elastic_sizes(3, outcomes) == [3, 2, 3]
    assert soak_checks.elastic_sizes(2, [FaultOutcome(Fault("kill_rank", 60, 1), "farm")]) == []
    for name, sizes in (("grown", [3, 2, 3]), ("whole", [3, 3, 3])):
        paths = RunPaths.of(tmp_path / name)
        paths.root.mkdir()
        for size, step in zip(sizes, (0, 50, 75)):
            start_attempt(paths, config={}, world_size=size, start_step=step, backend="gloo", host="h", pid=1,
                          versions={})
        update_record(paths, state="succeeded", final_step=cfg.steps)
        problems = soak_checks.check_run(paths, cfg, outcomes, 0)
        assert problems == ([] if name == "grown" else
                            ["attempts of [3, 3, 3] ranks in run.json, an elastic run's faults make [3, 2, 3]"])


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_seeded_elastic_soak_shrinks_and_grows_a_3_frame_job_on_the_farm(tmp_path):
    from lib.soak_farm import farm_unavailable
    from tests.cuebot.fixtures import skip_or_fail_missing_prerequisite

    if (why := farm_unavailable()) is not None:
        skip_or_fail_missing_prerequisite(why)
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--faults", "1", "--seed", "0",
                           "--paths", "elastic", "--work-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=380, cwd=ROOT)
    lines = proc.stdout.strip().splitlines()
    assert lines and SUMMARY.match(lines[-1]), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (proc.returncode, *map(int, SUMMARY.match(lines[-1]).groups()[:4])) == (0, 1, 0, 0, 0), proc.stdout
    assert "| elastic | elastic | 1 |" in proc.stdout and "2 ranks from step" in proc.stdout  # shrank, grew back

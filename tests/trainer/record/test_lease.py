"""trainer/record/lease.py: one live run per run directory (a renewed lease, no flock), refusals name the live run,
stale leases never block a resume or a retry, and of racing claimants exactly one wins."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict

import pytest

from tests.conftest import CHILD_PYTHONPATH
from trainer.record.lease import Lease, LeaseConfig, LeaseHeld, RunLease, check_free, read_lease
from trainer.record.rundir import RunPaths, atomic_write_json

FAST = LeaseConfig(ttl_s=3.0, renew_s=0.5, settle_s=0.2)


def _plant(paths: RunPaths, **kw) -> Lease:
    """A lease as another run would have left it (default: live, another host's)."""
    lease = Lease(**{"holder": "other", "command": "cuetrain local", "host": "render-07", "pid": 4242, "job": "",
                     "started": time.time() - 10, "expires": time.time() + 60, **kw})
    paths.root.mkdir(parents=True, exist_ok=True)
    atomic_write_json(paths.lease, asdict(lease))
    return lease


def test_a_live_lease_refuses_naming_host_pid_and_job_and_writes_nothing(tmp_path):
    paths = RunPaths.of(tmp_path / "run")
    _plant(paths, job="job-1234")
    before = sorted(os.listdir(paths.root))
    with pytest.raises(LeaseHeld, match=r"in use by a live run \(cuetrain local on host render-07, pid 4242, farm job "
                                        r"job-1234; lease renewed until") as err:
        RunLease(paths, "cuetrain local", config=FAST).claim()
    assert err.value.exit_code == 2
    assert sorted(os.listdir(paths.root)) == before and read_lease(paths).holder == "other"


def test_stale_leases_never_block_a_resume_or_a_retry(tmp_path):
    dead = subprocess.Popen(["sleep", "0"])
    dead.wait()
    cases = {"expired, another host": dict(expires=time.time() - 1),
             "this host, its pid gone (SIGKILL)": dict(host=socket.gethostname(), pid=dead.pid),
             "the same farm job retried on another host": dict(job="job-7")}
    for name, kw in cases.items():
        paths = RunPaths.of(tmp_path / name.replace(" ", "_"))
        _plant(paths, **kw)
        with RunLease(paths, "cuetrain train (rank 0)", job="job-7" if "job" in kw else "", config=FAST) as mine:
            assert read_lease(paths).holder == mine.lease.holder, name
        assert not paths.lease.exists(), name  # released at the end


def test_a_claim_removes_the_lease_writes_a_killed_holder_left_and_no_fresh_one(tmp_path):
    paths = RunPaths.of(tmp_path / "run")
    dead = subprocess.Popen(["sleep", "0"])
    dead.wait()
    _plant(paths, host=socket.gethostname(), pid=dead.pid)  # its holder was SIGKILLed mid-write
    old = [paths.root / n for n in (".lease.json.a1b2c3d4.tmp", ".lease.0123456789abcdef.tmp",
                                    "..lease.0123456789abcdef.tmp.x9y8z7w6.tmp")]
    fresh = paths.root / ".lease.json.f0f0f0f0.tmp"  # a write under way now (another claimant's) is not stale
    other = paths.root / ".run.json.a1b2c3d4.tmp"  # not a lease write: recordlock.remove_stale_temp_files's
    for p in (*old, fresh, other):
        p.write_text("{")
    for p in (*old, other):
        os.utime(p, (time.time() - 2 * FAST.ttl_s,) * 2)
    with RunLease(paths, "cuetrain train (rank 0)", config=FAST):
        assert [p.exists() for p in old] == [False] * 3
        assert fresh.exists() and other.exists()


def test_a_handed_over_lease_goes_to_its_heir_alone_and_the_export_holds_it(tmp_path):
    paths = RunPaths.of(tmp_path / "run")
    with RunLease(paths, "cuetrain local", config=FAST) as local:
        holder = local.hand_over()
    assert read_lease(paths).holder == holder  # left in place for the export, not released
    with pytest.raises(LeaseHeld, match="cuetrain local"):  # live to anyone else (this pid still runs)
        RunLease(paths, "cuetrain train (rank 0)", config=FAST).claim()
    with RunLease(paths, "cuetrain export (model.onnx)", config=FAST, adopt=holder) as heir:
        now = read_lease(paths)
        assert (now.holder, now.command, now.pid) == (heir.lease.holder, "cuetrain export (model.onnx)", os.getpid())
        with pytest.raises(LeaseHeld, match="cuetrain export"):
            RunLease(paths, "cuetrain local", config=FAST, adopt=holder).claim()  # the old id is spent
    assert not paths.lease.exists()


def test_cuetrain_export_into_a_live_run_directory_is_refused_and_writes_nothing(tmp_path):
    paths = RunPaths.of(tmp_path / "run")
    _plant(paths)
    atomic_write_json(paths.model_meta, {"exports": {"model.pt": {}}})
    before = {p.name: p.read_bytes() for p in paths.root.iterdir()}
    done = subprocess.run([sys.executable, "-m", "trainer.cli", "export", "--run-dir", str(paths.root)],
                          env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    assert "in use by a live run (cuetrain local on host render-07, pid 4242" in done.stderr
    assert {p.name: p.read_bytes() for p in paths.root.iterdir()} == before


def test_the_holder_renews_and_a_claim_after_release_succeeds(tmp_path):
    paths = RunPaths.of(tmp_path / "run")
    with RunLease(paths, "cuetrain local", config=FAST) as mine:
        first = read_lease(paths).expires
        time.sleep(1.6)  # three renewals
        assert read_lease(paths).expires > first and read_lease(paths).holder == mine.lease.holder
        with pytest.raises(LeaseHeld, match=f"pid {os.getpid()}"):
            check_free(paths)
    check_free(paths)


def _race(root: str, barrier, results) -> None:  # a claimant process
    paths = RunPaths.of(root)
    barrier.wait()
    try:
        lease = RunLease(paths, "cuetrain local", config=FAST)
        lease.claim()
        results.put(lease.lease.holder)
    except LeaseHeld:
        results.put("refused")


@pytest.mark.parametrize("stale", [False, True])
def test_of_four_racing_claimants_exactly_one_wins(tmp_path, stale):
    paths = RunPaths.of(tmp_path / "run")
    if stale:
        _plant(paths, expires=time.time() - 1)
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(paths.root), barrier, results)) for _ in range(4)]
    for p in procs:
        p.start()
    got = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    winners = [g for g in got if g != "refused"]
    assert len(winners) == 1, got
    assert read_lease(paths).holder == winners[0]


def test_two_local_runs_into_one_run_directory_give_one_run_and_one_refusal(pairs, tmp_path):
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "cuetrain", "local", "--world-size", "1", "--input", str(pairs[0]), "--target",
            str(pairs[1]), "--run-dir", str(run), "--steps", "100000", "--batch-size", "2", "--crop-size", "16",
            "--checkpoint-interval", "1000", "--contact-sheet-interval", "1000", "--log-interval", "10"]
    env = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, "CUETRAIN_EXPORT_ONNX": "0"}
    first = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (RunPaths.of(run).metrics.exists() and read_lease(RunPaths.of(run))):
        assert time.monotonic() < deadline and first.poll() is None, "the first run did not start"
        time.sleep(0.2)
    logs = {p: p.stat().st_size for p in (run / "logs").iterdir()}
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert second.returncode == 2, second.stderr
    assert f"in use by a live run (cuetrain local on host {socket.gethostname()}, pid {first.pid}" in second.stderr
    assert all(p.stat().st_size >= n for p, n in logs.items())  # the second wrote no log of its own
    assert first.poll() is None  # the live run trains on, untouched
    first.send_signal(signal.SIGTERM)  # preempted: it checkpoints and ends (exit 75), releasing the lease
    assert first.wait(timeout=120) == 75, first.stderr
    record = json.loads(RunPaths.of(run).run_json.read_text())
    assert len(record["attempts"]) == 1 and record["attempts"][0]["host"] == socket.gethostname()
    assert not RunPaths.of(run).lease.exists()


def test_submit_into_a_live_run_directory_is_refused_before_the_farm_is_asked(tmp_path, capsys):
    from cue_plugin.submit import cli
    from tests.cue_plugin.test_cli import FakeFarm, train_args

    _plant(RunPaths.of(tmp_path / "run"), job="job-99", host="render-02", pid=77)
    farm = FakeFarm()
    assert cli.main(["submit", "--template", "cpu-test", "--show", "demo", "--shot", "sh010", "--user", "artist",
                     "--world-size", "2", "--batch-size", "8", *train_args(tmp_path)], farm=farm) == 2
    assert farm.submitted == []
    assert "host render-02, pid 77, farm job job-99" in capsys.readouterr().err


def test_a_double_clicked_submit_is_refused_while_the_first_job_is_queued(tmp_path, capsys):
    """The first job holds no lease until its rank 0 starts: submit asks the farm about the job run.json records."""
    from cue_plugin.submit import cli
    from tests.cue_plugin.test_cli import FakeFarm, train_args
    from trainer.record.runrecord import update_record

    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    update_record(paths, farm={"job_id": "id-1", "job_name": "demo-sh010-artist_cuetrain_run"})
    argv = ["submit", "--template", "cpu-test", "--show", "demo", "--shot", "sh010", "--user", "artist",
            "--world-size", "2", "--batch-size", "8", *train_args(tmp_path)]
    farm = FakeFarm()  # describes every job as running
    assert cli.main(argv, farm=farm) == 2 and farm.submitted == []
    assert "belongs to farm job demo-sh010-artist_cuetrain_run (id id-1), which is still running" in \
        capsys.readouterr().err
    farm.down = True  # a job the farm cannot describe has ended: the run directory is free again
    assert cli.main(argv, farm=farm) == 0 and len(farm.submitted) == 1


def test_a_renewal_refused_by_a_full_disk_is_tried_again_until_it_lands(tmp_path, monkeypatch, caplog):
    """A full share (ENOSPC) must not end the renewals (trainer.record.storage): the lease is renewed once it frees."""
    import errno

    from trainer.record import lease as lease_mod
    from trainer.record.rundir import RunDirError

    paths, disk, real = RunPaths.of(tmp_path / "run"), {"full": False}, lease_mod.atomic_write_json

    def write(path, obj):
        if disk["full"]:
            raise RunDirError(f"cannot write {path}: No space left on device") from OSError(errno.ENOSPC, "full")
        real(path, obj)

    monkeypatch.setattr(lease_mod, "atomic_write_json", write)
    with caplog.at_level("WARNING"), RunLease(paths, "cuetrain local", config=FAST) as mine:
        disk["full"] = True
        time.sleep(1.2)  # two renewals refused
        stuck = read_lease(paths).expires
        disk["full"] = False
        time.sleep(1.0)
        assert read_lease(paths).expires > stuck and read_lease(paths).holder == mine.lease.holder
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if m.startswith(f"storage full: cannot write {paths.lease}")]) == 1
    assert len([m for m in messages if m.startswith(f"storage writable again: {paths.lease}")]) == 1

"""SIGTERM/SIGINT: the gang agrees on a step, rank 0 checkpoints it, every rank exits 75, --resume continues there."""

from __future__ import annotations

import json
import signal
import time

from tests.trainer.gang.test_formation import finish, start_rank
from trainer.core.exitcodes import ExitCode
from trainer.core.ports import free_port
from trainer.record.rundir import RunPaths
from trainer.record.runrecord import read_record

# No periodic checkpoint before the signal: only the stop can save the steps trained so far.
NO_PERIODIC = ("--checkpoint-interval", "100000", "--log-interval", "1", "--gang-timeout-s", "60")


def _wait_step(proc, run: RunPaths, at_least: int, timeout: float = 120) -> int:
    """Block until metrics.jsonl shows ``at_least`` steps; return the latest step logged."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, finish(proc)
        rows = run.metrics.read_text().splitlines() if run.metrics.exists() else []
        if rows and rows[-1].endswith("}") and json.loads(rows[-1])["step"] >= at_least:
            return json.loads(rows[-1])["step"]
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.05)


def test_sigterm_single_rank_checkpoints_that_step_and_resume_loses_nothing(pairs, tmp_path):
    run = RunPaths.of(tmp_path / "run")
    proc = start_rank(pairs, run.root, 0, 1, free_port(), *NO_PERIODIC, token=None, steps=3000)
    seen = _wait_step(proc, run, 15)
    proc.send_signal(signal.SIGTERM)
    t = time.monotonic()
    code, out = finish(proc)
    assert code == ExitCode.STOPPED, out
    assert time.monotonic() - t < 20  # the default grace
    record = read_record(run)
    assert record.state == "stopped" and record.exit_code == 75 and record.stopped_step >= seen
    assert [s for s, _ in run.list_checkpoints()] == [record.stopped_step]
    code, out = finish(start_rank(pairs, run.root, 0, 1, free_port(), "--resume",
                                  "--checkpoint-interval", "100000", "--log-interval", "100", token=None,
                                  steps=record.stopped_step + 20))
    assert code == 0, out
    resumed = read_record(run)
    assert [a["start_step"] for a in resumed.attempts] == [0, record.stopped_step]
    assert resumed.state == "succeeded" and resumed.stopped_step is None


def test_sigterm_to_one_rank_stops_both_at_one_step_and_the_gang_resumes_there(pairs, tmp_path):
    run = RunPaths.of(tmp_path / "run")
    port = free_port()
    ranks = [start_rank(pairs, run.root, r, 2, port, *NO_PERIODIC, steps=3000) for r in range(2)]
    seen = _wait_step(ranks[0], run, 10)
    ranks[1].send_signal(signal.SIGTERM)  # rank 1 only: the vote carries it to rank 0
    results = [finish(p) for p in ranks]
    assert [c for c, _ in results] == [ExitCode.STOPPED, ExitCode.STOPPED], results
    record = read_record(run)
    step = record.stopped_step
    assert record.state == "stopped" and step >= seen
    assert all(f"stopped at step {step}" in out for _, out in results)
    assert [s for s, _ in run.list_checkpoints()] == [step]
    port = free_port()
    ranks = [start_rank(pairs, run.root, r, 2, port, "--resume", "--log-interval", "100", steps=step + 10)
             for r in range(2)]
    assert [finish(p)[0] for p in ranks] == [0, 0]
    assert [a["start_step"] for a in read_record(run).attempts] == [0, step]


def test_sigint_is_trapped_like_sigterm_and_the_grace_watchdog_exits_76_when_stuck(tmp_path):
    import os
    import subprocess
    import sys

    from trainer.gang.stopvote import StopSignal

    before = signal.getsignal(signal.SIGINT)  # default_int_handler; SIG_IGN under a shell's background job
    with StopSignal(grace_s=60) as sig:
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: the handler only records it
        time.sleep(0.1)
        assert sig.signum == signal.SIGINT
        sig.finished()
    assert signal.getsignal(signal.SIGINT) is before  # restored
    stuck = ("import os, signal, sys, time\nfrom trainer.record.rundir import RunPaths\n"
             "from trainer.gang.stopvote import StopSignal, record_stop_timeout\n"
             "with StopSignal(grace_s=1.0, on_timeout=record_stop_timeout(RunPaths.of(sys.argv[1]))):\n"
             "    os.kill(os.getpid(), signal.SIGTERM)\n    time.sleep(60)\n")
    t = time.monotonic()
    done = subprocess.run([sys.executable, "-c", stuck, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == ExitCode.STOP_TIMEOUT and time.monotonic() - t < 30, done.stderr
    record = read_record(RunPaths.of(tmp_path))
    assert (record.state, record.failure_kind, record.exit_code) == ("failed", "stop_timeout", 76)

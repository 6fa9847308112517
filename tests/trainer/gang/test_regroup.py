"""SIGUSR1 = regroup: the gang stops at the next periodic checkpoint, every rank exits 79, and --resume
continues from that checkpoint. The elastic gang end to end (3 -> 2 -> 3 ranks, weights compared to an
uninterrupted run, batch 5 split unevenly at both sizes) is tests/cue_plugin/test_elastic.py."""

from __future__ import annotations

import os
import signal
import time


from tests.trainer.gang.test_formation import finish, start_rank
from trainer.core.exitcodes import ExitCode
from trainer.core.ports import free_port
from trainer.record.rundir import RunPaths
from trainer.record.runrecord import read_record, read_record_or_empty
from trainer.gang.stopvote import GangStop, StopSignal, Vote


EVERY = 10  # --checkpoint-interval [steps]
FAST = ("--checkpoint-interval", str(EVERY), "--log-interval", "5", "--contact-sheet-interval", "1000",
        "--gang-timeout-s", "60")


def _wait_attempt(procs, run: RunPaths, attempt: int, timeout: float = 120) -> None:
    """Block until rank 0 recorded ``attempt`` (1-based) as running: every rank then has its handlers set
    (trainer.learn.train.train installs them before the gang forms), so SIGUSR1 cannot kill it."""
    deadline = time.monotonic() + timeout
    while True:
        for p in procs:
            assert p.poll() is None, finish(p)
        record = read_record_or_empty(run)
        if len(record.attempts) >= attempt and record.state == "running":
            return
        assert time.monotonic() < deadline, "the gang did not start"
        time.sleep(0.02)


def _regroup_gang(pairs, run: RunPaths, world: int, steps: int, *extra: str, signal_rank: int = 1) -> int:
    """Start ``world`` ranks, SIGUSR1 to ``signal_rank`` once training runs, expect exit 79 from every rank at
    one periodic checkpoint; return that step."""
    attempt = len(read_record_or_empty(run).attempts) + 1
    port = free_port()
    procs = [start_rank(pairs, run.root, r, world, port, *FAST, *extra, steps=steps) for r in range(world)]
    _wait_attempt(procs, run, attempt)
    procs[signal_rank].send_signal(signal.SIGUSR1)  # one rank only: the vote carries it to the others
    results = [finish(p) for p in procs]
    assert [c for c, _ in results] == [ExitCode.REGROUP] * world, results
    record = read_record(run)
    step = record.stopped_step
    assert (record.state, record.exit_code) == ("stopped", 79) and step is not None
    assert all(f"rank {r} regroups at step {step} (checkpoint" in out for r, (_, out) in enumerate(results))
    assert step % EVERY == 0 and 0 < step < steps, step
    assert run.checkpoint(step).exists()
    return step


def test_vote_levels_in_one_process_sigusr1_regroups_and_sigterm_escalates_to_stop():
    with StopSignal(grace_s=60) as sig:
        vote = GangStop(sig, distributed=False)
        assert vote.poll() == Vote.NONE
        os.kill(os.getpid(), signal.SIGUSR1)  # the default action would end the process: trapped instead
        time.sleep(0.1)
        assert sig.regroup_requested and sig.signum == 0
        assert vote.poll() == Vote.REGROUP and not vote.agreed
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        assert vote.poll() == Vote.STOP and vote.agreed
        sig.finished()
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # restored on close


def test_sigusr1_to_one_rank_regroups_both_at_a_periodic_checkpoint_and_resume_continues(pairs, tmp_path):
    run = RunPaths.of(tmp_path / "run")
    step = _regroup_gang(pairs, run, 2, 3000)
    assert [s for s, _ in run.list_checkpoints()][-1] == step  # no checkpoint after the regroup step
    port = free_port()
    ranks = [start_rank(pairs, run.root, r, 2, port, "--resume", *FAST, steps=step + 5) for r in range(2)]
    assert [finish(p)[0] for p in ranks] == [0, 0]
    record = read_record(run)
    assert [a["start_step"] for a in record.attempts] == [0, step]
    assert record.state == "succeeded" and record.final_step == step + 5 and record.stopped_step is None

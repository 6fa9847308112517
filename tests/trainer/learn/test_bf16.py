"""The bfloat16 path's own equivalence tests, run with ``--precision bf16`` forced on every CPU.

The float32 equivalence tests (2 ranks == 1 rank, accumulation, the elastic 3 -> 2 -> 3 gang) compare
float32-exact numerics and pin ``--precision fp32``. Under bfloat16 autocast the same runs agree only up to
bfloat16 rounding (8 significant bits: relative 2**-8 per rounding), so these tests hold bf16 runs to the
tolerance derived in ``tests.trainer.learn.test_train.assert_mixed_precision_match``:

- DDP vs one process: ``test_train.py::test_two_ranks_equal_one_rank_with_the_same_global_batch[1-bf16]``;
- elastic vs uninterrupted: below, a 2-rank gang that regroups at a checkpoint and finishes on 1 rank (what
  an elastic gang does when a frame is lost) against an uninterrupted 2-rank run of the same steps.

bf16 convolutions are ~25x slower than fp32 on a CPU without AVX512-BF16/AMX, so the runs are tiny.
"""

from __future__ import annotations

import signal

import pytest

from tests.trainer.gang.test_formation import finish, start_rank
from tests.trainer.learn.test_train import assert_mixed_precision_match, final_weights
from trainer.core.config import TrainConfig
from trainer.core.exitcodes import ExitCode
from trainer.core.ports import free_port
from trainer.record.rundir import RunPaths
from trainer.record.runrecord import read_record

STEPS, EVERY = 16, 10  # [steps], checkpoint interval [steps]: the regroup is at step 10, 6 steps on 1 rank
ARGS = ("--precision", "bf16", "--checkpoint-interval", str(EVERY), "--log-interval", "10",
        "--contact-sheet-interval", "1000", "--gang-timeout-s", "60",
        "--optimizer", "adam")  # Adam's 2% tolerance of 16-bit rounding (Muon's Newton-Schulz runs in bf16: 5%)


def _gang(pairs, run: RunPaths, world: int, *extra: str) -> list[tuple[int, str]]:
    port = free_port()
    procs = [start_rank(pairs, run.root, r, world, port, *ARGS, *extra, steps=STEPS) for r in range(world)]
    return [finish(p) for p in procs]


@pytest.mark.slow
def test_bf16_gang_that_shrinks_from_2_to_1_rank_matches_an_uninterrupted_run(pairs, tmp_path):
    reference = RunPaths.of(tmp_path / "reference")
    assert [code for code, _ in _gang(pairs, reference, 2)] == [0, 0]

    run = RunPaths.of(tmp_path / "elastic")
    port = free_port()
    rank1 = start_rank(pairs, run.root, 1, 2, port, *ARGS, steps=STEPS)
    for line in rank1.stderr:  # its stop handlers are set before it joins (trainer.learn.train.train)
        if "rank 1/2 joining" in line:
            break
    rank1.send_signal(signal.SIGUSR1)  # before the gang forms: the regroup is at the first periodic checkpoint
    rank0 = start_rank(pairs, run.root, 0, 2, port, *ARGS, steps=STEPS)
    assert [finish(p)[0] for p in (rank0, rank1)] == [ExitCode.REGROUP] * 2
    stopped = read_record(run).stopped_step
    assert stopped == EVERY, stopped
    assert [code for code, _ in _gang(pairs, run, 1, "--resume")] == [0]  # the gang goes on with one rank

    record = read_record(run)
    assert [a["start_step"] for a in record.attempts] == [0, stopped] and record.final_step == STEPS
    assert record.precision["precision"] == "bf16"
    c = TrainConfig(str(pairs[0]), str(pairs[1]), str(run.root), steps=STEPS, batch_size=2, crop_size=16,
                    precision="bf16", optimizer="adam")  # start_rank's settings: for the tolerance's learning rates
    assert_mixed_precision_match(final_weights(reference.root), final_weights(run.root), c)

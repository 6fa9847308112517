"""The divergence watch (trainer.learn.divergence): a blown-up run stops with exit 81 and no model.pt."""

from __future__ import annotations

import math

import pytest

from trainer.learn import divergence
from trainer.cli import main
from trainer.learn.divergence import Diverged, DivergenceWatch
from trainer.core.exitcodes import ExitCode
from trainer.agent.nodeagent import WorkerState, classify
from trainer.record.rundir import RunPaths, read_metrics
from trainer.record.runrecord import FailureKind, read_record


def test_three_bad_windows_in_a_row_stop_the_run_and_say_where_and_what_to_do():
    watch = DivergenceWatch(peak_lr=2e-3, lr=1e-3)  # batch 32: the sqrt rule doubled --lr 1e-3
    watch.check(10, 0.03, 0.04)  # healthy: below the identity loss
    watch.check(20, 0.50, 0.04)  # 12.5x: bad (the measured blow-ups were 12-15x)
    watch.check(30, 0.45, 0.04)
    with pytest.raises(Diverged) as caught:
        watch.check(40, 0.48, 0.04)
    err = caught.value
    assert err.exit_code == ExitCode.DIVERGED == 81 and err.kind is FailureKind.DIVERGED
    assert str(err).startswith("training diverged at step 20: the loss 0.48 is 12x that of returning the input "
                               "unchanged (0.04) for 3 log windows in a row")
    assert "checkpoints from step 20 on" in str(err)
    assert "lower --lr (this run's was 0.001, a peak of 0.002 at its batch; try --lr 0.0005)" in str(err)


def test_a_spike_that_recovers_the_floor_and_nan():
    watch = DivergenceWatch(peak_lr=1e-3, lr=1e-3)
    for step, loss in ((10, 0.5), (20, 0.5), (30, 0.02), (40, 0.5), (50, 0.5), (60, 0.02)):
        watch.check(step, loss, 0.04)  # two bad windows, then a good one: the count starts again
    for step in (70, 80, 90, 100):
        watch.check(step, 0.07, 0.0)  # input == target: the floor (0.02) keeps 0.07 (3.5x the floor) healthy
    watch.check(110, math.nan, 0.04)
    watch.check(120, math.nan, 0.04)
    with pytest.raises(Diverged, match="at step 110"):
        watch.check(130, math.nan, 0.04)  # NaN is bad


def test_a_run_whose_loss_blows_up_exits_81_without_model_pt_and_the_agent_does_not_restart(
        pairs, tmp_path, capsys, monkeypatch):
    for name in ("COPYCAT_MAIN_ADDR", "COPYCAT_MAIN_PORT", "COPYCAT_RANK", "COPYCAT_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    run, steps = tmp_path / "run", 60
    code = main(["train", "--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir", str(run), "--steps",
                 str(steps), "--batch-size", "4", "--crop-size", "16", "--lr", "1.0", "--warmup-steps", "0",
                 "--log-interval", "2", "--checkpoint-interval", "1000", "--contact-sheet-interval", "1000"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("cuetrain: error:")]
    assert code == ExitCode.DIVERGED and len(errors) == 1 and "training diverged at step" in errors[0]
    assert classify(code, terminated=False) is WorkerState.STOPPED  # a restart would diverge again
    paths = RunPaths.of(run)
    record = read_record(paths)
    assert record.state == "failed" and record.kind is FailureKind.DIVERGED and record.exit_code == 81
    assert not paths.model.exists()
    rows = read_metrics(paths)  # the blow-up is graphed, and the run stopped at the third bad window
    bad = [r for r in rows if not r["loss"] <= divergence.RATIO * 0.04]  # the pairs' identity L1 is ~0.04
    assert len(bad) >= divergence.WINDOWS and rows[-1]["step"] < steps
    assert f"at step {bad[-divergence.WINDOWS]['step']}:" in errors[0]


def test_a_run_ended_by_an_exception_frees_its_loop_before_train_returns(pairs, tmp_path, monkeypatch):
    """The exception's traceback must not keep the training loop (DDP model, process groups, threads) alive:
    freed later in whatever thread collects it, a gloo object can be destroyed on its own worker thread, which
    aborts the process (seen once in a pytest worker). trainer.learn.train.train clears the frames before teardown."""
    import gc
    import weakref

    from trainer.learn import train as train_mod
    from trainer.core.config import TrainConfig
    from trainer.core.envvars import DistEnv

    loops = []
    real_run = train_mod._Loop.run

    def run(self):
        loops.append(weakref.ref(self))
        return real_run(self)

    monkeypatch.setattr(train_mod._Loop, "run", run)
    cfg = TrainConfig(input_dir=str(pairs[0]), target_dir=str(pairs[1]), run_dir=str(tmp_path / "run"), steps=60,
                      batch_size=4, crop_size=16, lr=1.0, warmup_steps=0, log_interval=2, checkpoint_interval=1000,
                      contact_sheet_interval=1000, optimizer="adam")  # Adam at lr 1 diverges within 60 steps
    with pytest.raises(Diverged) as caught:
        train_mod.train(cfg, DistEnv(distributed=False, missing=("COPYCAT_MAIN_ADDR",)))
    gc.collect()  # here, in this thread
    assert caught.value.__traceback__ is not None and len(loops) == 1
    assert loops[0]() is None, "the exception's traceback still holds the training loop"

"""``--lr-schedule onecycle`` and ``--ema-decay`` (issue 18's best recipe in the benchmark, now in the trainer)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.trainer.learn.test_train import NON_DIST, cfg
from trainer.learn import train as train_mod
from trainer.core.config import ConfigError
from trainer.learn.ema import WeightEMA
from trainer.learn.run_writer import load_latest_checkpoint
from trainer.record.rundir import RunPaths
from trainer.learn.schedule import lr_at


def test_onecycle_rises_from_a_25th_to_the_peak_at_30_percent_and_falls_to_a_10000th() -> None:
    peak, total = 2e-3, 1000
    lrs = [lr_at(u, total, peak, 50, "onecycle") for u in range(total + 1)]
    assert math.isclose(lrs[0], peak / 25) and max(lrs) == lrs[300] == pytest.approx(peak)
    assert all(a <= b for a, b in zip(lrs[:300], lrs[1:301])) and all(a >= b for a, b in zip(lrs[300:], lrs[301:]))
    assert lrs[-1] == pytest.approx(peak / 1e4)
    # the default schedule is unchanged: warmup from peak/10, cosine down to peak/10
    assert lr_at(0, total, peak, 50) == pytest.approx(peak / 10) and lr_at(50, total, peak, 50) == pytest.approx(peak)
    assert lr_at(total, total, peak, 50) == pytest.approx(peak / 10)


def test_ema_averages_with_the_warm_up_decay_and_round_trips() -> None:
    net = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        net.weight.fill_(0.0)
    ema = WeightEMA(net, 0.9)
    expected = 0.0
    for n in range(5):
        with torch.no_grad():
            net.weight.fill_(float(n + 1))
        decay = min(0.9, (1 + n) / (20 + n))  # EMA_WARMUP, by hand
        expected = decay * expected + (1 - decay) * (n + 1)
        ema.update(net)
    assert ema.module.weight[0, 0].item() == pytest.approx(expected)
    again = WeightEMA(net, 0.9)
    again.load_state_dict(ema.state_dict(), net)
    assert again.updates == 5 and torch.equal(again.module.weight, ema.module.weight)
    again.load_state_dict(None, net)  # a checkpoint written without EMA: start from the weights
    assert again.updates == 0 and torch.equal(again.module.weight, net.weight)
    with pytest.raises(ValueError, match="between 0 and 1"):
        WeightEMA(net, 1.0)
    assert WeightEMA(net, 0.9, warmup=4.0).current_decay() == pytest.approx(1 / 4)  # (1 + 0) / (4 + 0)
    with pytest.raises(ValueError, match="warm-up constant 1.0 must be above 1"):
        WeightEMA(net, 0.9, warmup=1.0)


@pytest.mark.parametrize("value", [-0.1, 1.0])
def test_bad_ema_decay_is_a_clear_error(pairs, tmp_path, value) -> None:
    with pytest.raises(ConfigError, match="ema_decay"):
        cfg(pairs, tmp_path / "run", ema_decay=value)
    with pytest.raises(ConfigError, match="lr_schedule"):
        cfg(pairs, tmp_path / "run", lr_schedule="linear")


def test_model_pt_is_the_ema_and_a_resume_continues_the_average(pairs, tmp_path) -> None:
    run = tmp_path / "run"
    c = cfg(pairs, run, steps=8, ema_decay=0.5, lr_schedule="onecycle", precision="fp32")
    argv = c.to_argv()  # what cuetrain local and a farm frame pass on to every rank
    assert argv[argv.index("--lr-schedule") + 1] == "onecycle" and argv[argv.index("--ema-decay") + 1] == "0.5"
    train_mod.train(cfg(pairs, run, steps=4, ema_decay=0.5, lr_schedule="onecycle", precision="fp32"), NON_DIST)
    half = load_latest_checkpoint(RunPaths.of(run))
    assert half["ema"]["updates"] == 4
    result = train_mod.train(cfg(pairs, run, steps=8, ema_decay=0.5, lr_schedule="onecycle", precision="fp32",
                                 resume=True), NON_DIST)
    ckpt = load_latest_checkpoint(RunPaths.of(run))
    assert ckpt["ema"]["updates"] == 8  # continued from the checkpoint's 4, not started again
    shipped = torch.jit.load(str(RunPaths.of(run).root / "model.pt")).state_dict()
    last = result.model.state_dict()
    for name, value in ckpt["ema"]["model"].items():
        assert torch.allclose(shipped[name], value.float().contiguous()), name
    assert any(not torch.allclose(shipped[n], last[n].contiguous()) for n in last), "model.pt is the EMA, not the last weights"

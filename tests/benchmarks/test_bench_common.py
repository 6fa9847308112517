"""benchmarks/common.py's training loop (every in-process benchmark's) and bench_recipe.py's task dispatch."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_recipe  # noqa: E402
import common  # noqa: E402
from trainer.data.crops import CropBatch  # noqa: E402
from trainer.learn.ema import WeightEMA  # noqa: E402


class Batches:
    """Crops of a fixed linear task, a different draw per step (as CropSampler.batch(step))."""

    def batch(self, step: int) -> CropBatch:
        x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(step))
        return CropBatch(x, 0.5 * x + 0.25)


def test_the_loop_sets_each_steps_lr_updates_the_ema_and_evaluates_every_k_steps_and_at_the_end():
    torch.manual_seed(0)
    net = torch.nn.Conv2d(3, 3, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.0)
    ema = WeightEMA(net, 0.9)
    lrs, evals = [], []

    def lr(step: int) -> float:
        lrs.append(step)
        return 0.5

    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return (out - target).abs().mean(dim=(1, 2, 3))

    before = [p.detach().clone() for p in ema.module.parameters()]
    first = loss(net(Batches().batch(0).input), Batches().batch(0).target).mean().item()
    seconds = common.train_loop(net, opt, Batches(), 7, loss, lr, contextlib.nullcontext, [ema],
                                lambda done, clock: evals.append((done, clock)), 3)
    assert lrs == list(range(7)) and [d for d, _ in evals] == [3, 6, 7]
    assert 0 < evals[0][1] <= evals[1][1] <= evals[2][1] == seconds  # the clock only grows
    assert loss(net(Batches().batch(0).input), Batches().batch(0).target).mean().item() < first  # it learned
    assert any(not torch.equal(a, b) for a, b in zip(before, ema.module.parameters()))  # the average moved


def test_bench_recipe_names_its_tasks_on_a_missing_or_unknown_one(capsys):
    assert bench_recipe.main([]) == 2
    assert bench_recipe.main(["mate"]) == 2
    err = capsys.readouterr().err
    assert "unknown task 'mate'; choose from matte, matte-set, upscale, default-recipe, variants, head-start, time-budget" in err
    assert bench_recipe.main(["--help"]) == 0 and "head-start" in capsys.readouterr().out


def test_bench_recipe_hands_the_rest_of_the_line_to_the_task(tmp_path, capsys):
    saved = tmp_path / "rows.json"
    saved.write_text('{"rows": [{"clip": "carphone", "size": "small", "batch": 8, "steps": 400, "recipe": "adam", '
                     '"gain": 1.5, "ms_per_step": 20.0}]}')
    assert bench_recipe.main(["default-recipe", "--from-json", str(saved)]) == 0
    assert "| carphone | small | 8 | 400 | +1.50 dB | - | - | 20 | - |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        bench_recipe.main(["matte", "--no-such-option"])
    assert e.value.code == 2


def test_the_bare_ddp_baseline_trains_the_network_cuetrain_trains():
    """bench_trainer.py's baseline (lib/bare_ddp.py, one rank, 2 timed steps after its warm-up) runs and reports
    images/s; it once built the architecture ``auto``, which is a choice, not a network, and failed."""
    assert common.run_bare(1, 8, 2, crop=32) > 0

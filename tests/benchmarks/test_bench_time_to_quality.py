"""benchmarks/bench_time_to_quality.py: the frozen v1 baseline, the curve maths and the training loop's clock (the figures themselves come from running the benchmark)."""

from __future__ import annotations

import sys
import time
from dataclasses import replace

import numpy as np
import pytest
import torch

from trainer.export.infer import psnr
from trainer.learn.schedule import lr_at

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_time_to_quality as ttq  # noqa: E402


def test_v1_is_the_recipe_that_landed_at_c47904a():
    """Every later claim is a ratio against v1: it stays the c47904a demo recipe, whatever the defaults become."""
    assert ttq.RECIPES["v1"] == ttq.Recipe(architecture="v1", size="small", steps=3000, batch=8, crop=64, lr=2e-3,
                                           warmup=50, schedule="cosine", loss="l1", ema=0.0)


def test_cosine_schedule_is_the_trainers_and_onecycle_rises_then_falls():
    v1, one = ttq.RECIPES["v1"], ttq.Recipe("v2", "small", 100, lr=1e-2, schedule="onecycle")
    assert [ttq.lr_for(v1, u, 3000, 50) for u in (0, 50, 1500, 2999)] == \
        [lr_at(u, 3000, 2e-3, 50) for u in (0, 50, 1500, 2999)]
    f3 = ttq.RECIPES["v3z-ema-mu-f3"]
    assert ttq.lr_for(f3, 3000, 3000, 50) == pytest.approx(0.3 * f3.lr)  # --lr-floor 0.3
    lrs = [ttq.lr_for(one, u, 100, 0) for u in range(100)]
    assert lrs[0] == pytest.approx(1e-2 / 25)
    assert max(lrs) == pytest.approx(1e-2) and int(np.argmax(lrs)) == 30
    assert lrs[-1] < 1e-4 and all(a >= b for a, b in zip(lrs[30:], lrs[31:]))


def test_time_to_interpolates_between_evaluations_and_value_at_takes_the_last_one_before():
    curve = [(0.0, 0, 20.0), (10.0, 100, 22.0), (20.0, 200, 24.0)]
    assert ttq.time_to(curve, 23.0) == pytest.approx(15.0)
    assert ttq.time_to(curve, 20.0) == pytest.approx(0.0)
    assert ttq.time_to(curve, 24.5) is None
    assert ttq.value_at(curve, 19.9) == 22.0 and ttq.value_at(curve, 20.0) == 24.0


def test_charbonnier_is_close_to_l1_away_from_zero():
    r1, rc = ttq.RECIPES["v1"], replace(ttq.RECIPES["v1"], loss="charbonnier")
    out, target = torch.full((2, 3, 4, 4), 0.5), torch.zeros(2, 3, 4, 4)
    assert ttq.per_crop_loss(r1, out, target).tolist() == [0.5, 0.5]
    assert ttq.per_crop_loss(rc, out, target) == pytest.approx(torch.tensor([0.5, 0.5]), abs=1e-5)


def test_the_demo_trains_the_default_recipe(tmp_path):
    import argparse

    from trainer.core.config_args import add_train_arguments, config_from_args
    from trainer.demo import DEMO_STEPS, DEMO_TRAIN_ARGS

    p = argparse.ArgumentParser()
    add_train_arguments(p)
    paths = ["--input", str(tmp_path), "--target", str(tmp_path), "--run-dir", str(tmp_path)]
    c = config_from_args(p.parse_args([*paths, "--steps", str(DEMO_STEPS), *DEMO_TRAIN_ARGS]))
    r = ttq.RECIPES["v3z-ema-mu-f3"]
    assert (c.architecture_name, c.model_size, c.batch_size, c.crop_size, c.base_lr, c.optimizer_name, c.adam_beta1,
            c.beta2, c.ema_decay, c.lr_schedule, c.warmup_steps, c.steps, c.cosine_floor) == (
        r.architecture, r.size, r.batch, r.crop, r.lr, r.optimizer, r.beta1, r.beta2, r.ema, r.schedule, r.warmup,
        r.steps, r.floor)
    assert r.skip_init and r.fused  # v3's init and the trainer's fused Adam


def test_mse_and_psnr_losses_per_crop():
    out, target = torch.zeros(2, 3, 4, 4), torch.zeros(2, 3, 4, 4)
    out[0] += 0.1  # crop 0: MSE 0.01 = 20 dB of error; crop 1 exact
    mse = ttq.per_crop_loss(replace(ttq.RECIPES["v1"], loss="mse"), out, target)
    psnr = ttq.per_crop_loss(replace(ttq.RECIPES["v1"], loss="psnr"), out, target)
    assert mse.tolist() == pytest.approx([0.01, 0.0])
    assert psnr.tolist() == pytest.approx([-20.0, -80.0], abs=1e-4)  # 10 log10(MSE + 1e-8): minimising it raises PSNR


def test_training_curve_starts_at_the_identity_and_its_clock_excludes_evaluation(monkeypatch):
    """An untrained model is the identity (step 0 = the Input's PSNR); a learnable task improves; the clock
    counts training only (evaluation is slowed down here and must not show in it)."""
    rng = np.random.default_rng(1)
    inputs = [rng.random((24, 24, 3), dtype=np.float32) for _ in range(4)]
    pairs = [(i, 0.5 * i + 0.25) for i in inputs]
    real_eval = ttq.heldout_psnr

    def slow_eval(net, held):
        time.sleep(0.5)
        return real_eval(net, held)

    monkeypatch.setattr(ttq, "heldout_psnr", slow_eval)
    recipe = replace(ttq.RECIPES["v1"], steps=60, batch=4, crop=16, lr=3e-3, warmup=5)
    t0 = time.perf_counter()
    curve = ttq.train_recipe(recipe, pairs, pairs[:2], scale=1.0, evals=3, precision="fp32")
    wall = time.perf_counter() - t0
    assert curve[0][:2] == (0.0, 0)
    assert curve[0][2] == pytest.approx(np.mean([psnr(i, t) for i, t in pairs[:2]]), abs=1e-4)
    assert [s for _, s, _ in curve] == [0, 20, 40, 60]
    assert curve[-1][2] > curve[0][2] + 1.0
    assert 0 < curve[-1][0] <= wall - 4 * 0.5  # four evaluations slept 2 s; the training clock did not count them


def test_averages_of_one_trajectory_differ_only_by_their_warm_up_constant():
    """train_averages keeps one EMA per warm-up constant of a single run: each equals the curve of a run with
    that constant alone (same crops, same weights), and the constants give different averages."""
    rng = np.random.default_rng(2)
    pairs = [(i, 0.5 * i + 0.25) for i in (rng.random((24, 24, 3), dtype=np.float32) for _ in range(4))]
    recipe = replace(ttq.RECIPES["v1"], steps=20, batch=4, crop=16, lr=3e-3, warmup=2, ema=0.99)
    k10, k40 = ttq.train_averages(recipe, pairs, pairs[:2], 1.0, 2, "fp32", (10.0, 40.0))
    alone = ttq.train_recipe(replace(recipe, ema_warmup=40.0), pairs, pairs[:2], 1.0, 2, "fp32")
    assert [s for _, s, _ in k10] == [s for _, s, _ in k40] == [s for _, s, _ in alone] == [0, 10, 20]
    assert [p for *_, p in alone] == pytest.approx([p for *_, p in k40], abs=1e-4)
    assert abs(k10[-1][2] - k40[-1][2]) > 1e-3

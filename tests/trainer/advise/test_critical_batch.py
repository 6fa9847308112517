"""The two-batch quality probe (trainer.advise.critical_batch): the S(B) algebra, and measurements with known answers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.advise.quality import steps_to_quality
from trainer.core.config import TrainConfig
from trainer.advise.critical_batch import (CRITICAL_BATCH_CAP, critical_batch, first_crossing, fit_critical_batch,
                                    measure_critical_batch)


@pytest.mark.parametrize("b_noise", [0.5, 3.0, 12.0, 40.0, 200.0])
@pytest.mark.parametrize("batch, factor", [(8, 4), (16, 2)])
def test_critical_batch_inverts_s_of_b(b_noise: float, batch: int, factor: int) -> None:
    small = steps_to_quality(100.0, b_noise, batch)
    big = steps_to_quality(100.0, b_noise, batch * factor)
    assert critical_batch(small, big, batch, factor) == pytest.approx(b_noise, rel=1e-9)


def test_critical_batch_limits_and_bad_input() -> None:
    assert critical_batch(100, 100, 8, 4) == 0.0  # the big batch bought nothing
    assert critical_batch(100, 130, 8, 4) == 0.0  # ... or cost updates
    assert critical_batch(100, 25, 8, 4) == CRITICAL_BATCH_CAP  # perfect scaling: unbounded
    assert critical_batch(100, 25.0001, 8, 4) == CRITICAL_BATCH_CAP  # the formula past the cap
    for bad in [(0, 10, 8, 4), (10, 0, 8, 4), (10, 5, 0, 4), (10, 5, 8, 1)]:
        with pytest.raises(ValueError, match="critical_batch needs"):
            critical_batch(*bad)


def test_fit_through_three_batches() -> None:
    batches = [8, 32, 128]
    exact = [steps_to_quality(90.0, 11.0, b) for b in batches]
    assert fit_critical_batch(batches, exact) == pytest.approx(11.0, rel=1e-9)
    assert fit_critical_batch([8, 32], exact[:2]) == pytest.approx(11.0, rel=1e-9)  # the closed form
    assert fit_critical_batch(batches, [100, 110, 120]) == 0.0  # bigger batches needed more updates
    assert fit_critical_batch(batches, [160, 40, 5]) == CRITICAL_BATCH_CAP  # better than perfect scaling
    with pytest.raises(ValueError, match="fit_critical_batch needs"):
        fit_critical_batch([8, 8], [10, 9])


def test_first_crossing_interpolates_a_falling_curve() -> None:
    curve = [(0, 1.0), (10, 0.8), (20, 0.4), (30, 0.4)]
    assert first_crossing(curve, 0.6) == pytest.approx(15.0)
    assert first_crossing(curve, 0.4) == pytest.approx(20.0)
    assert first_crossing(curve, 1.0) == 0.0
    assert first_crossing(curve, 0.39) is None


def _cfg(**kw) -> TrainConfig:
    base = dict(input_dir=".", target_dir=".", run_dir=".", batch_size=8, crop_size=16, precision="fp32",
                memory_format="contiguous", lr=3e-2, seed=3)
    return TrainConfig(**{**base, **kw})


def _net() -> torch.nn.Module:
    torch.manual_seed(5)
    return torch.nn.Conv2d(3, 3, 1)  # a per-pixel colour matrix: the model that fits these frames


def test_without_gradient_noise_a_bigger_batch_buys_nothing() -> None:
    """Every crop the same colour pair: each crop's gradient is the batch's, so 4x the crops per update (at the
    same lr) follows the same trajectory and the critical batch is 0 (S(B) = S_min at any batch)."""
    frame = (np.full((32, 32, 3), 0.2, np.float32), np.full((32, 32, 3), 0.7, np.float32))
    probe = measure_critical_batch(_cfg(lr_scaling="none"), [frame, frame], device=torch.device("cpu"),
                                   build=_net, factors=(4,), small_updates=40, big_updates=40)
    assert probe.batches == (8, 32)
    assert probe.curves[0][0] == probe.curves[1][0]  # the same weights, the same evaluation crops
    assert probe.curves[0][-1][1] < 0.5 * probe.curves[0][0][1]  # it trained
    assert probe.critical_batch < 0.4
    assert probe.updates[0] == pytest.approx(probe.updates[1], rel=0.05)


def test_with_gradient_noise_a_bigger_batch_needs_fewer_updates() -> None:
    """Each frame has its own colour gain, so each crop's gradient pulls towards its own frame's: the crop to
    crop spread is gradient noise, which 4 micro-batches per update average away; the probe sees a critical
    batch well above 0 where the noise-free frames above give 0."""
    rng = np.random.default_rng(0)
    frames = []
    for gain in (0.2, 1.8, 0.5, 1.5, 0.3, 1.7):
        x = rng.uniform(0.0, 1.0, (32, 32, 3)).astype(np.float32)
        frames.append((x, (gain * x).astype(np.float32)))
    probe = measure_critical_batch(_cfg(lr_scaling="none"), frames, device=torch.device("cpu"), build=_net,
                                   factors=(4,), small_updates=80, big_updates=40)
    assert probe.updates[1] < 0.8 * probe.updates[0]
    assert probe.critical_batch > 2.0

"""trainer.data.holdout.psnr: the one PSNR (held-out score, demo, benchmarks), both images clipped to 0..1."""

from __future__ import annotations

import math

import numpy as np

from trainer.data.holdout import psnr
from trainer.export import infer


def test_psnr_is_ten_log10_of_peak_squared_over_mse():
    a = np.zeros((4, 4, 3), dtype=np.float32)
    b = np.full((4, 4, 3), 0.1)  # MSE 0.01 (float64: 0.1 in float32 is 0.10000000149)
    assert math.isclose(psnr(a, b), 20.0, rel_tol=1e-9)
    assert psnr(a, a) == float("inf")


def test_both_images_are_clipped_so_a_highlight_above_one_is_not_an_error():
    out = np.full((2, 2, 3), 1.0, dtype=np.float32)
    target = np.full((2, 2, 3), 3.5, dtype=np.float32)  # a scene-linear highlight the output cannot show
    assert psnr(out, target) == float("inf")  # clipping only the output would score this 10 log10(1/6.25)
    assert math.isclose(psnr(np.full((1, 1, 1), -2.0), np.full((1, 1, 1), 0.5)), 10 * math.log10(4), rel_tol=1e-9)


def test_infer_offers_the_same_function():
    assert infer.psnr is psnr

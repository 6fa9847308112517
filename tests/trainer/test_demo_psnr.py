"""``trainer.demo.mean_psnr``: the mean per-frame PSNR of two sequences, and with ``border`` of their interiors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trainer.data.images import write_image
from trainer.demo import mean_psnr


def _sequences(tmp_path, band: int):
    """Two 2-frame 40x48 sequences, values exact in half float: frame 1 equal inside and 0.125 apart in a ``band`` px
    frame at every edge; frame 2 0.125 apart on its interior beyond 10 px, equal elsewhere."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    rng = np.random.default_rng(0)
    for n in (1, 2):
        x = (rng.integers(64, 160, (40, 48, 3)) / 256).astype(np.float32)
        differs = np.ones((40, 48), bool)
        if n == 1:
            differs[band:-band, band:-band] = False
        else:
            differs[:10], differs[-10:], differs[:, :10], differs[:, -10:] = False, False, False, False
        y = x + 0.125 * differs[..., None]
        write_image(a / f"s.{n:04d}.exr", x)
        write_image(b / f"s.{n:04d}.exr", y)
    return a, b


def test_a_border_leaves_out_the_edges_and_scores_only_the_interior(tmp_path):
    a, b = _sequences(tmp_path, band=3)

    def db(share: float) -> float:  # PSNR of a frame 0.125 apart on ``share`` of its pixels
        return 10 * math.log10(1 / (0.125 ** 2 * share))

    whole = mean_psnr(a, b)
    assert whole == pytest.approx((db(1 - 34 * 42 / 1920) + db(20 * 28 / 1920)) / 2, abs=1e-6)
    # 3 px out: frame 1 is identical (infinite PSNR), so the mean is infinite
    assert mean_psnr(a, b, border=3) == math.inf
    # 2 px out: frame 1 keeps one differing ring; frame 2's interior is 36 x 44 px
    inside = mean_psnr(a, b, border=2)
    assert inside == pytest.approx((db(1 - 34 * 42 / (36 * 44)) + db(20 * 28 / (36 * 44))) / 2, abs=1e-6)
    assert mean_psnr(a, b, border=0) == whole


def test_a_negative_border_or_one_that_leaves_nothing_is_refused_naming_the_frame(tmp_path):
    a, b = _sequences(tmp_path, band=3)
    with pytest.raises(ValueError, match="border=-1 px must be 0 or more"):
        mean_psnr(a, b, border=-1)
    with pytest.raises(ValueError, match=r"a border of 20 px leaves nothing of .*s\.0001\.exr \(48x40 px\)"):
        mean_psnr(a, b, border=20)

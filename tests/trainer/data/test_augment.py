"""Automatic data augmentation: windows, draws, the warp of both sides and the grade of colour channels."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from trainer.data import augment
from trainer.data.augment import AugmentDraw, draw, grade, warp, window


def fixed(n, angle=0.0, zoom=1.0, flip=False, apply=True):
    """A draw of ``n`` crops with the given transform (the grade fields from a real draw)."""
    d = draw(0, 0, n, 1.0)
    return AugmentDraw(np.full(n, apply), np.full(n, angle, float), np.full(n, zoom, float), np.full(n, flip),
                       d.gain, d.gamma, d.offset)


def windows(b, c, crop, dtype=torch.float32, seed=0):
    side = window(crop)
    return torch.rand(b, c, side, side, generator=torch.Generator().manual_seed(seed)).to(dtype)


def centre(w, crop):
    o = (w.shape[-1] - crop) // 2
    return w[..., o:o + crop, o:o + crop]


def test_window_holds_a_crop_turned_any_way_at_the_smallest_zoom_and_centres_it():
    for crop in range(1, 600):
        side = window(crop)
        assert side >= crop * math.sqrt(2) / augment.ZOOM[0]
        assert (side - crop) % 2 == 0
    assert window(64) == 116
    with pytest.raises(ValueError, match="crop side 0"):
        window(0)


def test_probability_zero_gives_every_crop_exactly_its_centre_crop():
    # crop 33: a resampled identity would be off by ~1e-6 here (at crop 8..16 it happens to be exact)
    w = windows(6, 4, 33, torch.float16)
    d = draw(7, 3, 6, 0.0)
    assert not d.apply.any()
    out = warp(w, d, slice(0, 6), 33)
    assert out.dtype == torch.float32 and out.shape == (6, 4, 33, 33)
    assert torch.equal(out, centre(w, 33).float())


@pytest.mark.parametrize("crop, tol", [(8, 1e-6), (10, 1e-6), (64, 2e-5)])
def test_applied_identity_transform_resamples_the_centre_crop(crop, tol):
    # grid_sample maps the float32 grid to pixels in float32: positions are off by ~ulp(window side), so the
    # error grows with the window (0 up to crop 16, ~1e-5 at crop 64, window 116)
    w = windows(3, 3, crop)
    out = warp(w, fixed(3), slice(0, 3), crop)
    torch.testing.assert_close(out, centre(w, crop), atol=tol, rtol=0)


@pytest.mark.parametrize("crop", [8, 12])
def test_a_quarter_turn_is_rot90_of_the_centre_crop(crop):
    w = windows(2, 3, crop)
    out = warp(w, fixed(2, angle=math.pi / 2), slice(0, 2), crop)
    torch.testing.assert_close(out, torch.rot90(centre(w, crop), 1, (-2, -1)), atol=1e-5, rtol=0)


def test_flip_mirrors_the_centre_crop_left_right():
    w = windows(2, 3, 12)
    out = warp(w, fixed(2, flip=True), slice(0, 2), 12)
    torch.testing.assert_close(out, torch.flip(centre(w, 12), (-1,)), atol=1e-6, rtol=0)


@pytest.mark.parametrize("crop", [8, 33, 64])
def test_the_widest_draws_read_only_pixels_inside_the_window(crop, monkeypatch):
    # with zero padding a tap outside the window would change a value by ~0.5 or more (the two padding modes
    # round coordinates differently, hence 1e-5): the window is large enough
    w = windows(4, 3, crop) + 0.5
    d = fixed(4, zoom=augment.ZOOM[0])
    d = AugmentDraw(d.apply, np.array([-3, -1, 1, 3]) * math.pi / 4, *(getattr(d, f) for f in
                                                                        ("zoom", "flip", "gain", "gamma", "offset")))
    reflected = warp(w, d, slice(0, 4), crop)
    monkeypatch.setattr(augment, "PADDING", "zeros")
    torch.testing.assert_close(warp(w, d, slice(0, 4), crop), reflected, atol=1e-5, rtol=0)


def test_upres_ground_truth_takes_the_transform_of_its_input():
    # Input = 2x box-downsample of a smooth Ground Truth; the warped Input ~ the box-downsample of the warped GT
    crop, s, b = 16, 2, 8
    side = s * window(crop)
    noise = torch.rand(b, 3, side // 16 + 2, side // 16 + 2, generator=torch.Generator().manual_seed(1))
    gt = F.interpolate(noise, scale_factor=16, mode="bicubic", align_corners=False)[..., :side, :side]
    d = draw(5, 2, b, 1.0)
    wi = warp(F.avg_pool2d(gt, s), d, slice(0, b), crop)
    wg = warp(gt, d, slice(0, b), s * crop)
    assert wg.shape == (b, 3, s * crop, s * crop)
    # aligned: ~0.0013; a quarter Input pixel off (a half-pixel error on each side's window) gives ~0.015
    assert (F.avg_pool2d(wg, s) - wi).abs().mean() < 0.003


def test_identical_windows_take_identical_transforms_whatever_their_channels():
    rgb = windows(5, 3, 12)
    d = draw(11, 4, 5, 0.6)
    assert d.apply.any() and not d.apply.all()
    assert torch.equal(warp(rgb[:, :1], d, slice(0, 5), 12), warp(rgb, d, slice(0, 5), 12)[:, :1])


def test_draws_repeat_and_each_rank_slice_warps_as_the_global_batch():
    a, b = draw(3, 9, 10, 0.5), draw(3, 9, 10, 0.5)
    for f in AugmentDraw.__dataclass_fields__:
        assert np.array_equal(getattr(a, f), getattr(b, f))
    assert not np.array_equal(draw(3, 10, 10, 0.5).angle, a.angle)
    assert not np.array_equal(draw(3, 9, 10, 0.5, stream=0).angle, a.angle)
    w = windows(10, 3, 8)
    whole = warp(w, a, slice(0, 10), 8)
    parts = [warp(w[lo:hi], a, slice(lo, hi), 8) for lo, hi in ((0, 3), (3, 6), (6, 8), (8, 10))]
    torch.testing.assert_close(torch.cat(parts), whole, atol=0, rtol=0)


def test_draws_stay_in_their_ranges():
    d = draw(1, 1, 4000, 0.3)
    assert abs(d.apply.mean() - 0.3) < 0.03
    assert np.all(np.abs(d.angle) <= math.pi) and d.angle.min() < -3 and d.angle.max() > 3
    assert np.all((d.zoom >= 0.8) & (d.zoom <= 1.25))
    assert np.all((d.gain > 0.7) & (d.gain < 1.41)) and d.gain.shape == (4000, 3)
    assert np.all((d.gamma >= 0.8) & (d.gamma <= 1.25)) and np.all(np.abs(d.offset) <= 0.02)
    assert 0.45 < d.flip.mean() < 0.55


def test_grade_changes_only_colour_channels_of_applied_rows():
    x = torch.rand(8, 4, 6, 6, generator=torch.Generator().manual_seed(2))  # R, G, B, A
    d = draw(2, 5, 12, 0.5)
    rows = slice(4, 12)
    on = d[rows].apply
    assert on.any() and not on.all()
    out = grade(x, d, rows, [0, 1, 2])
    assert torch.equal(out[:, 3], x[:, 3])  # alpha untouched
    assert torch.equal(out[~on], x[~on])  # rows not applied untouched
    i = int(np.flatnonzero(on)[0])
    m = d[rows]
    want = torch.stack([float(m.gain[i, j]) * x[i, j] ** float(m.gamma[i]) + float(m.offset[i]) for j in range(3)])
    torch.testing.assert_close(out[i, :3], want, atol=1e-6, rtol=1e-6)
    assert not torch.equal(out[i, :3], x[i, :3])


def test_grade_of_no_channels_or_probability_zero_is_the_input():
    x = torch.rand(3, 3, 4, 4)
    assert torch.equal(grade(x, draw(0, 0, 3, 0.0), slice(0, 3), [0, 1, 2]), x)
    assert torch.equal(grade(x, draw(0, 0, 3, 1.0), slice(0, 3), []), x)


def test_bad_arguments_name_the_problem():
    d = draw(0, 0, 4, 1.0)
    with pytest.raises(ValueError, match="plus an even number"):
        warp(torch.zeros(4, 3, 15, 15), d, slice(0, 4), 8)
    with pytest.raises(ValueError, match="select 2 draws for a batch of 4"):
        warp(windows(4, 3, 8), d, slice(0, 2), 8)
    with pytest.raises(ValueError, match="--augment"):
        draw(0, 0, 4, 1.5)
    with pytest.raises(ValueError, match="at most 3 indices"):
        grade(torch.zeros(4, 4, 2, 2), d, slice(0, 4), [0, 1, 2, 3])

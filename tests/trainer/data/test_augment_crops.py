"""Augmentation in the crop sampler (``--augment``, trainer.data.crops with trainer.data.augment): windows centred on
the crops (moved inwards at the frame's edge), the same warp on both sides at any scale, the grade on colour channels
only, the same batches on any number of ranks and through the GPU path's gather, and nothing changed at P = 0."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch

from trainer.core.channels import ChannelPlan
from trainer.data import augment, crops
from trainer.data.augment import AugmentDraw
from trainer.data.crops import CropSampler, grade_sides_for

H, W, CROP = 40, 60, 16
REAL_DRAW = augment.draw
MATTE = ChannelPlan(("R", "G", "B"), ("A",))
RGBA = ChannelPlan(("R", "G", "B", "A"), ("R", "G", "B", "A"))


def frames(n: int = 3, scale: int = 1, cin: int = 3, cout: int = 3, h: int = H, w: int = W):
    rng = np.random.default_rng(0)
    return [(rng.random((h, w, cin), dtype=np.float32), rng.random((scale * h, scale * w, cout), dtype=np.float32))
            for _ in range(n)]


def fixed_draw(angle: float = 0.0, zoom: float = 1.0):
    """A stand-in for augment.draw: every crop applied, with this rotation and zoom, no flip, a real grade."""
    def draw(seed, step, n, p, stream=2):
        d = REAL_DRAW(seed, step, n, 1.0, stream)
        return AugmentDraw(np.ones(n, bool), np.full(n, angle), np.full(n, zoom), np.zeros(n, bool), d.gain,
                           d.gamma, d.offset)
    return draw


def plain_at_windows(s: CropSampler, step: int) -> crops.CropBatch:
    """This rank's crops for ``step`` cut without augmentation where the augmented crops sit: at the centre of their
    windows (the crop moved inwards at the frame's edge)."""
    rows = s.coords(step)[s.start:s.stop]
    m = (s.window - s.crop) // 2
    moved = s.window_rows(rows)
    moved[:, 1:3] += m
    return s.cut(moved)


def test_augment_0_is_the_sampler_of_before_bit_for_bit():
    f = frames(scale=2)
    before = CropSampler(f, CROP, 6, seed=3)
    off = CropSampler(f, CROP, 6, seed=3, augment=0.0, grade_sides="both", channels=ChannelPlan())
    for step in (1, 5):
        a, b = before.batch(step), off.batch(step)
        assert torch.equal(a.input, b.input) and torch.equal(a.target, b.target)


def test_crops_not_drawn_for_augmentation_are_the_crops_of_augment_0():
    f = frames()
    plain, half = CropSampler(f, CROP, 32, seed=3), CropSampler(f, CROP, 32, seed=3, augment=0.5)
    for step in (1, 2):
        applied = augment.draw(3, step, 32, 0.5).apply
        assert 4 < applied.sum() < 28
        a, b = plain.batch(step), half.batch(step)
        assert torch.equal(a.input[~applied], b.input[~applied]) and torch.equal(a.target[~applied], b.target[~applied])
        assert all(not torch.equal(a.input[i], b.input[i]) for i in np.flatnonzero(applied))


@pytest.mark.parametrize("p", [0.5, 1.0])
def test_ranks_share_one_draw_so_any_world_size_gives_the_one_rank_batch(p):
    f = frames(scale=2)
    one = CropSampler(f, CROP, 7, 0, 1, seed=4, augment=p, grade_sides="both").batch(3)
    for world in (2, 3):
        parts = [CropSampler(f, CROP, 7, r, world, seed=4, augment=p, grade_sides="both").batch(3)
                 for r in range(world)]
        assert torch.equal(torch.cat([q.input for q in parts]), one.input)
        assert torch.equal(torch.cat([q.target for q in parts]), one.target)


@pytest.mark.parametrize("scale", [1, 2])
def test_an_identity_transform_gives_the_crop_centred_in_its_window_moved_inwards_at_the_edge(monkeypatch, scale):
    monkeypatch.setattr(crops.aug, "draw", fixed_draw())
    s = CropSampler(frames(scale=scale, cout=1), CROP, 24, seed=2, augment=1.0)
    assert s.window == augment.window(CROP) == 30
    for step in (1, 2, 3):
        rows = s.coords(step)
        assert (s.window_rows(rows)[:, 1:3] != rows[:, 1:3] - 7).any()  # some crops were moved inwards
        got, want = s.batch(step), plain_at_windows(s, step)
        assert got.target.shape == (24, 1, scale * CROP, scale * CROP)
        torch.testing.assert_close(got.input, want.input, rtol=0, atol=1e-5)
        torch.testing.assert_close(got.target, want.target, rtol=0, atol=1e-5)


def test_a_quarter_turn_turns_both_sides_alike_at_scale_2(monkeypatch):
    monkeypatch.setattr(crops.aug, "draw", fixed_draw(angle=math.pi / 2))
    s = CropSampler(frames(scale=2), CROP, 8, seed=6, augment=1.0)
    got, plain = s.batch(1), plain_at_windows(s, 1)
    torch.testing.assert_close(got.input, torch.rot90(plain.input, 1, (-2, -1)), rtol=0, atol=1e-5)
    torch.testing.assert_close(got.target, torch.rot90(plain.target, 1, (-2, -1)), rtol=0, atol=1e-5)


def test_window_rows_keep_every_window_inside_the_frame_and_move_crops_at_most_half_the_margin():
    s = CropSampler(frames(), CROP, 4, augment=1.0)
    m = (s.window - CROP) // 2
    rows = np.array([[0, y, x, 0, 1] for y in range(H - CROP + 1) for x in (0, 1, 20, W - CROP)])
    win = s.window_rows(rows)
    assert (win[:, 1] >= 0).all() and (win[:, 1] + s.window <= H).all() and (win[:, 2] + s.window <= W).all()
    assert (np.abs(win[:, 1:3] + m - rows[:, 1:3]) <= m).all()
    inner = (rows[:, 1] >= m) & (rows[:, 1] <= H - CROP - m) & (rows[:, 2] == 20)
    assert inner.any() and (win[inner, 1:3] == rows[inner, 1:3] - m).all()  # unmoved where the window fits
    assert (win[:, [0, 3, 4]] == rows[:, [0, 3, 4]]).all()


def test_frames_smaller_than_the_window_shrink_it_and_say_so(caplog):
    with caplog.at_level(logging.WARNING, logger="trainer.data.crops"):
        s = CropSampler(frames(h=20, w=30), CROP, 6, seed=1, augment=1.0)
    assert s.window == 20 and "windows shrink to 20 px" in caplog.text and "frames of 30x20 px" in caplog.text
    b = s.batch(1)
    assert b.input.shape == (6, 3, CROP, CROP) and torch.isfinite(b.input).all()


def test_a_matte_task_grades_the_input_colour_and_never_the_matte(monkeypatch):
    monkeypatch.setattr(crops.aug, "draw", fixed_draw())
    f = frames(scale=2, cout=1)
    plain = CropSampler(f, CROP, 8, seed=2, augment=1.0, channels=MATTE).batch(1)
    graded = CropSampler(f, CROP, 8, seed=2, augment=1.0, channels=MATTE,
                         grade_sides=grade_sides_for("auto", MATTE)).batch(1)
    both = CropSampler(f, CROP, 8, seed=2, augment=1.0, channels=MATTE, grade_sides="both").batch(1)
    assert torch.equal(graded.target, plain.target) and torch.equal(both.target, plain.target)  # a matte: never
    assert (graded.input - plain.input).abs().amax(dim=(1, 2, 3)).min() > 1e-3  # every crop's colour graded


def test_a_grade_on_both_sides_leaves_alpha_alone():
    f = frames(cin=4, cout=4)
    plain = CropSampler(f, CROP, 8, seed=2, augment=1.0, channels=RGBA).batch(1)
    graded = CropSampler(f, CROP, 8, seed=2, augment=1.0, channels=RGBA, grade_sides="both").batch(1)
    for a, b in ((plain.input, graded.input), (plain.target, graded.target)):
        assert torch.equal(a[:, 3], b[:, 3]) and not torch.equal(a[:, :3], b[:, :3])


def test_the_gpu_paths_gather_cuts_the_windows_of_the_host_path():
    """The uploaded frames' gather (crop_index, here on CPU tensors) for crops and windows: 1 channel out, scale 2."""
    f = frames(scale=2, cout=1)
    host = CropSampler(f, CROP, 9, seed=7, augment=0.6, channels=MATTE, grade_sides="input")
    gather = CropSampler(f, CROP, 9, seed=7, augment=0.6, channels=MATTE, grade_sides="input")
    gather.on_device = tuple(torch.from_numpy(np.stack([pair[side] for pair in f])) for side in (0, 1))
    for step in (1, 4):
        a, b = host.batch(step), gather.batch(step)
        assert torch.equal(a.input, b.input) and torch.equal(a.target, b.target)


def test_augment_grade_maps_to_the_sides_graded():
    colour = ChannelPlan()
    assert grade_sides_for("auto", MATTE) == "input" and grade_sides_for("auto", colour) == "none"
    assert grade_sides_for("auto", ChannelPlan(("R", "G", "B"), ("R", "G", "B", "A"))) == "none"
    assert grade_sides_for("on", colour) == "both" and grade_sides_for("off", MATTE) == "none"
    with pytest.raises(ValueError, match="--augment-grade 'yes' must be one of auto, on, off"):
        grade_sides_for("yes", colour)
    with pytest.raises(ValueError, match="grade_sides='input only'"):
        CropSampler(frames(), CROP, 4, augment=0.5, grade_sides="input only")

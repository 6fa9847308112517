"""A head start's crop focus (trainer.data.crop_focus): a share of each batch's crops drawn by an error map, the rest
and every other stream untouched, the same global batch on any number of ranks."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.data.crop_focus import CropFocus, crop_means, grid_shape
from trainer.data.crops import CropSampler

H, W, CROP = 40, 50, 16


def _hot(frames: int = 3, hot_frame: int = 1) -> list[np.ndarray]:
    """Error maps of 0.01 everywhere but a 6 x 6 px square of 1.0 at rows 30-35, columns 4-9 of ``hot_frame``."""
    maps = [np.full((H, W), 0.01, np.float32) for _ in range(frames)]
    maps[hot_frame][30:36, 4:10] = 1.0
    return maps


def test_each_cell_weighs_the_crop_at_its_first_corner_clipped_to_the_last_a_crop_can_take():
    error = np.random.default_rng(0).random((H, W))
    means = crop_means(error, CROP, stride=8)
    assert means.shape == grid_shape((H, W), CROP, 8) == (4, 5)  # corners 0..24 of 25 rows, 0..34 of 35 columns
    for gy in range(4):
        for gx in range(5):
            y, x = min(gy * 8, H - CROP), min(gx * 8, W - CROP)
            assert means[gy, gx] == pytest.approx(error[y:y + CROP, x:x + CROP].mean(), abs=1e-12)


def test_the_focused_share_lands_on_the_error_and_the_rest_is_the_uniform_draw():
    rows = CropSampler([(np.zeros((H, W, 3), np.float32),) * 2] * 3, CROP, 400, seed=5).coords(7)
    for share in (1.0, 0.5):
        out = CropFocus.from_errors(_hot(), CROP, share).apply(rows, seed=5, step=7)
        moved = (out != rows).any(axis=1)
        covers = (out[:, 0] == 1) & (out[:, 1] <= 35) & (out[:, 1] + CROP > 30) & (out[:, 2] <= 9) & \
            (out[:, 2] + CROP > 4)  # the crop overlaps the hot square
        assert covers[moved].mean() > 0.95 and covers[~moved].mean() < 0.2 if share < 1 else covers.all()
        assert abs(moved.mean() - share) < 0.08
        np.testing.assert_array_equal(out[:, 3:], rows[:, 3:])  # flips are the uniform draw's
        assert (out[:, 1] <= H - CROP).all() and (out[:, 2] <= W - CROP).all() and (out[:, :3] >= 0).all()
    np.testing.assert_array_equal(CropFocus.from_errors(_hot(), CROP, 0.0).apply(rows, 5, 7), rows)


def test_the_draw_is_fixed_by_seed_and_step():
    focus = CropFocus.from_errors([np.random.default_rng(1).random((H, W)) for _ in range(3)], CROP, 0.5)
    rows = np.zeros((64, 5), np.int64)
    np.testing.assert_array_equal(focus.apply(rows, 0, 3), focus.apply(rows, 0, 3))
    assert not np.array_equal(focus.apply(rows, 0, 3), focus.apply(rows, 0, 4))
    assert not np.array_equal(focus.apply(rows, 0, 3), focus.apply(rows, 1, 3))


def test_a_sampler_with_focus_gives_every_rank_its_slice_of_one_global_batch_and_leaves_previews_alone():
    frames = [(np.random.default_rng(i).random((H, W, 3)).astype(np.float32),) * 2 for i in range(3)]
    focus = CropFocus.from_errors(_hot(), CROP, 0.5)
    one = CropSampler(frames, CROP, 6, seed=2)
    plain = one.coords(9)
    one.focus = focus
    ranks = [CropSampler(frames, CROP, 6, rank=r, world_size=2, seed=2) for r in (0, 1)]
    for s in ranks:
        s.focus = focus
    whole = one.batch(9).input
    split = [s.batch(9).input for s in ranks]
    np.testing.assert_array_equal(np.concatenate([b.numpy() for b in split]), whole.numpy())
    assert not np.array_equal(one.coords(9), plain)
    np.testing.assert_array_equal(one.coords(9, 3, stream=1), CropSampler(frames, CROP, 6, seed=2).coords(9, 3, 1))


@pytest.mark.parametrize("bad,match", [
    (dict(share=1.5), "within 0..1"),
    (dict(cells=-np.ones((3, 4, 5))), "negative or non-finite"),
    (dict(cells=np.zeros((3, 4, 5))), "nothing to focus on"),
    (dict(cells=np.ones((3, 5, 5))), "does not match"),
])
def test_a_bad_focus_is_refused_naming_what_is_wrong(bad, match):
    args = dict(cells=np.ones((3, 4, 5)), size=(H, W), crop=CROP, share=0.5)
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        CropFocus.from_cells(**args)

"""The crop focus's map (trainer.learn.focus_map): how often it is made again, and its grid's type."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.learn.focus_map import CELL_DTYPE, REFRESH_PIXEL_SHARE, refresh_every


def test_a_small_shot_is_refreshed_as_asked_and_a_large_one_rarely():
    assert refresh_every(250, 100, (136, 320), 8, 64) == 250  # the study's alike shot: 222 steps would do
    assert refresh_every(100, 100, (136, 320), 8, 64) == 222  # ceil(4,352,000 px / (0.6 * 8 * 64 * 64))
    assert refresh_every(250, 100, (1080, 2048), 16, 64) == 5626  # a 2K shot: in practice never
    assert refresh_every(0, 100, (144, 176), 16, 64) == 0  # 0: the source's map all run


@pytest.mark.parametrize("every,frames,size,batch,crop", [(1, 4, (40, 48), 4, 16), (7, 30, (1080, 1920), 64, 128)])
def test_a_refresh_renders_at_most_its_share_of_the_pixels_trained_in_between(every, frames, size, batch, crop):
    steps = refresh_every(every, frames, size, batch, crop)
    assert steps >= every and frames * size[0] * size[1] <= REFRESH_PIXEL_SHARE * steps * batch * crop ** 2
    assert steps == every or frames * size[0] * size[1] > REFRESH_PIXEL_SHARE * (steps - 1) * batch * crop ** 2


def test_the_grid_is_half_precision():
    assert np.dtype(CELL_DTYPE).itemsize == 2

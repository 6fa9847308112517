"""The crop focus's map (trainer.learn.focus_map): how often it is made again, which frames a large shot's map
renders, and its grid's type."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from trainer.learn.focus_map import (CELL_DTYPE, MAP_PIXEL_SHARE, REFRESH_PIXEL_SHARE, error_cells, map_stride,
                                     refresh_every, rendered_frames)


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


def test_a_large_shot_renders_one_frame_in_every_stride_within_the_maps_share_of_the_run():
    assert map_stride(100, (136, 320), 1500, 8, 64) == 1  # the study's alike shot: every frame
    assert map_stride(100, (272, 640), 1500, 8, 64) == 3  # bikes at its own size: 34 frames rendered
    assert map_stride(100, (720, 1280), 1500, 8, 64) == 13  # 8 frames' pixels fit: one in 13 (8 rendered)
    assert map_stride(100, (1080, 2048), 1000, 8, 64) == 50  # a 2K shot at the farm's 1,000 steps: 2 frames
    assert map_stride(100, (1080, 2048), 10, 8, 64) == 100  # a budget below one frame still renders one
    for frames, size, steps, batch in [(100, (720, 1280), 1500, 8), (37, (272, 640), 500, 8),
                                       (120, (1080, 1920), 3000, 16)]:
        stride = map_stride(frames, size, steps, batch, 64)
        shown = len(np.unique(rendered_frames(frames, stride)))
        assert shown * size[0] * size[1] <= MAP_PIXEL_SHARE * steps * batch * 64 * 64
        assert stride == 1 or frames * size[0] * size[1] > MAP_PIXEL_SHARE * steps * batch * 64 * 64


def test_every_frame_takes_the_middle_frame_of_its_run_of_stride_frames():
    assert rendered_frames(10, 4).tolist() == [2, 2, 2, 2, 6, 6, 6, 6, 9, 9]
    assert rendered_frames(5, 1).tolist() == [0, 1, 2, 3, 4]
    assert rendered_frames(3, 10).tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="at least 1"):
        rendered_frames(10, 0)


def test_a_strided_map_renders_only_its_frames_and_copies_their_cells_to_the_others():
    """Seven frames of different noise, stride 3: the net runs on frames 1, 4 and 6 only, and every frame's cells
    are those its rendered frame gets when every frame is rendered."""
    rng = np.random.default_rng(0)
    images = [rng.random((24, 20, 3), dtype=np.float32) for _ in range(14)]  # Input, Target, Input, ...
    source = SimpleNamespace(count=7, size=(24, 20), scale=1, image=lambda i: images[i])
    rt = SimpleNamespace(env=SimpleNamespace(rank=0, world_size=1), device=torch.device("cpu"), backend="none")
    seen: list[int] = []

    class Net(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(next(i // 2 for i, im in enumerate(images) if np.array_equal(im, x[0].permute(1, 2, 0))))
            return x * 0.5

    every = error_cells(Net(), source, 8, rt)
    assert seen == list(range(7))
    seen.clear()
    strided = error_cells(Net(), source, 8, rt, stride=3)
    assert seen == [1, 4, 6]
    assert np.array_equal(strided, every[[1, 1, 1, 4, 4, 4, 6]]) and strided.dtype == CELL_DTYPE

"""Crop sampling and the split of the global batch across ranks."""

import numpy as np
import pytest
import torch

from trainer.data.crops import CropSampler, rank_loss_weight, rank_slice
from trainer.data.images import DataError


def frames(n=3, h=20, w=30):
    rng = np.random.default_rng(0)
    return [(rng.random((h, w, 3), dtype=np.float32), rng.random((h, w, 3), dtype=np.float32)) for _ in range(n)]


def test_rank_slices_cover_the_global_batch_once_with_remainder_on_low_ranks():
    slices = [rank_slice(10, r, 4) for r in range(4)]
    assert slices == [(0, 3), (3, 6), (6, 8), (8, 10)]


def test_loss_weights_make_the_ddp_average_the_global_mean():
    # DDP averages: (1/W) * sum_r w_r * mean_r == global mean when w_r = b_r * W / B
    b = [3, 3, 2, 2]
    means = [1.0, 2.0, 3.0, 4.0]
    ddp = sum(rank_loss_weight(bi, 10, 4) * m for bi, m in zip(b, means)) / 4
    assert ddp == pytest.approx(sum(bi * m for bi, m in zip(b, means)) / 10)


def test_batch_smaller_than_world_is_an_error():
    with pytest.raises(DataError, match="batch size 2 is smaller than the world size 4"):
        rank_slice(2, 0, 4)


def test_ranks_draw_different_crops_that_together_equal_the_one_rank_batch():
    f = frames()
    one = CropSampler(f, 8, 6, 0, 1, seed=3).batch(5)
    parts = [CropSampler(f, 8, 6, r, 2, seed=3).batch(5) for r in range(2)]
    assert not torch.equal(parts[0].input, parts[1].input)
    assert torch.equal(torch.cat([p.input for p in parts]), one.input)
    assert torch.equal(torch.cat([p.target for p in parts]), one.target)
    assert one.input.shape == (6, 3, 8, 8) and one.input.dtype == torch.float32


def test_crops_are_paired_and_flipped_together():
    f = frames(1)
    s = CropSampler([(f[0][0], f[0][0].copy())], 8, 16, seed=1)
    for step in range(1, 4):
        b = s.batch(step)
        assert torch.equal(b.input, b.target)


def test_steps_differ_and_repeat_deterministically():
    s = CropSampler(frames(), 8, 4)
    assert torch.equal(s.batch(1).input, s.batch(1).input)
    assert not torch.equal(s.batch(1).input, s.batch(2).input)


def test_crop_larger_than_frames_names_sizes():
    with pytest.raises(DataError, match=r"crop size 64 px is larger than the frames \(30x20 px\)"):
        CropSampler(frames(), 64, 4)


def test_a_host_copy_gives_the_batches_of_the_same_frames_in_memory(tmp_path):
    """The trainer's source (trainer.data.hostcache, 70 x 100 px frames padded to 64 px tiles, none kept in memory)
    and the decoded frames themselves: the same crops, flips and pairing for every step, bit for bit."""
    from tests.conftest import make_pairs
    from trainer.data.colour import ColourSpec
    from trainer.data.hostcache import HostCache
    from trainer.data.sequences import load_pairs, pair_frames
    from trainer.data.shot import list_shot

    dirs = make_pairs(tmp_path / "data", frames=3, height=70, width=100, ext="exr")
    cache = HostCache(tmp_path / "scratch", list_shot(*map(str, dirs)), ColourSpec(), 0)
    cache.build()
    memory = CropSampler(load_pairs(pair_frames(*dirs)), 24, 7, 1, 2, seed=5)
    copy = CropSampler(cache, 24, 7, 1, 2, seed=5)
    for step in (1, 2, 9):
        a, b = memory.batch(step), copy.batch(step)
        assert torch.equal(a.input, b.input) and torch.equal(a.target, b.target)
    assert torch.equal(memory.preview(3).input, copy.preview(3).input)


def test_frames_go_to_the_gpu_only_within_the_stated_share_of_its_free_memory():
    from trainer.data.crops import GPU_FRAME_FRACTION, frames_fit_gpu

    free = 24 * 2**30
    assert frames_fit_gpu(int(GPU_FRAME_FRACTION * free), free)
    assert not frames_fit_gpu(int(GPU_FRAME_FRACTION * free) + 1, free)

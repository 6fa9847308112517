"""Upres data (``--scale``): the Ground Truth is exactly s times the Input, refused otherwise with both files and
sizes named; crops are aligned (the Ground Truth's at s times the Input's position and size) through frames in
memory, the GPU path's index and the host copy; the shot record and the copy's key carry the scale."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.data.colour import ColourSpec
from trainer.data.crops import CropSampler, crop_index
from trainer.data.hostcache import HostCache, ScratchError
from trainer.data.images import DataError, write_image
from trainer.data.sequences import load_pairs, pair_frames
from trainer.data.shot import list_shot
from trainer.data.sources import FramesInMemory

H, W = 70, 100  # Input size: not a multiple of the 64 px tile on either side


def upres(frame: np.ndarray, s: int) -> np.ndarray:
    """(H, W, 3) -> (s*H, s*W, 3): each pixel repeated s x s (an exact nearest-neighbour upscale)."""
    return np.repeat(np.repeat(frame, s, axis=0), s, axis=1)


def write_shot(folder: Path, sizes: list[tuple[tuple[int, int], tuple[int, int]]], ext: str = "png",
               scale: int = 0) -> tuple[Path, Path]:
    """Input/Ground Truth sequences ``plate.000k``, one pair per ``((h, w), (th, tw))`` of ``sizes``; random Input
    pixels and, when ``scale``, Ground Truth = :func:`upres` of the Input (else random). Returns (input, target)."""
    rng = np.random.default_rng(3)
    dirs = folder / "in", folder / "gt"
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    for k, (size, target_size) in enumerate(sizes, 1):
        frame = rng.random((*size, 3), dtype=np.float32)
        target = upres(frame, scale) if scale else rng.random((*target_size, 3), dtype=np.float32)
        write_image(dirs[0] / f"plate.{k:04d}.{ext}", frame)
        write_image(dirs[1] / f"plate.{k:04d}.{ext}", target)
    return dirs


def aligned(batch, s: int) -> bool:
    """Every Ground Truth crop is the s x s repeat of its Input crop: (b, 3, c, c) vs (b, 3, s*c, s*c)."""
    return torch.equal(batch.target, batch.input.repeat_interleave(s, 2).repeat_interleave(s, 3))


# ----------------------------------------------------------------------------------------------
# Sizes


@pytest.mark.parametrize("scale", [2, 4])
def test_a_ground_truth_not_scale_times_the_input_is_refused_naming_both_files_sizes_and_the_fix(tmp_path, scale):
    dirs = write_shot(tmp_path, [((16, 20), (scale * 16 - 8, scale * 20))])
    a, b = dirs[0] / "plate.0001.png", dirs[1] / "plate.0001.png"
    expected = (f"frame 1: Input {a} is 20x16 but Ground Truth {b} is {scale * 20}x{scale * 16 - 8}; with --scale "
                f"{scale} the Ground Truth must be {scale * 20}x{scale * 16} ({scale}x the Input): fix the frames or "
                "the --scale")
    with pytest.raises(DataError) as listed:
        list_shot(str(dirs[0]), str(dirs[1]), scale=scale)
    with pytest.raises(DataError) as loaded:
        load_pairs(pair_frames(*dirs), scale=scale)
    assert str(listed.value) == str(loaded.value) == expected


def test_a_ground_truth_twice_the_input_without_scale_says_it_looks_like_scale_2(tmp_path):
    dirs = write_shot(tmp_path, [((16, 20), (32, 40))])
    a, b = dirs[0] / "plate.0001.png", dirs[1] / "plate.0001.png"
    expected = (f"frame 1: Input {a} is 20x16 but Ground Truth {b} is 40x32; the Ground Truth is exactly 2x the "
                "Input: looks like --scale 2 (upres); without it Input and Ground Truth must be the same size")
    for call in (lambda: list_shot(str(dirs[0]), str(dirs[1])), lambda: load_pairs(pair_frames(*dirs))):
        with pytest.raises(DataError) as info:
            call()
        assert str(info.value) == expected
    with pytest.raises(DataError, match=re.escape("fix the frames or the --scale (it is 2x the Input: looks like "
                                                  "--scale 2)")):
        list_shot(str(dirs[0]), str(dirs[1]), scale=4)
    with pytest.raises(DataError, match=re.escape("must be 40x32 (2x the Input): fix the frames or the --scale")):
        list_shot(str(write_shot(tmp_path / "same", [((16, 20), (16, 20))])[0]), str(tmp_path / "same" / "gt"),
                  scale=2)


@pytest.mark.parametrize("scale", [1, 2, 4])
def test_matching_sizes_are_listed_and_loaded_with_the_scale(tmp_path, scale):
    dirs = write_shot(tmp_path, [((16, 20), (scale * 16, scale * 20))] * 2)
    shot = list_shot(str(dirs[0]), str(dirs[1]), scale=scale)
    assert (shot.width, shot.height, shot.scale, shot.target_size) == (20, 16, scale, (scale * 20, scale * 16))
    record = shot.record()
    assert (record["scale"], record["target_width"], record["target_height"]) == (scale, scale * 20, scale * 16)
    assert type(shot).from_json(shot.to_json()) == shot
    frames = load_pairs(pair_frames(*dirs), scale=scale)
    assert [(a.shape, b.shape) for a, b in frames] == [((16, 20, 3), (scale * 16, scale * 20, 3))] * 2
    assert FramesInMemory(frames).scale == scale


def test_the_digest_and_so_the_host_copy_differ_by_scale(tmp_path):
    dirs = write_shot(tmp_path, [((16, 20), (16, 20))])
    shot = list_shot(str(dirs[0]), str(dirs[1]))
    assert dataclasses.replace(shot, scale=2).digest() != shot.digest()


def test_frames_in_memory_refuse_a_target_that_is_not_the_scale(tmp_path):
    a = np.zeros((16, 20, 3), np.float16)
    with pytest.raises(DataError, match="input is 20x16 but its target is 40x32; with scale 4 the target must be "
                                        "80x64"):
        FramesInMemory([(a, upres(a, 2))], scale=4)
    with pytest.raises(DataError, match="with scale 1 the target must be 20x16"):
        FramesInMemory([(a, np.zeros((24, 20, 3), np.float16))])


# ----------------------------------------------------------------------------------------------
# Aligned crops


def memory_frames(scale: int, n: int = 3) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(11)
    inputs = [rng.random((H, W, 3), dtype=np.float32).astype(np.float16) for _ in range(n)]
    return [(a, upres(a, scale)) for a in inputs]


@pytest.mark.parametrize("scale", [2, 4])
def test_ground_truth_crops_are_aligned_with_their_input_crops(scale):
    """With Ground Truth = an exact s x upscale of the Input, every Ground Truth crop (s*c px at (s*y, s*x), flipped
    like its Input crop) is the upscale of its Input crop; a crop taken at the Input's (y, x) would not be."""
    sampler = CropSampler(memory_frames(scale), 12, 32, seed=4)
    for step in range(1, 5):
        batch = sampler.batch(step)
        assert batch.input.shape == (32, 3, 12, 12) and batch.target.shape == (32, 3, 12 * scale, 12 * scale)
        assert aligned(batch, scale)
    assert aligned(sampler.preview(2), scale)


@pytest.mark.parametrize("scale", [1, 2, 4])
def test_the_gpu_gather_index_cuts_the_crops_of_the_host_path(scale):
    """The GPU path's index (crop_index, per side) on CPU tensors: the host path's batches, bit for bit."""
    frames = memory_frames(scale)
    sampler = CropSampler(frames, 12, 16, seed=2)
    host = [sampler.batch(step) for step in (1, 2)]
    sampler.on_device = tuple(torch.from_numpy(np.stack([f[side] for f in frames])) for side in (0, 1))
    for step, want in zip((1, 2), host):
        got = sampler.batch(step)
        assert torch.equal(got.input, want.input) and torch.equal(got.target, want.target)
    rows = torch.tensor([[1, 3, 5, 1, 0]])
    f, ys, xs = crop_index(rows, 4, scale)
    assert ys[0, :, 0].tolist() == list(range(3 * scale, 7 * scale))  # not flipped vertically
    assert xs[0, 0].tolist() == list(range(9 * scale - 1, 5 * scale - 1, -1))  # flipped horizontally


def test_scale_1_cuts_both_sides_at_the_same_coordinates_as_before():
    """The batch of scale 1 is the crops at ``coords`` on both sides (what the sampler always cut), bit for bit."""
    frames = [(a.astype(np.float32), a.astype(np.float32) + 1) for a, _ in memory_frames(1)]
    sampler = CropSampler(frames, 12, 8, seed=9)
    batch = sampler.batch(3)

    def cut(side: int) -> torch.Tensor:
        crops = [frames[f][side][y:y + 12, x:x + 12][::-1 if fv else 1, ::-1 if fh else 1]
                 for f, y, x, fh, fv in sampler.coords(3).tolist()]
        return torch.from_numpy(np.stack(crops)).permute(0, 3, 1, 2)

    assert sampler.scale == 1 and torch.equal(batch.input, cut(0)) and torch.equal(batch.target, cut(1))


# ----------------------------------------------------------------------------------------------
# The host copy


@pytest.fixture
def upres_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """3 EXR pairs at scale 2: Input 100x70, Ground Truth its exact 2x upscale, 200x140."""
    return write_shot(tmp_path / "data", [((H, W), (2 * H, 2 * W))] * 3, ext="exr", scale=2)


@pytest.mark.parametrize("cache_mb", [0, 1])  # 0: every crop read from the copy; 1 MiB: 2 of the 3 frames resident
def test_the_host_copy_at_scale_2_holds_both_sizes_and_cuts_the_crops_of_the_frames_in_memory(upres_dirs, tmp_path,
                                                                                           cache_mb):
    frames = load_pairs(pair_frames(*upres_dirs), scale=2)
    cache = HostCache(tmp_path / "s", list_shot(*map(str, upres_dirs), scale=2), ColourSpec(), cache_mb)
    assert cache.build() == 3 and cache.load_resident() == (2 if cache_mb else 0) and cache.scale == 2
    for image in range(6):
        assert np.array_equal(cache.image(image), frames[image // 2][image % 2]), image
    assert cache.image(0).shape == (H, W, 3) and cache.image(1).shape == (2 * H, 2 * W, 3)
    rng = np.random.default_rng(1)
    for _ in range(100):
        k, side, c = int(rng.integers(3)), int(rng.integers(2)), int(rng.integers(1, 66))
        y, x = int(rng.integers((side + 1) * H - c + 1)), int(rng.integers((side + 1) * W - c + 1))
        assert np.array_equal(cache.crop(2 * k + side, y, x, c), frames[k][side][y:y + c, x:x + c]), (k, side, y, x, c)
    memory, copy = CropSampler(frames, 24, 9, seed=5), CropSampler(cache, 24, 9, seed=5)
    for step in (1, 2, 7):
        a, b = memory.batch(step), copy.batch(step)
        assert torch.equal(a.input, b.input) and torch.equal(a.target, b.target) and aligned(b, 2)
    assert cache.shot.record()["scale"] == 2
    cache.close()


def test_a_ground_truth_of_another_size_later_in_the_shot_names_the_first_ground_truth(upres_dirs, tmp_path):
    write_image(upres_dirs[1] / "plate.0003.exr", np.zeros((2 * H, 2 * W + 2, 3), np.float32))
    with pytest.raises(DataError, match=rf"plate\.0003\.exr is 202x140 but the first frame 1 "
                                        rf"\({re.escape(str(upres_dirs[1] / 'plate.0001.exr'))}\) is 200x140"):
        HostCache(tmp_path / "s", list_shot(*map(str, upres_dirs), scale=2), ColourSpec(), 0).build()


def test_scratch_too_small_at_scale_2_names_both_sizes(upres_dirs, tmp_path, monkeypatch):
    import shutil

    from trainer.data import hostcache

    monkeypatch.setattr(hostcache.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10, 10, 1000))
    with pytest.raises(ScratchError, match=r"the decoded shot \(3 pairs of 100x70 Input and 200x140 Ground Truth\) "
                                           r"needs 0\.0 GiB"):
        HostCache(tmp_path / "s", list_shot(*map(str, upres_dirs), scale=2), ColourSpec(), 0)


def test_the_data_phase_lists_the_shot_at_the_configured_scale_and_records_it(upres_dirs, tmp_path):
    from trainer.core.config import TrainConfig
    from trainer.core.envvars import DistEnv
    from trainer.data.shot_loading import open_data
    from trainer.gang.distributed import Runtime
    from trainer.record import runrecord
    from trainer.record.rundir import RunPaths

    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    cfg = TrainConfig(input_dir=str(upres_dirs[0]), target_dir=str(upres_dirs[1]), run_dir=str(paths.root), scale=2)
    data = open_data(cfg, Runtime(DistEnv(distributed=False), torch.device("cpu"), "none"), ColourSpec(), paths)
    assert data.source.scale == 2 and data.source.image(1).shape == (2 * H, 2 * W, 3)
    data.close()
    record = runrecord.read_record(paths).data
    assert record["scale"] == 2
    assert (record["shot"]["scale"], record["shot"]["target_width"], record["shot"]["target_height"]) == (2, 200, 140)

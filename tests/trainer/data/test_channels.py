"""Named channels in the data path (issue 40): reading channels by name (PNG alpha, an EXR layer's ``matte.A``), a
missing channel refused naming the file and the fix, the shot's listing, record and digest, the host copy with
per-side channel counts (bit for bit the frames in memory, at scale 1 and 2), colour management of R, G, B only,
and the identity warning of a matte job."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import numpy as np
import OpenImageIO as oiio
import pytest
import torch

from trainer.core.channels import ChannelPlan
from trainer.data.colour import ColourSpec, colour_channels
from trainer.data.crops import CropSampler, warn_identity
from trainer.data.hostcache import HostCache
from trainer.data.images import DataError, read_channels, read_image, write_image, write_oiio
from trainer.data.sequences import identity_warning, load_pairs, pair_frames
from trainer.data.shot import Shot, decode_bands, list_shot

H, W = 70, 100  # not a multiple of the 64 px tile
MATTE = ChannelPlan(("R", "G", "B"), ("A",))
LINEAR = "Linear Rec.709 (sRGB)"


def rgba_png(path: Path, codes: np.ndarray) -> None:
    """An 8-bit RGBA PNG of (h, w, 4) uint8 ``codes`` (unassociated alpha, as PNG stores it)."""
    write_oiio(path, oiio.ImageSpec(codes.shape[1], codes.shape[0], 4, "uint8"), np.ascontiguousarray(codes))


def layered_exr(path: Path, pixels: np.ndarray, names: tuple[str, ...]) -> None:
    """A float EXR of (h, w, C) ``pixels`` with the channel ``names`` (e.g. ``matte.A``)."""
    spec = oiio.ImageSpec(pixels.shape[1], pixels.shape[0], pixels.shape[2], "float")
    spec.channelnames = names
    write_oiio(path, spec, np.ascontiguousarray(pixels, dtype=np.float32))


def matte_shot(folder: Path, frames: int = 3, scale: int = 1, seed: int = 3) -> tuple[Path, Path]:
    """Input RGB PNGs (H x W) and Ground Truth RGBA PNGs (scale x that) whose alpha differs from their R (so reading
    R instead of A shows). Returns (input, target)."""
    rng = np.random.default_rng(seed)
    dirs = folder / "in", folder / "gt"
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
    for k in range(1, frames + 1):
        write_image(dirs[0] / f"plate.{k:04d}.png", rng.random((H, W, 3), dtype=np.float32))
        codes = rng.integers(0, 256, (scale * H, scale * W, 4), dtype=np.uint8)
        codes[..., 3] = 255 - codes[..., 0] // 2  # alpha never equals R
        rgba_png(dirs[1] / f"plate.{k:04d}.png", codes)
    return dirs


def alpha_of(path: Path) -> np.ndarray:
    """(h, w, 1) float32 alpha of an RGBA PNG as OIIO decodes it, never premultiplied, read without the trainer's
    channel picking (and its code value / 255, to 1e-7)."""
    config = oiio.ImageSpec()
    config.attribute("oiio:UnassociatedAlpha", 1)
    inp = oiio.ImageInput.open(str(path), config)
    pixels, codes = inp.read_image(0, 0, 0, 4, "float"), inp.read_image(0, 0, 0, 4, "uint8")
    inp.close()
    np.testing.assert_allclose(pixels[..., 3], codes[..., 3] / np.float32(255), rtol=0, atol=1e-7)
    return np.ascontiguousarray(pixels[..., 3:4])


# ----------------------------------------------------------------------------------------------
# Reading by name


def test_an_rgba_ground_truth_with_target_a_reads_its_alpha_by_name(tmp_path):
    dirs = matte_shot(tmp_path)
    gt = dirs[1] / "plate.0001.png"
    a = read_channels(gt, ("A",))
    assert a.shape == (H, W, 1) and a.dtype == np.float32
    assert np.array_equal(a, alpha_of(gt))  # the stored alpha, never premultiplied, not R
    assert not np.array_equal(a[..., 0], read_image(gt)[..., 0])
    assert np.array_equal(read_channels(gt, ("A", "R"))[..., 1], read_image(gt)[..., 0])  # in the named order
    ((inp, tgt),) = load_pairs(pair_frames(*dirs)[:1], channels=MATTE)
    assert inp.shape == (H, W, 3) and tgt.shape == (H, W, 1) and tgt.dtype == np.float16
    assert np.array_equal(tgt, alpha_of(gt).astype(np.float16))
    assert np.array_equal(inp, read_image(dirs[0] / "plate.0001.png").astype(np.float16))


def test_an_exr_layer_channel_is_read_by_its_name(tmp_path):
    rng = np.random.default_rng(0)
    pixels = rng.random((12, 16, 5), dtype=np.float32) * 4
    path = tmp_path / "plate.0001.exr"
    layered_exr(path, pixels, ("R", "G", "B", "matte.A", "depth.Z"))
    assert np.array_equal(read_channels(path, ("matte.A",))[..., 0], pixels[..., 3])
    assert np.array_equal(read_channels(path, ("depth.Z", "R")), pixels[..., [4, 0]])
    assert np.array_equal(read_image(path), pixels[..., :3])  # RGB as before


def test_a_missing_channel_is_refused_naming_the_file_the_channel_what_it_has_and_the_fix(tmp_path):
    png = tmp_path / "plate.1001.png"
    write_image(png, np.zeros((4, 6, 3), np.float32))
    with pytest.raises(DataError) as err:
        read_channels(png, ("A",), "--target-channels")
    assert str(err.value) == (f"{png} has no channel 'A' (it has R, G, B): pick channels it has with "
                              "--target-channels, or write the matte into its alpha")
    exr = tmp_path / "plate.1001.exr"
    layered_exr(exr, np.zeros((4, 6, 4), np.float32), ("R", "G", "B", "matte.A"))
    have = ", ".join(oiio.ImageInput.open(str(exr)).spec().channelnames)
    with pytest.raises(DataError) as err:
        read_channels(exr, ("roto.A", "Z"), "--input-channels")
    assert str(err.value) == (f"{exr} has no channels 'roto.A', 'Z' (it has {have}): pick channels it has with "
                              "--input-channels, or write the matte into its alpha")


def test_the_shot_listing_checks_the_first_pairs_channels_and_decoding_checks_every_file(tmp_path):
    dirs = matte_shot(tmp_path, frames=2)
    with pytest.raises(DataError, match=re.escape(f"{dirs[0] / 'plate.0001.png'} has no channel 'A' (it has R, G, "
                                                  "B): pick channels it has with --input-channels")):
        list_shot(*map(str, dirs), channels=ChannelPlan(("R", "G", "B", "A"), ("A",)))
    write_image(dirs[1] / "plate.0002.png", np.zeros((H, W, 3), np.float32))  # the second Ground Truth lost its alpha
    shot = list_shot(*map(str, dirs), channels=MATTE)  # the first pair is fine
    with pytest.raises(DataError, match=re.escape(f"{dirs[1] / 'plate.0002.png'} has no channel 'A' (it has R, G, "
                                                  "B): pick channels it has with --target-channels")):
        HostCache(tmp_path / "s", shot, ColourSpec(), 0).build()
    with pytest.raises(DataError, match="plate.0002.png has no channel 'A'"):
        load_pairs(pair_frames(*dirs), channels=MATTE)


# ----------------------------------------------------------------------------------------------
# The shot and the host copy


def test_the_shot_records_its_channels_and_its_digest_and_copy_differ_by_plan(tmp_path):
    dirs = matte_shot(tmp_path, frames=2)
    rgb, matte = list_shot(*map(str, dirs)), list_shot(*map(str, dirs), channels=MATTE)
    assert rgb.record()["input_channels"] == ["R", "G", "B"] and rgb.record()["target_channels"] == ["R", "G", "B"]
    assert matte.record()["target_channels"] == ["A"] and Shot.from_json(matte.to_json()) == matte
    assert rgb.digest() != matte.digest()
    assert dataclasses.replace(matte, channels=ChannelPlan()).digest() == rgb.digest()
    a, b = HostCache(tmp_path / "s", rgb, ColourSpec(), 0), HostCache(tmp_path / "s", matte, ColourSpec(), 0)
    assert a.folder != b.folder and b.bytes == a.bytes * 4 // 6  # Ground Truth tiles of 1 channel, not 3
    a.close(), b.close()


@pytest.mark.parametrize("scale", [1, 2])
@pytest.mark.parametrize("cache_mb", [0, 1])  # 0: crops read from the copy; 1 MiB: frames resident
def test_the_host_copy_of_a_matte_shot_is_the_frames_in_memory_bit_for_bit(tmp_path, scale, cache_mb):
    dirs = matte_shot(tmp_path, scale=scale)
    frames = load_pairs(pair_frames(*dirs), scale=scale, channels=MATTE)
    cache = HostCache(tmp_path / "s", list_shot(*map(str, dirs), scale=scale, channels=MATTE), ColourSpec(), cache_mb)
    cache.build()
    assert cache.load_resident() == (0 if not cache_mb else min(3, 2**20 // cache.frame_bytes))
    for image in range(6):
        assert np.array_equal(cache.image(image), frames[image // 2][image % 2]), image
    assert cache.image(0).shape == (H, W, 3) and cache.image(1).shape == (scale * H, scale * W, 1)
    rng = np.random.default_rng(1)
    for _ in range(100):
        k, side, c = int(rng.integers(3)), int(rng.integers(2)), int(rng.integers(1, 66))
        k_side = scale if side else 1
        y, x = int(rng.integers(k_side * H - c + 1)), int(rng.integers(k_side * W - c + 1))
        assert np.array_equal(cache.crop(2 * k + side, y, x, c), frames[k][side][y:y + c, x:x + c]), (k, side, y, x)
    memory = CropSampler(frames, 24, 9, seed=5, channels=MATTE)
    copy = CropSampler(cache, 24, 9, seed=5, channels=MATTE)
    alphas = [alpha_of(p.target)[..., 0] for p in pair_frames(*dirs)]
    for step in (1, 2, 7):
        a, b = memory.batch(step), copy.batch(step)
        assert b.input.shape == (9, 3, 24, 24) and b.target.shape == (9, 1, 24 * scale, 24 * scale)
        assert torch.equal(a.input, b.input) and torch.equal(a.target, b.target)
        for (f, y, x, fh, fv), crop in zip(copy.coords(step).tolist(), b.target[:, 0].numpy()):
            want = alphas[f][scale * y:scale * (y + 24), scale * x:scale * (x + 24)]
            want = want[::-1 if fv else 1, ::-1 if fh else 1].astype(np.float16).astype(np.float32)
            assert np.array_equal(crop, want)  # the target crops are the files' alpha, not their R
    cache.close()


def test_a_scratch_too_small_names_the_sides_channels(tmp_path, monkeypatch):
    import shutil

    from trainer.data import hostcache
    from trainer.data.hostcache import ScratchError

    dirs = matte_shot(tmp_path, frames=1)
    monkeypatch.setattr(hostcache.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10, 10, 1000))
    with pytest.raises(ScratchError, match=r"the decoded shot \(1 pairs of 100x70 Input \(R, G, B\) and 100x70 "
                                           r"Ground Truth \(A\)\) needs"):
        HostCache(tmp_path / "s", list_shot(*map(str, dirs), channels=MATTE), ColourSpec(), 0)


def test_a_sampler_refuses_frames_whose_channels_are_not_the_plans():
    frames = [(np.zeros((8, 8, 3), np.float32), np.zeros((8, 8, 3), np.float32))]
    with pytest.raises(DataError, match="the frames have 3 Input and 3 Ground Truth channels but the channel plan "
                                        "reads R, G, B -> A"):
        CropSampler(frames, 4, 2, channels=MATTE)


# ----------------------------------------------------------------------------------------------
# Colour management: R, G, B only


def test_colour_channels_are_r_g_b_by_name_never_alpha():
    assert colour_channels(("R", "G", "B")) == (0, 1, 2) and colour_channels(("A",)) == ()
    assert colour_channels(("A", "B", "G", "R")) == (3, 2, 1)
    assert colour_channels(("beauty.R", "beauty.G", "beauty.B", "matte.A")) == (0, 1, 2)


def test_decoding_converts_the_colour_channels_and_never_the_alpha(tmp_path):
    rng = np.random.default_rng(2)
    pixels = (rng.random((8, 10, 4), dtype=np.float32) * 4).astype(np.float16).astype(np.float32)
    path = tmp_path / "plate.0001.exr"
    layered_exr(path, pixels, ("R", "G", "B", "A"))
    spec = ColourSpec(LINEAR, "ACEScct")
    ((_, band),) = decode_bands(path, 64, (10, 8), spec, names=("A", "R", "G", "B"))
    assert band.shape == (8, 10, 4) and band.dtype == np.float16
    assert np.array_equal(band[..., 0], pixels[..., 3].astype(np.float16))  # alpha as stored
    rgb = spec.to_working(pixels[..., :3].astype(np.float16)).astype(np.float16)
    assert np.array_equal(band[..., 1:], rgb)
    ((_, plain),) = decode_bands(path, 64, (10, 8), spec)  # the RGB default: exactly the old conversion
    assert np.array_equal(plain, rgb)


# ----------------------------------------------------------------------------------------------
# The identity warning


def test_a_matte_job_on_the_same_rgba_files_is_not_an_identity(tmp_path, caplog):
    dirs = matte_shot(tmp_path, frames=2)
    same = str(dirs[1])
    assert identity_warning(same, same, [], MATTE) is None  # RGB in, A out of the same files: a matte job
    assert "same folder" in identity_warning(same, same, [], ChannelPlan())
    assert "same folder" in identity_warning(same, same, [], ChannelPlan(("R", "G", "B", "A"), ("A",)))
    with caplog.at_level(logging.WARNING, logger="trainer.data.crops"):
        warn_identity(same, same, MATTE)
        warn_identity(*map(str, dirs), MATTE)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="trainer.data.crops"):
        warn_identity(same, same, ChannelPlan(("R", "G", "B", "A"), ("R", "G", "B")))
    assert len(caplog.records) == 1 and "the model learns the identity" in caplog.records[0].getMessage()


def test_byte_identical_files_warn_only_when_the_trained_channels_are_the_inputs(tmp_path, caplog):
    dirs = matte_shot(tmp_path, frames=2)
    copy = tmp_path / "copy"
    copy.mkdir()
    for p in dirs[1].iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    with caplog.at_level(logging.WARNING, logger="trainer.data.crops"):
        warn_identity(str(dirs[1]), str(copy), MATTE)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="trainer.data.crops"):
        warn_identity(str(dirs[1]), str(copy), ChannelPlan(("R", "G", "B", "A"), ("A",)))
    assert "every Input frame equals its Ground Truth frame" in caplog.records[0].getMessage()
    rgba = np.random.default_rng(0).random((4, 4, 4), dtype=np.float32)
    plan = ChannelPlan(("R", "G", "B", "A"), ("R", "G", "B"))
    assert "every Input frame" in identity_warning("a", "b", [(rgba, rgba[..., :3])], plan)
    assert identity_warning("a", "b", [(rgba, rgba[..., 1:])], plan) is None
    assert identity_warning("a", "b", [(rgba[..., :3], rgba[..., 3:])], MATTE) is None


def test_the_data_phase_reads_the_configured_channels_and_records_them(tmp_path):
    from trainer.core.config import TrainConfig
    from trainer.core.envvars import DistEnv
    from trainer.data.shot_loading import open_data
    from trainer.gang.distributed import Runtime
    from trainer.record import runrecord
    from trainer.record.rundir import RunPaths

    dirs = matte_shot(tmp_path / "data", frames=2)
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    cfg = TrainConfig(input_dir=str(dirs[0]), target_dir=str(dirs[1]), run_dir=str(paths.root), target_channels="A")
    data = open_data(cfg, Runtime(DistEnv(distributed=False), torch.device("cpu"), "none"), ColourSpec(), paths)
    assert data.source.image(1).shape == (H, W, 1)
    assert np.array_equal(data.source.image(3), alpha_of(dirs[1] / "plate.0002.png").astype(np.float16))
    data.close()
    record = runrecord.read_record(paths).data
    assert record["channels"] == {"in": ["R", "G", "B"], "out": ["A"], "task": "matte"}
    assert (record["shot"]["input_channels"], record["shot"]["target_channels"]) == (["R", "G", "B"], ["A"])

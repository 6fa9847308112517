"""``cuetrain infer`` with models of named channels (trainer.export.infer, trainer.data.write_like): the output file
is the input file plus the model's channels: RGB kept bit for bit, A (or an EXR layer's matte.A) the model's."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import OpenImageIO as oiio
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainer.core.channels import ChannelPlan
from trainer.data.colour import ColourSpec
from trainer.data.images import DataError
from trainer.export.formats import torchscript_bytes
from trainer.export.infer import infer_sequence, model_channels
from trainer.learn.model import build_model
from trainer.learn.run_writer import export_model
from trainer.record.rundir import RunPaths


class MatteOf(nn.Module):
    """(1, 3, H, W) -> (1, 1, sH, sW): A = 0.8 * mean(R, G, B) + 0.1, nearest-upscaled by ``scale`` (a value no
    input channel holds, so a test sees which channel it landed in)."""

    def __init__(self, scale: int = 1) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x.mean(dim=1, keepdim=True) * 0.8 + 0.1
        if self.scale > 1:
            a = F.interpolate(a, scale_factor=float(self.scale), mode="nearest")
        return a


class ColourAlpha(nn.Module):
    """(1, 3, H, W) -> (1, 4, H, W): colour 0.5 x + 0.2 and A = R (a colour + alpha model)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x * 0.5 + 0.2, x[:, :1]], dim=1)


def expected_matte(rgb: np.ndarray) -> np.ndarray:
    return rgb.astype(np.float32).mean(axis=2) * 0.8 + 0.1


def save(tmp_path: Path, net: nn.Module, channels_in: list[str], channels_out: list[str], **meta) -> Path:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "model.pt").write_bytes(torchscript_bytes(net))
    (run / "model.json").write_text(json.dumps({"channels_in": channels_in, "channels_out": channels_out, **meta}))
    return run / "model.pt"


def write(path: Path, fmt: str, names: tuple[str, ...], h: int = 9, w: int = 13, seed: int = 0) -> np.ndarray:
    spec = oiio.ImageSpec(w, h, len(names), fmt)
    spec.channelnames = names
    if "A" in names:
        spec.alpha_channel = names.index("A")
        spec.attribute("oiio:UnassociatedAlpha", 1)
    pixels = np.random.default_rng(seed).random((h, w, len(names))).astype(np.float32)
    out = oiio.ImageOutput.create(str(path))
    assert out.open(str(path), spec) and out.write_image(pixels) and out.close(), oiio.geterror()
    return read(path)[1]


def read(path: Path) -> tuple[oiio.ImageSpec, np.ndarray]:
    """The spec and (H, W, C) float pixels as stored (alpha never premultiplied)."""
    config = oiio.ImageSpec()
    config.attribute("oiio:UnassociatedAlpha", 1)
    inp = oiio.ImageInput.open(str(path), config)
    spec = oiio.ImageSpec(inp.spec())
    pixels = inp.read_image(0, 0, 0, spec.nchannels, "float").reshape(spec.height, spec.width, spec.nchannels)
    inp.close()
    return spec, pixels


def channel(spec: oiio.ImageSpec, pixels: np.ndarray, name: str) -> np.ndarray:
    return pixels[:, :, list(spec.channelnames).index(name)]


def one_frame(tmp_path: Path, ext: str, fmt: str, names: tuple[str, ...], **kw) -> tuple[Path, np.ndarray]:
    src = tmp_path / "in"
    src.mkdir()
    return src, write(src / f"plate.1001.{ext}", fmt, names, **kw)


@pytest.mark.parametrize("ext,fmt,tolerance", [("png", "uint8", 0.5 / 255 + 1e-6), ("tif", "uint16", 1e-4)])
def test_a_matte_model_on_rgb_frames_writes_rgba_frames(tmp_path, ext, fmt, tolerance):
    src, before = one_frame(tmp_path, ext, fmt, ("R", "G", "B"))
    model = save(tmp_path, MatteOf(), ["R", "G", "B"], ["A"])
    (out,) = infer_sequence(model, src, tmp_path / "out")
    spec, after = read(out)
    assert tuple(spec.channelnames) == ("R", "G", "B", "A") and str(spec.format) == fmt and spec.alpha_channel == 3
    assert np.array_equal(after[:, :, :3], before)  # the input's colour, untouched (not un-premultiplied)
    np.testing.assert_allclose(after[:, :, 3], expected_matte(before), rtol=0, atol=tolerance)


def test_a_matte_model_replaces_the_alpha_of_rgba_frames(tmp_path):
    src, before = one_frame(tmp_path, "png", "uint16", ("R", "G", "B", "A"))
    (out,) = infer_sequence(save(tmp_path, MatteOf(), ["R", "G", "B"], ["A"]), src, tmp_path / "out")
    spec, after = read(out)
    assert tuple(spec.channelnames) == ("R", "G", "B", "A")
    assert np.array_equal(after[:, :, :3], before[:, :, :3])
    np.testing.assert_allclose(after[:, :, 3], expected_matte(before[:, :, :3]), rtol=0, atol=1e-4)
    assert not np.allclose(after[:, :, 3], before[:, :, 3], atol=0.01)


def test_an_exr_layer_matte_is_added_as_its_own_channel(tmp_path):
    src, before = one_frame(tmp_path, "exr", "half", ("R", "G", "B", "Z"))
    (out,) = infer_sequence(save(tmp_path, MatteOf(), ["R", "G", "B"], ["matte.A"]), src, tmp_path / "out")
    spec, after = read(out)
    assert set(spec.channelnames) == {"R", "G", "B", "Z", "matte.A"} and str(spec.format) == "half"
    for name, index in (("R", 0), ("G", 1), ("B", 2), ("Z", 3)):
        assert np.array_equal(channel(spec, after, name), before[:, :, index]), name
    np.testing.assert_allclose(channel(spec, after, "matte.A"), expected_matte(before[:, :, :3]), rtol=1e-3, atol=1e-3)


def test_a_layer_matte_goes_into_the_alpha_of_a_format_without_layers(tmp_path, caplog):
    src, before = one_frame(tmp_path, "png", "uint8", ("R", "G", "B"))
    with caplog.at_level(logging.INFO, logger="trainer.data.write_like"):
        (out,) = infer_sequence(save(tmp_path, MatteOf(), ["R", "G", "B"], ["matte.A"]), src, tmp_path / "out")
    spec, after = read(out)
    assert tuple(spec.channelnames) == ("R", "G", "B", "A") and np.array_equal(after[:, :, :3], before)
    np.testing.assert_allclose(after[:, :, 3], expected_matte(before), rtol=0, atol=0.5 / 255 + 1e-6)
    assert "writing the model's matte.A into its A" in caplog.text


def test_a_colour_alpha_model_writes_its_colour_and_its_alpha(tmp_path):
    src, before = one_frame(tmp_path, "png", "uint16", ("R", "G", "B"))
    (out,) = infer_sequence(save(tmp_path, ColourAlpha(), ["R", "G", "B"], ["R", "G", "B", "A"]), src,
                            tmp_path / "out")
    spec, after = read(out)
    assert tuple(spec.channelnames) == ("R", "G", "B", "A")
    np.testing.assert_allclose(after[:, :, :3], before * 0.5 + 0.2, rtol=0, atol=1e-4)
    np.testing.assert_allclose(after[:, :, 3], before[:, :, 0], rtol=0, atol=1e-4)


def test_a_scale_2_matte_model_writes_2x_frames_with_the_matte(tmp_path):
    src, before = one_frame(tmp_path, "exr", "float", ("R", "G", "B"))
    (out,) = infer_sequence(save(tmp_path, MatteOf(2), ["R", "G", "B"], ["matte.A"], scale=2), src, tmp_path / "out")
    spec, after = read(out)
    assert (spec.width, spec.height) == (26, 18)
    nearest = np.repeat(np.repeat(expected_matte(before), 2, axis=0), 2, axis=1)
    np.testing.assert_allclose(channel(spec, after, "matte.A"), nearest, rtol=0, atol=1e-6)
    assert np.array_equal(channel(spec, after, "R"), np.repeat(np.repeat(before[:, :, 0], 2, axis=0), 2, axis=1))


def test_an_input_without_the_models_channels_is_refused_with_the_file_and_its_channels(tmp_path):
    src, _ = one_frame(tmp_path, "png", "uint8", ("R", "G", "B"))
    model = save(tmp_path, MatteOf(), ["R", "G", "B", "A"], ["matte.A"])
    with pytest.raises(DataError, match=r"plate\.1001\.png has no channel 'A' \(it has R, G, B\)"):
        infer_sequence(model, src, tmp_path / "out")


def test_a_jpeg_cannot_take_a_matte(tmp_path):
    src, _ = one_frame(tmp_path, "jpg", "uint8", ("R", "G", "B"))
    with pytest.raises(DataError, match=r"a jpeg file cannot hold an alpha"):
        infer_sequence(save(tmp_path, MatteOf(), ["R", "G", "B"], ["A"]), src, tmp_path / "out")


def test_colour_conversion_touches_only_rgb(tmp_path):
    """The model sees R, G, B in the working space; its matte comes back as it is (never converted)."""
    spec = ColourSpec("Linear Rec.709 (sRGB)", "ACEScct")
    src, before = one_frame(tmp_path, "exr", "float", ("R", "G", "B"))
    model = save(tmp_path, MatteOf(), ["R", "G", "B"], ["A"], colour=spec.to_dict())
    (out,) = infer_sequence(model, src, tmp_path / "out")
    out_spec, after = read(out)
    assert np.array_equal(after[:, :, :3], before)
    working = spec.to_working(before)
    np.testing.assert_allclose(channel(out_spec, after, "A"), expected_matte(working), rtol=1e-5, atol=1e-6)
    assert not np.allclose(expected_matte(working), expected_matte(before), atol=1e-3)  # the conversion mattered


def test_an_exported_matte_network_runs_end_to_end(tmp_path):
    """export_model's model.json tells infer the channels: an untrained matte network writes A = 0.5."""
    plan = ChannelPlan(("R", "G", "B"), ("A",))
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    export_model(paths, build_model("small", "v3", channels=plan), {"step": 0, "channels": plan.to_dict()},
                 onnx=False)
    assert model_channels(paths.model) == plan
    src, before = one_frame(tmp_path, "png", "uint8", ("R", "G", "B"))
    (out,) = infer_sequence(paths.model, src, tmp_path / "out")
    spec, after = read(out)
    assert np.array_equal(after[:, :, :3], before)
    assert np.all(np.abs(after[:, :, 3] - 0.5) <= 0.5 / 255 + 1e-6)


def test_model_channels_default_to_rgb_and_refuse_bad_lists(tmp_path):
    model = save(tmp_path, MatteOf(), ["R", "G", "B"], ["A"])
    (tmp_path / "run" / "model.json").write_text(json.dumps({"scale": 1}))
    assert model_channels(model) == ChannelPlan()
    (tmp_path / "run" / "model.json").write_text(json.dumps({"channels_out": "A"}))
    with pytest.raises(DataError, match=r"channels_out='A' must be a list of channel names"):
        model_channels(model)

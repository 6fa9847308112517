"""``cuetrain infer`` with an upres model (trainer.export.infer): frames written at 2x, same format and channels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import OpenImageIO as oiio
import pytest
import torch
import torch.nn.functional as F

from trainer.data.images import DataError, read_image
from trainer.export.formats import torchscript_bytes
from trainer.export.infer import infer_sequence
from trainer.learn.model import build_model


def write(path: Path, fmt: str, names: tuple[str, ...], h: int, w: int, seed: int) -> np.ndarray:
    spec = oiio.ImageSpec(w, h, len(names), fmt)
    spec.channelnames = names
    pixels = np.random.default_rng(seed).random((h, w, len(names))).astype(np.float32)
    out = oiio.ImageOutput.create(str(path))
    assert out.open(str(path), spec) and out.write_image(pixels) and out.close(), oiio.geterror()
    return pixels


def spec_of(path: Path) -> oiio.ImageSpec:
    inp = oiio.ImageInput.open(str(path))
    spec = oiio.ImageSpec(inp.spec())
    inp.close()
    return spec


@pytest.fixture()
def model_2x(tmp_path) -> Path:
    """An untrained v3 small model of scale 2 (it returns the bilinear 2x of its input) as model.pt."""
    path = tmp_path / "run" / "model.pt"
    path.parent.mkdir()
    path.write_bytes(torchscript_bytes(build_model("small", "v3", scale=2)))
    return path


@pytest.mark.parametrize("ext,fmt,names,tolerance", [
    ("png", "uint8", ("R", "G", "B", "A"), 0.5 / 255 + 1e-6),
    ("exr", "half", ("R", "G", "B", "A"), 2e-3),
])
def test_infer_with_a_scale_2_model_writes_2x_frames_of_the_same_format(tmp_path, model_2x, ext, fmt, names,
                                                                         tolerance):
    src = tmp_path / "in"
    src.mkdir()
    for number in (1001, 1002):
        write(src / f"plate.{number}.{ext}", fmt, names, 9, 13, number)
    written = infer_sequence(model_2x, src, tmp_path / "out")
    assert [p.name for p in written] == [f"plate.1001.{ext}", f"plate.1002.{ext}"]
    for out in written:
        spec = spec_of(out)
        assert (spec.width, spec.height, str(spec.format), tuple(spec.channelnames)) == (26, 18, fmt, names)
        x = torch.from_numpy(read_image(src / out.name)).permute(2, 0, 1)[None]
        expected = F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False)[0].permute(1, 2, 0)
        assert np.abs(read_image(out) - expected.numpy()).max() <= tolerance  # the untrained model: bilinear


class _Shrink(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., :-1, :]


def test_a_model_whose_output_is_not_a_whole_multiple_is_named(tmp_path):
    model = tmp_path / "model.pt"
    model.write_bytes(torchscript_bytes(_Shrink()))
    src = tmp_path / "in"
    src.mkdir()
    write(src / "plate.0001.png", "uint8", ("R", "G", "B"), 9, 13, 0)
    with pytest.raises(DataError, match=r"returned 13x8 for .*plate.0001.png \(13x9\)"):
        infer_sequence(model, src, tmp_path / "out")

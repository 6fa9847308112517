"""Inference outputs keep their input's format, bit depth, channels and metadata (trainer.data.write_like)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import OpenImageIO as oiio
import pytest

from trainer.data.write_like import LUMA_709, write_like
from trainer.data.images import DataError, read_image
from trainer.export.infer import select_frames


def make(path: Path, fmt: str, names: tuple[str, ...], bits: int = 0, scale: float = 1.0, **attrs) -> Path:
    """An image written with OIIO directly: 6x7, random values times ``scale``, the given attributes."""
    spec = oiio.ImageSpec(7, 6, len(names), fmt)
    spec.channelnames = names
    if bits:
        spec.attribute("oiio:BitsPerSample", bits)
    for key, value in attrs.items():
        spec.attribute(key.replace("__", ":"), value)
    pixels = (np.random.default_rng(len(names)).random((6, 7, len(names))) * scale).astype(np.float32)
    out = oiio.ImageOutput.create(str(path))
    assert out.open(str(path), spec) and out.write_image(pixels) and out.close(), oiio.geterror()
    return path


def spec_of(path: Path) -> tuple[oiio.ImageSpec, np.ndarray]:
    inp = oiio.ImageInput.open(str(path))
    spec = oiio.ImageSpec(inp.spec())
    pixels = inp.read_image(0, 0, 0, spec.nchannels, "float")
    inp.close()
    return spec, pixels


CASES = [  # name, format, channels, bits, scale, attributes, max error of the colour after the round trip
    ("plate.0001.exr", "half", ("R", "G", "B", "A"), 0, 3.0, {"compression": "piz", "cuetrain__shot": "sh010"}, 0),
    ("aov.0001.exr", "float", ("A", "B", "G", "R", "Z"), 0, 2.0, {"Copyright": "studio"}, 0),
    ("a.0001.png", "uint16", ("R", "G", "B"), 0, 1.0, {}, 0.5 / 65535 + 1e-7),
    ("b.0001.png", "uint8", ("R", "G", "B", "A"), 0, 1.0, {}, 0.5 / 255 + 1e-7),
    ("c.0001.tif", "uint8", ("R", "G", "B"), 0, 1.0, {"Artist": "me"}, 0.5 / 255 + 1e-7),
    ("d.0001.dpx", "uint16", ("R", "G", "B"), 10, 1.0, {}, 0.5 / 1023 + 1e-7),
]


@pytest.mark.parametrize("name,fmt,names,bits,scale,attrs,tolerance", CASES, ids=[c[0] for c in CASES])
def test_output_copies_format_channels_and_metadata(tmp_path, name, fmt, names, bits, scale, attrs, tolerance):
    source = make(tmp_path / name, fmt, names, bits, scale, **attrs)
    colour = read_image(source) * 0.5 + 0.1  # what a model returns
    out = tmp_path / "out" / name
    out.parent.mkdir()
    write_like(out, colour, source)
    (a, a_px), (b, b_px) = spec_of(source), spec_of(out)
    assert (str(b.format), b.width, b.height) == (fmt, 7, 6)
    assert tuple(b.channelnames) == tuple(a.channelnames) and set(b.channelnames) == set(names)  # EXR: sorted RGBA
    assert b.get_int_attribute("oiio:BitsPerSample", 0) == a.get_int_attribute("oiio:BitsPerSample", 0)
    for key, value in attrs.items():
        assert b.getattribute(key.replace("__", ":")) == a.getattribute(key.replace("__", ":")) is not None
    assert np.abs(read_image(out) - colour).max() <= max(tolerance, 1e-3 if fmt == "half" else 0)
    others = [i for i, n in enumerate(a.channelnames) if n not in "RGB"]
    assert np.array_equal(a_px[..., others], b_px[..., others])  # alpha, depth untouched


def test_values_above_one_survive_in_float_formats(tmp_path):
    source = make(tmp_path / "hdr.0001.exr", "half", ("R", "G", "B"), scale=8.0)
    write_like(tmp_path / "out.exr", read_image(source) * 2, source)
    assert read_image(tmp_path / "out.exr").max() > 8


def test_grey_input_gets_the_luminance(tmp_path):
    source = make(tmp_path / "grey.0001.png", "uint16", ("Y",))
    colour = np.random.default_rng(1).random((6, 7, 3)).astype(np.float32)
    write_like(tmp_path / "out.png", colour, source)
    spec, pixels = spec_of(tmp_path / "out.png")
    assert spec.nchannels == 1
    assert np.abs(pixels[..., 0] - colour @ LUMA_709).max() <= 0.5 / 65535 + 1e-6


def test_data_window_and_display_window_are_kept(tmp_path):
    spec = oiio.ImageSpec(7, 6, 3, "half")
    spec.x, spec.y, spec.full_width, spec.full_height = 3, 2, 20, 10
    path = tmp_path / "over.0001.exr"
    out = oiio.ImageOutput.create(str(path))
    assert out.open(str(path), spec) and out.write_image(np.ones((6, 7, 3), np.float32)) and out.close()
    write_like(tmp_path / "o.exr", np.zeros((6, 7, 3), np.float32), path)
    got, _ = spec_of(tmp_path / "o.exr")
    assert (got.x, got.y, got.width, got.height, got.full_width, got.full_height) == (3, 2, 7, 6, 20, 10)


def test_wrong_size_is_refused(tmp_path):
    source = make(tmp_path / "a.0001.png", "uint8", ("R", "G", "B"))
    with pytest.raises(ValueError, match="the output must have the input's size"):
        write_like(tmp_path / "o.png", np.zeros((5, 7, 3), np.float32), source)
    with pytest.raises(DataError, match="cannot read"):
        write_like(tmp_path / "o.png", np.zeros((6, 7, 3), np.float32), tmp_path / "missing.png")
    assert not (tmp_path / "o.png").exists()


def test_select_frames_takes_a_chunk():
    frames = {n: Path(f"p.{n}.exr") for n in (1001, 1002, 1004, 1005)}
    assert list(select_frames(frames, 1002, 1004)) == [1002, 1004]
    assert list(select_frames(frames, 1005, 1006)) == [1005]  # a chunk end past the last frame
    assert list(select_frames(frames)) == [1001, 1002, 1004, 1005]
    with pytest.raises(DataError, match="no input frame is in 1006-1010"):
        select_frames(frames, 1006, 1010)

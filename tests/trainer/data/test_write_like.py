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
    for shape in [(5, 7, 3), (12, 7, 3), (12, 15, 3), (6, 7), (18, 21, 4)]:  # not a whole multiple of 6x7 RGB
        with pytest.raises(ValueError, match=r"must be \(s\*6, s\*7, 3\) for a whole s >= 1"):
            write_like(tmp_path / "o.png", np.zeros(shape, np.float32), source)
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


@pytest.mark.parametrize("factor", [2, 4])
def test_upres_output_keeps_format_and_channels_and_resizes_alpha_bilinearly(tmp_path, factor):
    import torch
    import torch.nn.functional as F

    source = make(tmp_path / "b.0001.png", "uint8", ("R", "G", "B", "A"), Software="studio")
    colour = np.random.default_rng(2).random((6 * factor, 7 * factor, 3)).astype(np.float32)
    write_like(tmp_path / "o.png", colour, source)
    (a, a_px), (b, b_px) = spec_of(source), spec_of(tmp_path / "o.png")
    assert (str(b.format), b.width, b.height, tuple(b.channelnames)) == ("uint8", 7 * factor, 6 * factor,
                                                                          ("R", "G", "B", "A"))
    assert b.getattribute("Software") == "studio"
    assert np.abs(read_image(tmp_path / "o.png") - colour).max() <= 0.5 / 255 + 1e-7
    alpha = torch.from_numpy(a_px[..., 3])[None, None]
    expected = F.interpolate(alpha, scale_factor=factor, mode="bilinear", align_corners=False)[0, 0].numpy()
    assert np.abs(b_px[..., 3] - expected).max() <= 0.5 / 255 + 1e-6


def test_upres_exr_scales_both_windows_keeps_pixel_aspect_and_resizes_depth_by_nearest(tmp_path):
    spec = oiio.ImageSpec(7, 6, 5, "half")
    spec.channelnames = ("R", "G", "B", "A", "Z")
    spec.x, spec.y, spec.full_x, spec.full_y, spec.full_width, spec.full_height = 3, 2, -1, 0, 20, 10
    spec.attribute("PixelAspectRatio", 2.0)
    spec.attribute("compression", "piz")
    path = tmp_path / "over.0001.exr"
    pixels = np.random.default_rng(3).random((6, 7, 5)).astype(np.float32) * 4
    out = oiio.ImageOutput.create(str(path))
    assert out.open(str(path), spec) and out.write_image(pixels) and out.close()
    _, src_px = spec_of(path)
    write_like(tmp_path / "o.exr", np.zeros((12, 14, 3), np.float32), path)
    got, px = spec_of(tmp_path / "o.exr")
    assert (got.x, got.y, got.width, got.height) == (6, 4, 14, 12)
    assert (got.full_x, got.full_y, got.full_width, got.full_height) == (-2, 0, 40, 20)
    assert got.get_float_attribute("PixelAspectRatio") == 2.0 and got.getattribute("compression") == "piz"
    assert str(got.format) == "half" and tuple(got.channelnames) == ("R", "G", "B", "A", "Z")
    z = src_px[..., 4]
    assert np.array_equal(px[..., 4], z.repeat(2, axis=0).repeat(2, axis=1))  # nearest: no invented depth
    assert not px[..., :3].any()


def test_bilinear_upscale_equals_torch_interpolate():
    import torch
    import torch.nn.functional as F

    from trainer.data.write_like import bilinear_upscale, is_alpha

    img = np.random.default_rng(4).random((5, 9, 2)).astype(np.float32)
    for factor in (1, 2, 3, 4):
        expected = F.interpolate(torch.from_numpy(img).permute(2, 0, 1)[None], scale_factor=factor,
                                 mode="bilinear", align_corners=False)[0].permute(1, 2, 0).numpy()
        np.testing.assert_allclose(bilinear_upscale(img, factor), expected, rtol=0, atol=1e-6)
    assert [is_alpha(n) for n in ("A", "diffuse.A", "alpha", "Z", "R", "AO")] == [True, True, True, False, False, False]


# ----------------------------------------------------------------------------------------------
# Named channels (issue 40): the model's channels into the file's, added when it lacks them


def unassociated(path: Path) -> tuple[oiio.ImageSpec, np.ndarray]:
    """:func:`spec_of`, with alpha as stored (OIIO would otherwise premultiply a PNG's colour by it)."""
    config = oiio.ImageSpec()
    config.attribute("oiio:UnassociatedAlpha", 1)
    inp = oiio.ImageInput.open(str(path), config)
    spec = oiio.ImageSpec(inp.spec())
    pixels = inp.read_image(0, 0, 0, spec.nchannels, "float")
    inp.close()
    return spec, pixels


def test_a_grey_png_gets_the_matte_as_its_alpha(tmp_path):
    source = make(tmp_path / "grey.0001.png", "uint16", ("Y",))
    matte = np.random.default_rng(5).random((6, 7, 1)).astype(np.float32)
    write_like(tmp_path / "o.png", matte, source, channels=("A",))
    (a, a_px), (b, b_px) = spec_of(source), unassociated(tmp_path / "o.png")
    assert tuple(b.channelnames) == ("Y", "A") and b.alpha_channel == 1
    assert np.array_equal(b_px[..., 0], a_px[..., 0])
    assert np.abs(b_px[..., 1] - matte[..., 0]).max() <= 0.5 / 65535 + 1e-7


def test_an_exr_keeps_per_channel_types_when_a_layer_channel_is_added(tmp_path):
    spec = oiio.ImageSpec(7, 6, 4, "half")
    spec.channelnames = ("R", "G", "B", "Z")
    spec.channelformats = (oiio.HALF, oiio.HALF, oiio.HALF, oiio.FLOAT)
    path = tmp_path / "mixed.0001.exr"
    out = oiio.ImageOutput.create(str(path))
    assert out.open(str(path), spec) and out.write_image(np.ones((6, 7, 4), np.float32) * 0.25) and out.close()
    matte = np.full((6, 7, 1), 0.75, np.float32)
    write_like(tmp_path / "o.exr", matte, path, channels=("matte.A",))
    got, px = spec_of(tmp_path / "o.exr")
    formats = dict(zip(got.channelnames, map(str, got.channelformats)))
    assert formats == {"R": "half", "G": "half", "B": "half", "Z": "float", "matte.A": "half"}
    assert np.all(px[..., list(got.channelnames).index("matte.A")] == 0.75)
    assert np.all(px[..., list(got.channelnames).index("Z")] == 0.25)


def test_new_channels_go_after_their_layer():
    from trainer.data.write_like import add_channels

    spec = oiio.ImageSpec(2, 2, 5, "half")
    spec.channelnames = ("R", "G", "B", "matte.R", "Z")
    spec.alpha_channel, spec.z_channel = -1, 4
    pixels = np.arange(20, dtype=np.float32).reshape(2, 2, 5)
    grown, dest = add_channels(spec, pixels, ("matte.A", "A", "R"), Path("x.exr"))
    assert tuple(spec.channelnames) == ("R", "G", "B", "matte.R", "matte.A", "Z", "A") and spec.nchannels == 7
    assert dest == [4, 6, 0] and spec.alpha_channel == 6 and spec.z_channel == 5  # Z followed its channel
    assert np.array_equal(grown[..., [0, 1, 2, 3, 5]], pixels) and not grown[..., [4, 6]].any()


def test_channels_a_format_cannot_hold_are_refused(tmp_path):
    source = make(tmp_path / "a.0001.png", "uint8", ("R", "G", "B"))
    with pytest.raises(DataError, match=r"a png file cannot hold the channel 'matte.Z'.*infer on EXR"):
        write_like(tmp_path / "o.png", np.zeros((6, 7, 1), np.float32), source, channels=("matte.Z",))
    with pytest.raises(DataError, match=r"a png file cannot hold the channel 'depth'"):
        write_like(tmp_path / "o.png", np.zeros((6, 7, 1), np.float32), source, channels=("depth",))
    with pytest.raises(ValueError, match=r"must be \(s\*6, s\*7, 2\)"):
        write_like(tmp_path / "o.png", np.zeros((6, 7, 1), np.float32), source, channels=("R", "A"))
    assert not (tmp_path / "o.png").exists()


def test_rgb_channels_named_take_the_colour_path(tmp_path):
    source = make(tmp_path / "grey.0001.png", "uint16", ("Y",))
    values = np.random.default_rng(6).random((6, 7, 4)).astype(np.float32)
    write_like(tmp_path / "o.png", values, source, channels=("R", "G", "B", "A"))  # colour + alpha on a grey file
    spec, pixels = unassociated(tmp_path / "o.png")
    assert tuple(spec.channelnames) == ("Y", "A")
    assert np.abs(pixels[..., 0] - values[..., :3] @ LUMA_709).max() <= 0.5 / 65535 + 1e-6
    assert np.abs(pixels[..., 1] - values[..., 3]).max() <= 0.5 / 65535 + 1e-6


def test_output_factor_is_the_one_output_size_rule():
    from trainer.data.write_like import output_factor

    assert output_factor((9, 14), (9, 14, 3), 3) == 1 and output_factor((9, 14, 3), (36, 56, 3), 3) == 4
    assert output_factor((9, 14), (18, 29, 3), 3) == 0  # another aspect
    assert output_factor((9, 14), (4, 7, 3), 3) == 0  # fewer pixels
    assert output_factor((9, 14), (18, 28, 4), 3) == 0  # another channel count
    assert output_factor((0, 14), (0, 14, 3), 3) == 0 and output_factor((9, 14), (9, 14), 3) == 0

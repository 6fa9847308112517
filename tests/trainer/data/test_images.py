"""trainer.data.images: decoding, channel mapping, atomic writes, sequence pairing and their errors.

Reference files are written with OpenImageIO or OpenEXR directly (not with write_image), so the
reader is checked against known stored values. Images are a few pixels wide to keep tests fast.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import OpenEXR
import OpenImageIO as oiio
import pytest

from trainer.data import images
from trainer.data.images import DataError, read_image, write_image
from trainer.data.sequences import FramePair, find_sequence, frame_number, load_pairs, pair_frames


def oiio_write(path: Path, pixels: np.ndarray, pixel_type: str, **attributes) -> Path:
    """Write (H, W, C) ``pixels`` as stored values of ``pixel_type`` with OIIO directly."""
    height, width, channels = pixels.shape
    spec = oiio.ImageSpec(width, height, channels, pixel_type)
    for name, value in attributes.items():
        spec.attribute(name, value)
    out = oiio.ImageOutput.create(str(path))
    assert out.open(str(path), spec), out.geterror()
    assert out.write_image(pixels), out.geterror()
    out.close()
    return path


def stored_spec(path: Path) -> oiio.ImageSpec:
    inp = oiio.ImageInput.open(str(path))
    try:
        return inp.spec()
    finally:
        inp.close()


def exr_write(path: Path, channels: dict[str, np.ndarray]) -> Path:
    """Write an EXR with the OpenEXR bindings (independent of OIIO's writer)."""
    header = {"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}
    OpenEXR.File(header, channels).write(str(path))
    return path


def ramp(height: int = 3, width: int = 4) -> np.ndarray:
    """(H, W, 3) float32 smooth values in 0..1, different per channel."""
    values = np.linspace(0.0, 1.0, height * width * 3, dtype=np.float32)
    return values.reshape(height, width, 3)


# ----------------------------------------------------------------------------------------------
# Reading formats


def test_exr_half_reads_exactly(tmp_path):
    stored = (ramp() * 4 - 1).astype(np.float16)  # includes negatives and values above 1
    path = exr_write(tmp_path / "h.exr", {"RGB": stored})
    assert stored_spec(path).format == "half"
    got = read_image(path)
    assert got.dtype == np.float32 and got.shape == (3, 4, 3)
    np.testing.assert_array_equal(got, stored.astype(np.float32))


def test_exr_float_reads_exactly(tmp_path):
    stored = ramp() * 1000.123 - 3.5
    planes = {c: np.ascontiguousarray(stored[..., i]) for i, c in enumerate("RGB")}
    path = exr_write(tmp_path / "f.exr", planes)
    assert stored_spec(path).format == "float"
    np.testing.assert_array_equal(read_image(path), stored)


def test_exr_reads_data_window_not_display_window(tmp_path):
    spec = oiio.ImageSpec(4, 3, 3, "half")
    spec.x, spec.y, spec.full_x, spec.full_y, spec.full_width, spec.full_height = 2, 1, 0, 0, 10, 8
    path = tmp_path / "dw.exr"
    out = oiio.ImageOutput.create(str(path))
    assert out.open(str(path), spec)
    out.write_image(ramp())
    out.close()
    got = read_image(path)
    assert got.shape == (3, 4, 3)  # the stored 4x3 data window, not the 10x8 display window
    np.testing.assert_array_equal(got, ramp().astype(np.float16).astype(np.float32))


def test_png_8bit_values(tmp_path):
    codes = np.array([[[0, 128, 255], [1, 254, 64]]], dtype=np.uint8)
    path = oiio_write(tmp_path / "a.png", codes, "uint8")
    np.testing.assert_allclose(read_image(path), codes / np.float32(255), rtol=0, atol=1e-7)


def test_png_16bit_values(tmp_path):
    codes = np.array([[[65535, 32768, 0]]], dtype=np.uint16)
    got = read_image(oiio_write(tmp_path / "a.png", codes, "uint16"))
    assert got[0, 0, 0] == 1.0
    assert got[0, 0, 1] == pytest.approx(0.50000763, abs=1e-8)
    assert got[0, 0, 2] == 0.0


def test_tiff_16bit_round_trip(tmp_path):
    path = tmp_path / "a.tif"
    write_image(path, ramp())
    assert stored_spec(path).format == "uint16"
    np.testing.assert_allclose(read_image(path), ramp(), rtol=0, atol=0.5 / 65535 + 1e-7)


def test_jpeg_round_trip_is_close(tmp_path):
    path = tmp_path / "a.jpg"
    flat = np.full((8, 8, 3), [0.2, 0.5, 0.8], dtype=np.float32)
    write_image(path, flat)
    assert stored_spec(path).format == "uint8"
    np.testing.assert_allclose(read_image(path), flat, atol=0.02)


def test_dpx_10bit_round_trip(tmp_path):
    path = tmp_path / "a.dpx"
    write_image(path, ramp())
    spec = stored_spec(path)
    assert spec.get_int_attribute("oiio:BitsPerSample") == 10
    got = read_image(path)
    np.testing.assert_allclose(got, ramp(), rtol=0, atol=0.5 / 1023 + 1e-7)
    np.testing.assert_allclose(got * 1023, np.rint(ramp() * 1023), atol=1e-4)  # rounded 10-bit codes


# ----------------------------------------------------------------------------------------------
# Channels


def test_rgba_png_drops_alpha(tmp_path):
    rgba = np.concatenate([ramp(), np.full((3, 4, 1), 0.25, np.float32)], axis=2)
    # Stored unassociated, as PNG defines; the colour must not come back multiplied by alpha.
    path = oiio_write(tmp_path / "a.png", rgba, "uint16", **{"oiio:UnassociatedAlpha": 1})
    np.testing.assert_allclose(read_image(path), ramp(), atol=0.5 / 65535 + 1e-7)


def test_exr_with_extra_channels_uses_named_rgb(tmp_path, caplog):
    ones, zeros = np.ones((3, 4), np.float32), np.zeros((3, 4), np.float32)
    channels = {"A": ones, "B": ones * 3, "G": ones * 2, "R": ones * 1, "Z": zeros, "N.x": zeros}
    path = exr_write(tmp_path / "aov.exr", channels)
    with caplog.at_level(logging.DEBUG, logger="trainer.data.images"):
        got = read_image(path)
    assert got.shape == (3, 4, 3)
    np.testing.assert_array_equal(got[0, 0], [1, 2, 3])
    assert any("dropping" in r.message and "Z" in r.message for r in caplog.records)


def test_grey_is_replicated(tmp_path):
    grey = np.array([[[0], [32768], [65535]]], dtype=np.uint16)
    got = read_image(oiio_write(tmp_path / "g.tif", grey, "uint16"))
    assert got.shape == (1, 3, 3)
    np.testing.assert_array_equal(got[..., 0], got[..., 1])
    np.testing.assert_array_equal(got[..., 0], got[..., 2])
    np.testing.assert_allclose(got[0, :, 0], [0, 32768 / 65535, 1], atol=1e-7)


def test_grey_alpha_replicates_grey_and_drops_alpha(tmp_path):
    ya = np.array([[[51, 255], [204, 0]]], dtype=np.uint8)
    path = oiio_write(tmp_path / "ya.png", ya, "uint8")
    assert stored_spec(path).nchannels == 2
    got = read_image(path)
    np.testing.assert_allclose(got[0, 0], [0.2] * 3, atol=1e-6)
    np.testing.assert_allclose(got[0, 1], [0.8] * 3, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Bad files


def test_garbage_file_names_file(tmp_path):
    path = tmp_path / "x.0001.png"
    path.write_bytes(b"this is not a png" * 8)
    with pytest.raises(DataError, match=r"x\.0001\.png.*re-render or remove it"):
        read_image(path)


def test_truncated_file_names_file(tmp_path):
    noise = np.random.default_rng(0).random((32, 32, 3), np.float32)
    path = oiio_write(tmp_path / "t.0002.png", noise, "uint8")
    path.write_bytes(path.read_bytes()[:-400])
    with pytest.raises(DataError, match=r"t\.0002\.png") as error:
        read_image(path)
    assert "re-render or remove it" in str(error.value)


def test_missing_file_is_data_error(tmp_path):
    with pytest.raises(DataError, match="nope.exr"):
        read_image(tmp_path / "nope.exr")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused(tmp_path, bad):
    stored = ramp()
    stored[1, 2, 0] = bad
    path = exr_write(tmp_path / "n.0007.exr", {"RGB": stored})
    with pytest.raises(DataError, match=r"n\.0007\.exr has 1 NaN or infinite"):
        read_image(path)


# ----------------------------------------------------------------------------------------------
# Writing


def test_write_exr_is_half_by_default_and_exact(tmp_path):
    values = (ramp() * 8 - 2).astype(np.float16).astype(np.float32)
    path = tmp_path / "w.exr"
    write_image(path, values)
    assert stored_spec(path).format == "half"
    np.testing.assert_array_equal(read_image(path), values)


def test_write_exr_like_float_keeps_float(tmp_path):
    like = exr_write(tmp_path / "like.exr", {c: np.zeros((2, 2), np.float32) for c in "RGB"})
    values = ramp() * 1000.123
    path = tmp_path / "w.exr"
    write_image(path, values, like=like)
    assert stored_spec(path).format == "float"
    np.testing.assert_array_equal(read_image(path), values)


def test_write_png_bit_depth_follows_like(tmp_path):
    write_image(tmp_path / "eight.png", ramp())
    assert stored_spec(tmp_path / "eight.png").format == "uint8"
    like = oiio_write(tmp_path / "like.png", np.zeros((1, 1, 3), np.uint16), "uint16")
    write_image(tmp_path / "sixteen.png", ramp(), like=like)
    assert stored_spec(tmp_path / "sixteen.png").format == "uint16"
    np.testing.assert_allclose(read_image(tmp_path / "sixteen.png"), ramp(), atol=0.5 / 65535 + 1e-7)


def test_write_integer_formats_clip_and_round(tmp_path):
    values = np.array([[[-0.5, 0.5, 2.0], [np.nan, 1 / 255, 0.6 / 255]]], dtype=np.float32)
    path = tmp_path / "c.png"
    write_image(path, values)
    inp = oiio.ImageInput.open(str(path))
    codes = inp.read_image(0, 0, 0, 3, "uint8")
    inp.close()
    np.testing.assert_array_equal(codes[0], [[0, 128, 255], [0, 1, 1]])


def test_write_rejects_bad_shape_and_extension(tmp_path):
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        write_image(tmp_path / "a.png", np.zeros((2, 2, 4), np.float32))
    with pytest.raises(ValueError, match="unknown extension"):
        write_image(tmp_path / "a.gif", ramp())


def test_write_is_atomic_on_failure(tmp_path, monkeypatch):
    path = tmp_path / "sheet.png"
    write_image(path, ramp())
    before = path.read_bytes()

    def half_written(temp: Path, spec, pixels) -> None:
        temp.write_bytes(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(images, "write_oiio", half_written)
    with pytest.raises(OSError, match="disk full"):
        write_image(path, np.zeros((3, 4, 3), np.float32))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sheet.png"]  # no temp file left


def test_write_leaves_no_temp_file_and_replaces(tmp_path):
    path = tmp_path / "w.0001.exr"
    write_image(path, ramp())
    write_image(path, ramp() * 2)
    assert [p.name for p in tmp_path.iterdir()] == ["w.0001.exr"]
    np.testing.assert_array_equal(read_image(path), (ramp() * 2).astype(np.float16).astype(np.float32))


# ----------------------------------------------------------------------------------------------
# Sequences


@pytest.mark.parametrize("name, frame", [
    ("plate.0101.exr", 101),
    ("shot_v002.0042.png", 42),
    ("/shows/ep12/v3/plate.0007.exr", 7),
    ("render_1080p_v2_0013.tif", 13),
    ("frame5.jpg", 5),
    ("plate.exr", None),
    ("/shows/ep12/plate.exr", None),
    ("plate.1.png", 1),
    ("plate.001.png", 1),
    ("a.mp4", None),
])
def test_frame_number(name, frame):
    assert frame_number(name) == frame


def touch(folder: Path, *names: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"")


def test_find_sequence_indexes_by_frame(tmp_path):
    touch(tmp_path / "in", "p.0003.exr", "p.0001.EXR", "p.0002.Png", ".p.0004.exr", "._p.0001.exr",
          "notes.txt", "Thumbs.db")
    (tmp_path / "in" / "sub.0009.exr").mkdir()
    found = find_sequence(tmp_path / "in")
    assert list(found) == [1, 2, 3]
    assert found[1].name == "p.0001.EXR"


def test_find_sequence_missing_folder(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        find_sequence(tmp_path / "nowhere")


def test_find_sequence_not_a_folder(tmp_path):
    touch(tmp_path, "p.0001.exr")
    with pytest.raises(DataError, match="is not a folder"):
        find_sequence(tmp_path / "p.0001.exr")


def test_find_sequence_empty_folder(tmp_path):
    touch(tmp_path / "empty", "readme.txt")
    with pytest.raises(DataError, match="holds no images"):
        find_sequence(tmp_path / "empty")


def test_find_sequence_image_without_frame_number(tmp_path):
    touch(tmp_path, "p.0001.png", "slate.png")
    with pytest.raises(DataError, match=r"slate\.png has no frame number"):
        find_sequence(tmp_path)


def test_find_sequence_duplicate_frame_numbers_are_listed(tmp_path):
    touch(tmp_path, "plate.1.png", "plate.001.png", "plate.2.png", "plate.0002.exr", "plate.3.png")
    with pytest.raises(DataError) as error:
        find_sequence(tmp_path)
    message = str(error.value)
    for name in ("plate.1.png", "plate.001.png", "plate.2.png", "plate.0002.exr"):
        assert name in message
    assert "plate.3.png" not in message


def test_pair_frames_sorted(tmp_path):
    touch(tmp_path / "in", "i.0010.exr", "i.0002.exr", "i.0003.exr")
    touch(tmp_path / "gt", "g.0003.png", "g.0010.png", "g.0002.png")
    pairs = pair_frames(tmp_path / "in", tmp_path / "gt")
    assert [p.frame for p in pairs] == [2, 3, 10]
    assert pairs[0] == FramePair(2, tmp_path / "in" / "i.0002.exr", tmp_path / "gt" / "g.0002.png")


def test_pair_frames_lists_unpaired_on_each_side(tmp_path):
    touch(tmp_path / "in", *(f"i.{f:04d}.exr" for f in [1, 2, 12, 13, 20, 21, 22, 23]))
    touch(tmp_path / "gt", *(f"g.{f:04d}.exr" for f in [1, 2, 5]))
    with pytest.raises(DataError) as error:
        pair_frames(tmp_path / "in", tmp_path / "gt")
    message = str(error.value)
    assert f"frames 12, 13, 20-23 are in Input {tmp_path / 'in'} but not in Ground Truth {tmp_path / 'gt'}" \
        in message
    assert f"frame 5 is in Ground Truth {tmp_path / 'gt'} but not in Input {tmp_path / 'in'}" in message


# ----------------------------------------------------------------------------------------------
# Loading pairs


def make_pair(folder: Path, frame: int, input_size: tuple[int, int], target_size: tuple[int, int],
              scale: float = 1.0) -> FramePair:
    """Write an Input PNG and Ground Truth EXR of the given (H, W) sizes."""
    folder.mkdir(exist_ok=True)
    source, target = folder / f"in.{frame:04d}.png", folder / f"gt.{frame:04d}.exr"
    write_image(source, ramp(*input_size))
    write_image(target, ramp(*target_size) * scale)
    return FramePair(frame, source, target)


def test_load_pairs_float16(tmp_path):
    pairs = [make_pair(tmp_path, 1, (3, 4), (3, 4), scale=2.0), make_pair(tmp_path, 2, (3, 4), (3, 4))]
    loaded = load_pairs(pairs)
    assert len(loaded) == 2
    for source, target in loaded:
        assert source.dtype == target.dtype == np.float16
        assert source.shape == target.shape == (3, 4, 3)
    np.testing.assert_array_equal(loaded[0][1], (ramp() * 2).astype(np.float16))


def test_load_pairs_input_target_size_mismatch(tmp_path):
    pair = make_pair(tmp_path, 7, (3, 4), (4, 4))
    with pytest.raises(DataError) as error:
        load_pairs([pair])
    message = str(error.value)
    assert str(pair.input) in message and "4x3" in message
    assert str(pair.target) in message and "4x4" in message


def test_load_pairs_frame_size_differs_from_first(tmp_path):
    pairs = [make_pair(tmp_path, 1, (3, 4), (3, 4)), make_pair(tmp_path, 2, (2, 5), (2, 5))]
    with pytest.raises(DataError, match=r"frame 2 .*in\.0002\.png.* is 5x2 but the first frame 1 .* is 4x3"):
        load_pairs(pairs)


def test_load_pairs_refuses_float16_overflow(tmp_path):
    pair = make_pair(tmp_path, 1, (3, 4), (3, 4))
    write_image(pair.target, ramp() * 1e6, like=exr_write(tmp_path / "f.exr", {"RGB": ramp()}))
    with pytest.raises(DataError, match=r"gt\.0001\.exr has values beyond the float16 range"):
        load_pairs([pair])


def test_load_pairs_empty():
    with pytest.raises(DataError, match="no frame pairs"):
        load_pairs([])


def test_identity_warning_same_folder_identical_frames_and_real_pairs(tmp_path):
    import numpy as np

    from trainer.data.sequences import identity_warning

    a = np.zeros((4, 4, 3), np.float16)
    b = np.ones((4, 4, 3), np.float16)
    assert "same folder" in identity_warning(tmp_path, tmp_path / ".", [(a, b)])
    assert "equals its Ground Truth" in identity_warning(tmp_path / "in", tmp_path / "gt", [(a, a.copy()), (b, b)])
    assert identity_warning(tmp_path / "in", tmp_path / "gt", [(a, a), (a, b)]) is None


def _exr_at(path: Path, x: int, y: int, width: int, height: int) -> Path:
    """An RGB half EXR whose data window starts at (x, y) inside a 16x16 display window."""
    path.parent.mkdir(parents=True, exist_ok=True)
    spec = oiio.ImageSpec(width, height, 3, "half")
    spec.x, spec.y, spec.full_x, spec.full_y, spec.full_width, spec.full_height = x, y, 0, 0, 16, 16
    out = oiio.ImageOutput.create(str(path))
    assert out.open(str(path), spec)
    out.write_image(ramp(height, width))
    out.close()
    return path


@pytest.mark.parametrize("scale, inp, tgt, ok", [
    (1, (2, 1), (2, 1), True), (1, (0, 0), (2, 1), False), (2, (1, 1), (2, 2), True), (2, (1, 1), (1, 1), False)])
def test_data_windows_must_start_where_the_inputs_does(tmp_path, scale, inp, tgt, ok):
    """Same sizes, shifted origins: the pixels read would not line up, so the pair is refused naming both."""
    from trainer.data.sequences import load_pairs, pair_frames
    from trainer.data.shot import list_shot

    a = _exr_at(tmp_path / "in" / "plate.1001.exr", *inp, 4, 3)
    b = _exr_at(tmp_path / "gt" / "plate.1001.exr", *tgt, 4 * scale, 3 * scale)
    pairs = pair_frames(tmp_path / "in", tmp_path / "gt")
    if ok:
        assert load_pairs(pairs, scale=scale)[0][1].shape == (3 * scale, 4 * scale, 3)
        assert list_shot(str(tmp_path / "in"), str(tmp_path / "gt"), scale=scale).width == 4
        return
    (x, y), (tx, ty) = inp, tgt
    message = (f"frame 1001: Input {a} has its data window at ({x},{y})-({x + 3},{y + 2}) but Ground Truth {b} at "
               f"({tx},{ty})-({tx + 4 * scale - 1},{ty + 3 * scale - 1}); the Ground Truth's must start at "
               f"({scale * x},{scale * y})")
    for read in (lambda: load_pairs(pairs, scale=scale),
                 lambda: list_shot(str(tmp_path / "in"), str(tmp_path / "gt"), scale=scale)):
        with pytest.raises(DataError) as info:
            read()
        assert str(info.value).startswith(message) and "write both with the same data window" in str(info.value)

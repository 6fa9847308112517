"""Image I/O for training data: reading frames by channel, writing them (no torch here).

Pixels are ``(H, W, 3)`` float32 arrays, rows top to bottom, linear values exactly as stored: integer
formats read as ``0..1`` (value / max code), float EXRs as written (may exceed 1 or go below 0). No
colour transform is applied; Input and Ground Truth must already share a colour space.

Reading goes through OpenImageIO. Channels are mapped to RGB explicitly:

* 1 channel (grey, ``Y``): replicated to R, G and B.
* 2 channels (``Y`` + ``A``): Y replicated, alpha dropped.
* 3 channels: taken as R, G, B (by the names ``R``, ``G``, ``B`` when all three are present,
  otherwise in stored order).
* 4 or more: the channels named ``R``, ``G``, ``B`` (falling back to the first three); alpha and
  any extra channels (AOVs, depth) are dropped, logged once per channel layout at DEBUG.

That is the default plan (RGB in, RGB out). A run that names its channels (``--input-channels``,
``--target-channels``: ``trainer.core.channels``) reads them by name instead (:func:`read_channels`):
``(H, W, len(names))`` in the named order, a missing channel refused naming the file and what it has.

Colour values with alpha are read as stored: OpenImageIO would premultiply the colour of
unassociated-alpha files (PNG, TIFF) by their alpha on read, which is turned off here
(``oiio:UnassociatedAlpha``), so a transparent PNG pixel keeps its colour. EXR colour is
premultiplied in the file already and is read unchanged.

Only subimage 0 (the first part of a multi-part EXR) at full resolution is read. For an EXR whose
data window differs from its display window, the *data window* is read: the array covers exactly
the stored pixels, and the display window (overscan or crop) is ignored. Input and Ground Truth data
windows must line up: the Ground Truth's origin ``--scale`` times the Input's (the same at scale 1) and its size
``--scale`` times the Input's, else the pairs would train misaligned (``trainer.data.sequences.check_pair_origin``,
``check_pair_size``).

Sequences (a folder of files ``name.<frame>.<ext>``), pairing an Input sequence with its Ground Truth, loading the
pairs and the identity check are :mod:`trainer.data.sequences`'.
"""

from __future__ import annotations

import functools
import logging
import os
import uuid
from pathlib import Path
from typing import Sequence

import numpy as np
import OpenImageIO as oiio

from trainer.core.channels import RGB, is_alpha
from trainer.core.exitcodes import ExitCode

log = logging.getLogger(__name__)

#: File extensions (lower case) that ``trainer.data.sequences.find_sequence`` treats as images.
IMAGE_EXTENSIONS = (".exr", ".png", ".tif", ".tiff", ".jpg", ".jpeg", ".dpx")



class DataError(ValueError):
    """Bad training data; the message names the path(s) and the fix (exit code 2)."""

    exit_code = int(ExitCode.USAGE)


# ----------------------------------------------------------------------------------------------
# Reading


def read_image(path: str | Path) -> np.ndarray:
    """Decode one image to RGB (channel mapping and EXR data window: see the module docstring).

    Returns:
        (H, W, 3) float32, linear values as stored (0..1 for integer formats; EXR may exceed 1).

    Raises:
        DataError: the file is missing, not an image, corrupt or truncated (the message carries
            OpenImageIO's error), is a deep image, or holds NaN/inf values (training would diverge).
    """
    return read_channels(path, RGB)


def read_channels(path: str | Path, names: Sequence[str], option: str = "--input-channels") -> np.ndarray:
    """Decode the channels ``names`` of one image, in that order, by the file's own channel names
    (OpenImageIO ``spec.channelnames``: ``R``, ``A``, an EXR layer's ``matte.A``); data window as :func:`read_image`.

    ``names`` = ``("R", "G", "B")`` (the default plan) maps channels exactly as :func:`read_image` does (grey
    replicated, unnamed channels in stored order); any other list picks each channel by name (:func:`pick_channels`).

    Args:
        option: the option that named the channels (``--input-channels`` or ``--target-channels``), for the error.

    Returns:
        (H, W, len(names)) float32, linear values as stored (alpha as stored: never premultiplied).

    Raises:
        DataError: as :func:`read_image`, and a channel the file does not have (the file, the channel, the channels
            it has and the fix).
    """
    path = Path(path)
    config = oiio.ImageSpec()
    config.attribute("oiio:UnassociatedAlpha", 1)  # don't premultiply PNG/TIFF colour by alpha
    inp = oiio.ImageInput.open(str(path), config)
    if inp is None:
        raise DataError(f"cannot read image {path}: {oiio.geterror() or 'unknown error'}; "
                        "re-render or remove it")
    try:
        spec = inp.spec()
        if spec.deep:
            raise DataError(f"{path} is a deep image, which training cannot use; "
                            "flatten it to a regular image")
        pixels = _read_pixels(inp, spec, path)
    finally:
        inp.close()
    picked = np.ascontiguousarray(pick_channels(pixels, tuple(spec.channelnames), names, path, option),
                                  dtype=np.float32)
    if not np.isfinite(picked).all():
        bad = int(np.count_nonzero(~np.isfinite(picked)))
        raise DataError(f"{path} has {bad} NaN or infinite values, which would make training diverge; "
                        "fix the render (or clamp/remove them in comp) and write the frame again")
    return picked


def check_channels(path: str | Path, have: Sequence[str], names: Sequence[str], option: str) -> None:
    """Refuse a file that lacks a channel of ``names`` (``have``: its ``spec.channelnames``). RGB (``names`` =
    R, G, B) is always there: :func:`to_rgb` maps any file to it.

    Raises:
        DataError: naming the file, the missing channel(s), the channels it has and the fix (``option``; for a
            missing alpha, writing the matte into the file's alpha).
    """
    if tuple(names) == RGB:
        return
    missing = [n for n in names if n not in have]
    if not missing:
        return
    which = f"channel {missing[0]!r}" if len(missing) == 1 else f"channels {', '.join(map(repr, missing))}"
    alpha = ", or write the matte into its alpha" if any(is_alpha(n) for n in missing) else ""
    raise DataError(f"{path} has no {which} (it has {', '.join(have) or 'no named channels'}): pick channels it "
                    f"has with {option}{alpha}")


def pick_channels(pixels: np.ndarray, have: Sequence[str], names: Sequence[str], path: str | Path,
                  option: str) -> np.ndarray:
    """``pixels`` (H, W, C) with channel names ``have`` -> (H, W, len(names)) in the order of ``names``: RGB by
    :func:`to_rgb`'s rules, any other list by name. Raises DataError: :func:`check_channels`."""
    if tuple(names) == RGB:
        return to_rgb(pixels, tuple(have))
    check_channels(path, have, names, option)
    return pixels[:, :, [list(have).index(n) for n in names]]


def _read_pixels(inp: oiio.ImageInput, spec: oiio.ImageSpec, path: Path) -> np.ndarray:
    """(H, W, C) float32 of subimage 0's data window, integer codes as code / max code."""
    bits = spec.get_int_attribute("oiio:BitsPerSample", 0)
    packed = spec.format == "uint16" and 0 < bits < 16  # 10/12-bit DPX, 12-bit TIFF
    # OIIO widens packed codes to 16 bits by bit replication; its float would be that / 65535,
    # a little off code / (2**bits - 1), so take the 16-bit values and shift the code back out.
    pixels = inp.read_image(0, 0, 0, spec.nchannels, "uint16" if packed else "float")
    if not isinstance(pixels, np.ndarray):
        raise DataError(f"cannot decode image {path}: {inp.geterror() or 'unknown error'}; "
                        "the file is corrupt or truncated: re-render or remove it")
    pixels = pixels.reshape(spec.height, spec.width, spec.nchannels)
    if packed:
        return (pixels >> (16 - bits)).astype(np.float32) / np.float32(2**bits - 1)
    return pixels


def to_rgb(pixels: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """Pick the colour channels: ``pixels`` (H, W, C) with channel ``names`` -> (H, W, 3), by the module's rules.

    One or two channels (Y, Y + A) repeat Y into R, G, B; files with R, G and B named take them; otherwise
    the first three channels. Dropped channels are logged once per set of names.
    """
    count = pixels.shape[2]
    if count in (1, 2):
        if count == 2:
            _log_dropped(names, names[1:])
        return np.repeat(pixels[:, :, :1], 3, axis=2)  # Y -> R, G, B
    lookup = {name: index for index, name in enumerate(names)}
    if all(c in lookup for c in "RGB"):
        picked = [lookup["R"], lookup["G"], lookup["B"]]
    else:
        picked = [0, 1, 2]
    if count > 3:
        _log_dropped(names, tuple(n for i, n in enumerate(names) if i not in picked))
    return pixels[:, :, picked]


@functools.lru_cache(maxsize=None)
def _log_dropped(names: tuple[str, ...], dropped: tuple[str, ...]) -> None:
    """Log once per channel layout which channels reading ignores."""
    log.debug("images with channels %s: using RGB, dropping %s", ", ".join(names), ", ".join(dropped))


# ----------------------------------------------------------------------------------------------
# Writing


def write_image(path: str | Path, rgb: np.ndarray, like: str | Path | None = None) -> None:
    """Write an (H, W, 3) float image, atomically.

    The format follows the extension: ``.exr`` half float (or 32-bit float if ``like`` stores
    32-bit float), zip-compressed; ``.png`` 8-bit (16-bit if ``like`` stores more than 8 bits per
    sample); ``.tif``/``.tiff`` 16-bit; ``.jpg``/``.jpeg`` 8-bit at quality 95; ``.dpx`` 10-bit.
    Integer formats clip to 0..1 (NaN -> 0) and round to the nearest code value. The image goes
    to a hidden temp file in the same folder which then replaces ``path`` (``os.replace``), so a
    reader never sees a half-written file and on error ``path`` is left as it was.

    Args:
        path: destination; its folder must exist.
        rgb: (H, W, 3) array, linear values (any float dtype).
        like: an existing image whose pixel type to follow (EXR and PNG only).

    Raises:
        ValueError: ``rgb`` is not (H, W, 3) or the extension is not one listed above.
        DataError: ``like`` cannot be read.
        OSError: OpenImageIO failed to write (the message names the file).
    """
    path = Path(path)
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"write_image({path}) needs an (H, W, 3) array, got shape {rgb.shape}")
    ext = path.suffix.lower()
    if ext not in IMAGE_EXTENSIONS:
        raise ValueError(f"cannot write {path}: unknown extension {path.suffix!r}; "
                         f"use one of {', '.join(IMAGE_EXTENSIONS)}")
    spec, pixels = _output_spec(ext, rgb, like)
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp{path.suffix}")
    try:
        write_oiio(temp, spec, pixels)
        os.chmod(temp, 0o640)  # trainer.record.rundir.FILE_MODE: group-readable, never world-writable
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)  # only left behind on error


def _output_spec(ext: str, rgb: np.ndarray, like: str | Path | None) -> tuple[oiio.ImageSpec, np.ndarray]:
    """The ImageSpec for ``ext`` and the pixel array (quantized for 8/16-bit formats) to hand OIIO."""
    height, width = rgb.shape[:2]
    like_format = _pixel_type(like) if like is not None else None
    bits = 0
    if ext == ".exr":
        pixel_type = "float" if like_format in ("float", "double") else "half"
    elif ext == ".png":
        pixel_type = "uint8" if like_format in (None, "uint8", "int8") else "uint16"
    elif ext in (".tif", ".tiff"):
        pixel_type = "uint16"
    elif ext in (".jpg", ".jpeg"):
        pixel_type = "uint8"
    else:  # .dpx: 10 bits per sample in 16-bit containers
        pixel_type, bits = "uint16", 10
    spec = oiio.ImageSpec(width, height, 3, pixel_type)
    if bits:
        spec.attribute("oiio:BitsPerSample", bits)
    if ext in (".jpg", ".jpeg"):
        spec.attribute("Compression", "jpeg:95")
    if ext == ".exr":
        spec.attribute("compression", "zip")
        return spec, np.ascontiguousarray(rgb, dtype=np.float32)
    clipped = np.clip(np.nan_to_num(rgb.astype(np.float32), nan=0.0), 0.0, 1.0)
    if bits:
        # OIIO truncates 16-bit values to 10 bits (a shift), so round to the 10-bit code here and
        # hand it over as the 16-bit value that shifts back to exactly that code.
        codes = np.rint(clipped * 1023.0)
        return spec, np.rint(codes * (65535.0 / 1023.0)).astype(np.uint16)
    top = 255 if pixel_type == "uint8" else 65535
    return spec, np.rint(clipped * top).astype(pixel_type)


def _pixel_type(like: str | Path) -> str:
    """Stored pixel type name of ``like`` ("uint8", "uint16", "half", "float", ...)."""
    inp = oiio.ImageInput.open(str(like))
    if inp is None:
        raise DataError(f"cannot read {like} to copy its pixel type: {oiio.geterror()}")
    try:
        return str(inp.spec().format)
    finally:
        inp.close()


def write_oiio(path: Path, spec: oiio.ImageSpec, pixels: np.ndarray) -> None:
    """Write ``pixels`` (H, W, C) to ``path`` with OIIO as ``spec`` describes; raises OSError on failure.

    Not atomic by itself: callers write to a temp file and rename (:func:`write_image`,
    :func:`trainer.data.write_like.write_like`).
    """
    out = oiio.ImageOutput.create(str(path))
    if out is None:
        raise OSError(f"cannot write {path}: {oiio.geterror()}")
    opened = out.open(str(path), spec)
    try:
        written = opened and out.write_image(pixels)
        error = out.geterror()
    finally:
        closed = out.close() if opened else True
    if not (opened and written and closed):
        raise OSError(f"cannot write {path}: {error or out.geterror() or oiio.geterror() or 'unknown error'}")

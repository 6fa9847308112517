"""Write a processed frame exactly like its source: same file name, format, bit depth, channels, metadata.

Inference reads RGB (``trainer.data.images.read_image``) and gets RGB back from the model. The output
file then takes everything else from the input file, through OpenImageIO:

* the whole ImageSpec of subimage 0: pixel type (half/float EXR, 8/16-bit PNG and TIFF, 10-bit
  DPX, ...), channel names and order, data and display windows, tiling, compression, and every
  metadata attribute (EXR header attributes such as ``owner``, ``capDate``, custom strings and
  matrices; TIFF/PNG tags);
* every channel that is not R, G or B is copied from the input unchanged (alpha, AOVs, depth);
* a grey input (``Y``, ``Y`` + ``A``) gets the Rec. 709 luminance of the output
  (0.2126 R + 0.7152 G + 0.0722 B, ITU-R BT.709-6 item 3.3), so it stays one colour channel.

Colour values with alpha are handled as :mod:`trainer.data.images` reads them (``oiio:UnassociatedAlpha``
for PNG/TIFF): what the model changed is written back without premultiplying. Integer formats are
clipped to 0..1 and rounded to the nearest code value; float formats keep values above 1.

Only the first subimage of a multi-part EXR is written (the others are dropped, logged at WARNING).

**Named channels** (a model of ``model.json`` ``channels_out`` other than R, G, B: a matte ``A``, colour + alpha
``R, G, B, A``, an EXR layer's ``matte.A``; ``trainer.core.channels``): ``write_like(..., channels=names)`` puts
the model's output into the channels of those names and keeps every other channel of the source; a named channel
the source lacks is *added*: after the last channel of its layer when the layer exists, else at the end (an RGB
PNG plus ``A`` becomes an RGBA PNG with unassociated alpha; an RGB EXR plus ``matte.A`` gets a ``matte.A``
channel). R, G and B, when all three are named, go where the colour went before (a grey file's Y gets their
luminance). Formats that cannot hold an EXR layer (PNG, TIFF, DPX, ...) get a layer's alpha (``matte.A``) in their
own ``A`` (logged at INFO); a layer's other channels, or any new non-alpha channel, only fit an EXR, and a format
without alpha (JPEG) takes no new alpha: both are refused with a DataError that names the file and the fix.

**Upres** (a model of ``scale`` s > 1, ``trainer.learn.model``): the colour may be s times the source's
width and height (the same whole factor in both). Then the data window's size and origin and the display
window (EXR ``dataWindow``/``displayWindow``, ``full_*`` in OIIO) are multiplied by s, so an overscan frame
keeps its overscan; the pixel aspect ratio, DPI tags and every other attribute are kept. The channels the
model does not produce are resized to the new size: alpha (``A``, ``*.A``, ``alpha``) bilinearly
(half-pixel centres, edges clamped: ``F.interpolate(mode="bilinear", align_corners=False)``, as the model's
own base image is made), so it stays aligned with the smooth upscaled colour's edges; every other channel
(depth, IDs, AOVs) by nearest neighbour, which invents no value that was not in the source.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import OpenImageIO as oiio

from trainer.core.channels import is_alpha
from trainer.data.images import DataError, write_oiio  # the same checked OIIO write as write_image

log = logging.getLogger(__name__)

#: Rec. 709 luminance weights (ITU-R BT.709-6, item 3.3) for writing a grey output.
LUMA_709 = np.array([0.2126, 0.7152, 0.0722], np.float32)


def write_like(path: str | Path, rgb: np.ndarray, like: str | Path, channels: Sequence[str] | None = None) -> None:
    """Write ``rgb`` to ``path`` with the format, channels and metadata of the image ``like``, atomically.

    Args:
        path: destination (its folder must exist); its extension should match ``like``'s format.
        rgb: (sH, sW, C) float array, the model's output for ``like``'s (H, W) data window: its colour (C = 3)
            or its ``channels``; s >= 1 a whole factor (1: same size; 2, 4: an upres model's output, module doc).
        like: the source image the output copies everything else from.
        channels: the names of ``rgb``'s C channels (module doc, "Named channels"); None or R, G, B: the colour.

    Raises:
        ValueError: ``rgb`` is not (sH, sW, C) for a whole s >= 1 and ``like``'s data window size (H, W).
        DataError: ``like`` cannot be read, or a named channel the output's format cannot hold (module doc).
        OSError: OpenImageIO failed to write (the message names the file).
    """
    path = Path(path)
    spec, pixels = _read_all(Path(like))
    rgb = np.asarray(rgb, dtype=np.float32)
    names = None if channels is None or tuple(channels) == ("R", "G", "B") else tuple(channels)
    count = 3 if names is None else len(names)
    factor = output_factor((spec.height, spec.width), rgb.shape, count)
    if not factor:
        raise ValueError(f"write_like({path}): got an image of shape {rgb.shape}, but {like} is "
                         f"{spec.width}x{spec.height}; the output must be (s*{spec.height}, s*{spec.width}, {count}) "
                         "for a whole s >= 1 (s = 1: the input's size; 2 or 4: an upres model's)")
    if names is not None:
        pixels, dest = add_channels(spec, pixels, names, path)
    if factor > 1:
        pixels = _resize_others(pixels, factor, tuple(spec.channelnames))
        scale_windows(spec, factor)
    if names is None:
        _put_colour(pixels, rgb, tuple(spec.channelnames))
    else:
        _put_named(pixels, rgb, names, dest, tuple(spec.channelnames))
    out = _encode(pixels, spec)
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp{path.suffix}")
    try:
        write_oiio(temp, spec, out)
        os.chmod(temp, 0o640)  # trainer.record.rundir.FILE_MODE
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)  # only left behind on error


def output_factor(in_hw: tuple[int, ...], out_shape: tuple[int, ...], channels: int) -> int:
    """The whole factor s >= 1 by which an (sH, sW, C) model output ``out_shape`` is the size of an input of
    ``in_hw`` = (H, W, ...) [pixels], or 0 when it is not one (another aspect, a fraction, fewer pixels, or C not
    ``channels``). The one output-size rule of ``write_like`` and ``trainer.export.infer``."""
    if len(out_shape) != 3 or not in_hw[0]:
        return 0
    factor = out_shape[0] // in_hw[0]
    return factor if factor >= 1 and tuple(out_shape) == (factor * in_hw[0], factor * in_hw[1], channels) else 0


def _read_all(like: Path) -> tuple[oiio.ImageSpec, np.ndarray]:
    """A copy of subimage 0's spec and all its channels as (H, W, C) float32 (integer codes as code / max)."""
    config = oiio.ImageSpec()
    config.attribute("oiio:UnassociatedAlpha", 1)  # as trainer.data.images reads: colour not premultiplied
    inp = oiio.ImageInput.open(str(like), config)
    if inp is None:
        raise DataError(f"cannot read {like} to copy its format: {oiio.geterror() or 'unknown error'}")
    try:
        spec = oiio.ImageSpec(inp.spec())
        if inp.seek_subimage(1, 0):
            log.warning("%s has several subimages (parts); only the first is written", like)
            inp.seek_subimage(0, 0)
        pixels = inp.read_image(0, 0, 0, spec.nchannels, "float")
        if not isinstance(pixels, np.ndarray):
            raise DataError(f"cannot decode {like}: {inp.geterror() or 'unknown error'}")
    finally:
        inp.close()
    return spec, pixels.reshape(spec.height, spec.width, spec.nchannels).astype(np.float32)


def scale_windows(spec: oiio.ImageSpec, factor: int) -> None:
    """Multiply ``spec``'s data window (origin and size) and display window by ``factor`` in place [pixels].

    The pixel aspect ratio and all attributes are left alone; tile sizes too (they are not resolution).
    """
    spec.x, spec.y, spec.width, spec.height = (spec.x * factor, spec.y * factor, spec.width * factor,
                                               spec.height * factor)
    spec.full_x, spec.full_y = spec.full_x * factor, spec.full_y * factor
    spec.full_width, spec.full_height = spec.full_width * factor, spec.full_height * factor


def _resize_others(pixels: np.ndarray, factor: int, names: tuple[str, ...]) -> np.ndarray:
    """(H, W, C) -> (factor H, factor W, C): alpha bilinearly, other channels by nearest neighbour (module doc).

    The colour channels are resized too (nearest, cheap) and then overwritten by :func:`_put_colour`.
    """
    h, w, count = pixels.shape
    rows, cols = np.arange(h * factor) // factor, np.arange(w * factor) // factor
    out = pixels[rows][:, cols]  # nearest: output pixel i reads source pixel floor((i + 0.5) / factor)
    alphas = [i for i, name in enumerate(names[:count]) if is_alpha(name)]
    if count == 2 and not alphas:
        alphas = [1]  # a grey image's second channel is its alpha (trainer.data.images)
    if alphas:
        out[:, :, alphas] = bilinear_upscale(pixels[:, :, alphas], factor)
    return out


def bilinear_upscale(pixels: np.ndarray, factor: int) -> np.ndarray:
    """(H, W, C) -> (factor H, factor W, C) float32, bilinear with half-pixel centres and clamped edges: the same
    values as ``torch.nn.functional.interpolate(x, scale_factor=factor, mode="bilinear", align_corners=False)``
    (tests/trainer/data/test_write_like.py)."""
    out = np.asarray(pixels, dtype=np.float32)
    for axis in (0, 1):
        n = out.shape[axis]
        src = np.clip((np.arange(n * factor) + 0.5) / factor - 0.5, 0.0, n - 1)
        lo = np.floor(src).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        t = (src - lo).astype(np.float32).reshape((-1, 1, 1) if axis == 0 else (1, -1, 1))
        out = np.take(out, lo, axis=axis) * (1 - t) + np.take(out, hi, axis=axis) * t
    return out


def _put_colour(pixels: np.ndarray, rgb: np.ndarray, names: tuple[str, ...]) -> None:
    """Replace the colour channels of ``pixels`` (H, W, C) in place, as trainer.data.images maps them."""
    count = pixels.shape[2]
    if count in (1, 2):
        pixels[:, :, 0] = rgb @ LUMA_709
        return
    lookup = {name: index for index, name in enumerate(names)}
    picked = [lookup[c] for c in "RGB"] if all(c in lookup for c in "RGB") else [0, 1, 2]
    pixels[:, :, picked] = rgb


def add_channels(spec: oiio.ImageSpec, pixels: np.ndarray, names: Sequence[str],
                 path: Path) -> tuple[np.ndarray, list[int]]:
    """Give ``spec`` and ``pixels`` (H, W, C) every channel of ``names`` they lack (module doc, "Named channels"),
    zero-filled; ``spec`` changes in place. Returns the new (H, W, C') pixels and, per name, the index of the
    channel it is written to (-1 for R, G, B when all three are named: they go where :func:`_put_colour` puts the
    colour).

    Raises:
        DataError: the format of ``path`` cannot hold a named channel (a layer's non-alpha channel outside EXR, a
            new non-alpha channel outside EXR, or an alpha in JPEG); the message names the file, channel and fix.
    """
    have = list(spec.channelnames)
    colour = all(c in names for c in "RGB")
    writer = oiio.ImageOutput.create(str(path))
    fmt = writer.format_name() if writer is not None else path.suffix.lstrip(".")
    has_alpha = bool(writer and writer.supports("alpha"))
    targets = ["" if colour and n in ("R", "G", "B") else _channel_in(n, fmt, has_alpha, path) for n in names]
    added = [t for t in targets if t and t not in have]
    for name in added:
        have.insert(_insert_at(have, name), name)
    if added:
        old = {name: i for i, name in enumerate(spec.channelnames)}
        grown = np.zeros((*pixels.shape[:2], len(have)), np.float32)
        for i, name in enumerate(have):
            if name in old:
                grown[:, :, i] = pixels[:, :, old[name]]
        formats = list(spec.channelformats)
        kept = {attr: spec.channelnames[i] for attr in ("alpha_channel", "z_channel")
                if 0 <= (i := getattr(spec, attr)) < len(spec.channelnames)}
        spec.nchannels, spec.channelnames = len(have), tuple(have)
        for attr in ("alpha_channel", "z_channel"):  # the same channels, at their new places
            setattr(spec, attr, have.index(kept[attr]) if attr in kept else -1)
        if formats:  # per-channel pixel types (EXR): a new channel takes the first channel's (the colour's)
            spec.channelformats = tuple(formats[old[n]] if n in old else formats[0] for n in have)
        _mark_alpha(spec, added)
        log.info("%s: added channel%s %s to %s's channels", path.name, "s" * (len(added) > 1), ", ".join(added),
                 fmt)
        pixels = grown
    return pixels, [have.index(t) if t else -1 for t in targets]


def _channel_in(name: str, fmt: str, has_alpha: bool, path: Path) -> str:
    """The channel of a ``fmt`` file that holds the model's channel ``name`` (module doc). Raises DataError."""
    if fmt == "openexr":
        return name
    if is_alpha(name) and has_alpha:
        if "." in name:
            log.info("%s: a %s file has no layers; writing the model's %s into its A", path.name, fmt, name)
        return "A"
    what = "an alpha" if is_alpha(name) else f"the channel {name!r}"
    raise DataError(f"{path}: a {fmt} file cannot hold {what}, which the model outputs; infer on EXR (or, for a "
                    "matte, PNG/TIFF) frames, or convert the input sequence")


def _insert_at(have: list[str], name: str) -> int:
    """Where a new channel goes: after the last channel of its layer (``matte.`` of ``matte.A``; the unlayered
    channels for ``A``), else at the end."""
    layer = name.rpartition(".")[0]
    same = [i for i, n in enumerate(have) if n.rpartition(".")[0] == layer]
    return same[-1] + 1 if same else len(have)


def _mark_alpha(spec: oiio.ImageSpec, added: list[str]) -> None:
    """An added unlayered alpha becomes the file's alpha channel, unassociated (colour is not premultiplied:
    OIIO would otherwise divide the colour by it when writing PNG/TIFF)."""
    names = list(spec.channelnames)
    alpha = [n for n in added if is_alpha(n) and "." not in n]
    if alpha and spec.alpha_channel < 0:
        spec.alpha_channel = names.index(alpha[0])
    if alpha:
        spec.attribute("oiio:UnassociatedAlpha", 1)


def _put_named(pixels: np.ndarray, values: np.ndarray, names: Sequence[str], dest: list[int],
               have: tuple[str, ...]) -> None:
    """Write ``values`` (H, W, C), channels ``names``, into ``pixels`` (H, W, C') in place: R, G, B (``dest`` -1)
    as :func:`_put_colour` does, every other channel at its ``dest`` index."""
    if any(d < 0 for d in dest):
        _put_colour(pixels, values[:, :, [list(names).index(c) for c in "RGB"]], have)
    for j, d in enumerate(dest):
        if d >= 0:
            pixels[:, :, d] = values[:, :, j]


def _encode(pixels: np.ndarray, spec: oiio.ImageSpec) -> np.ndarray:
    """Pixels in the form OIIO writes as ``spec.format`` without surprises: float32 for float
    formats, rounded code values for integer ones (packed 10/12-bit DPX/TIFF as trainer.data.images
    writes them: the 16-bit value that shifts back to exactly the code)."""
    fmt = str(spec.format)
    if fmt in ("half", "float", "double"):
        return np.ascontiguousarray(pixels, dtype=np.float32)
    clipped = np.clip(np.nan_to_num(pixels, nan=0.0), 0.0, 1.0)
    container = {"uint8": 8, "int8": 8, "uint16": 16, "int16": 16, "uint32": 32}.get(fmt, 16)
    bits = spec.get_int_attribute("oiio:BitsPerSample", 0) or container
    codes = np.rint(clipped * float(2**bits - 1))
    if bits < container:
        codes = np.rint(codes * ((2.0**container - 1) / (2**bits - 1)))
    return codes.astype({8: np.uint8, 16: np.uint16}.get(container, np.uint32))

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
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import numpy as np
import OpenImageIO as oiio

from trainer.data.images import DataError, write_oiio  # the same checked OIIO write as write_image

log = logging.getLogger(__name__)

#: Rec. 709 luminance weights (ITU-R BT.709-6, item 3.3) for writing a grey output.
LUMA_709 = np.array([0.2126, 0.7152, 0.0722], np.float32)


def write_like(path: str | Path, rgb: np.ndarray, like: str | Path) -> None:
    """Write ``rgb`` to ``path`` with the format, channels and metadata of the image ``like``, atomically.

    Args:
        path: destination (its folder must exist); its extension should match ``like``'s format.
        rgb: (H, W, 3) float array, the new colour of ``like``'s data window (same H and W).
        like: the source image the output copies everything else from.

    Raises:
        ValueError: ``rgb`` is not (H, W, 3) of ``like``'s data window size.
        DataError: ``like`` cannot be read.
        OSError: OpenImageIO failed to write (the message names the file).
    """
    path = Path(path)
    spec, pixels = _read_all(Path(like))
    rgb = np.asarray(rgb, dtype=np.float32)
    if rgb.shape != (spec.height, spec.width, 3):
        raise ValueError(f"write_like({path}): got an image of shape {rgb.shape}, but {like} is "
                         f"{spec.width}x{spec.height}; the output must have the input's size")
    _put_colour(pixels, rgb, tuple(spec.channelnames))
    out = _encode(pixels, spec)
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp{path.suffix}")
    try:
        write_oiio(temp, spec, out)
        os.chmod(temp, 0o640)  # trainer.record.rundir.FILE_MODE
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)  # only left behind on error


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


def _put_colour(pixels: np.ndarray, rgb: np.ndarray, names: tuple[str, ...]) -> None:
    """Replace the colour channels of ``pixels`` (H, W, C) in place, as trainer.data.images maps them."""
    count = pixels.shape[2]
    if count in (1, 2):
        pixels[:, :, 0] = rgb @ LUMA_709
        return
    lookup = {name: index for index, name in enumerate(names)}
    picked = [lookup[c] for c in "RGB"] if all(c in lookup for c in "RGB") else [0, 1, 2]
    pixels[:, :, picked] = rgb


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

"""Image I/O and frame-sequence pairing for training data (no torch here).

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
``--scale`` times the Input's, else the pairs would train misaligned (:func:`check_pair_origin`,
:func:`check_pair_size`).

A training sequence is a folder of files ``name.<frame>.<ext>``; :func:`find_sequence` indexes one
by frame number and :func:`pair_frames` matches an Input sequence with its Ground Truth.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import OpenImageIO as oiio

from trainer.core.channels import RGB, ChannelPlan, is_alpha
from trainer.core.config import SCALES

log = logging.getLogger(__name__)

#: File extensions (lower case) that :func:`find_sequence` treats as images.
IMAGE_EXTENSIONS = (".exr", ".png", ".tif", ".tiff", ".jpg", ".jpeg", ".dpx")

_DIGITS = re.compile(r"\d+")


class DataError(ValueError):
    """Bad training data; the message names the path(s) and the fix."""


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


# ----------------------------------------------------------------------------------------------
# Sequences


def frame_number(name: str) -> int | None:
    """Frame number of a file name: the last group of digits in its stem, or None if it has none.

    Only the file name counts (folders are ignored) and the extension is dropped first:
    ``"plate.0101.exr"`` -> 101, ``"shot_v002.0042.png"`` -> 42, ``"/v3/plate.exr"`` -> None.
    Negative frames (``plate.-001.exr``) are not supported: the sign is ignored.
    """
    groups = _DIGITS.findall(Path(name).stem)
    return int(groups[-1]) if groups else None


def find_sequence(folder: str | Path) -> dict[int, Path]:
    """Index the image files of a folder by frame number.

    Images are the files with an extension in :data:`IMAGE_EXTENSIONS` (any case). Hidden files
    (``.name``, e.g. macOS ``._plate.0001.exr``), other files and subfolders are ignored.

    Returns:
        {frame number: path}, in frame order.

    Raises:
        DataError: the folder is missing or not a folder, holds no images, an image has no
            frame number, or two images share a frame number (all such files are listed).
    """
    folder = Path(folder)
    if not folder.exists():
        raise DataError(f"image folder {folder} does not exist; check the path")
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder; give the folder that holds the frames")
    images = sorted(p for p in folder.iterdir()
                    if p.suffix.lower() in IMAGE_EXTENSIONS and not p.name.startswith(".") and p.is_file())
    if not images:
        raise DataError(f"{folder} holds no images ({', '.join(IMAGE_EXTENSIONS)}); "
                        "check the path or render the frames")
    by_frame: dict[int, list[Path]] = {}
    for image in images:
        frame = frame_number(image.name)
        if frame is None:
            raise DataError(f"{image} has no frame number; name frames like name.0001{image.suffix} "
                            "or move other images out of the folder")
        by_frame.setdefault(frame, []).append(image)
    clashes = [paths for paths in by_frame.values() if len(paths) > 1]
    if clashes:
        listed = "; ".join(" and ".join(p.name for p in paths) for paths in clashes)
        raise DataError(f"{folder} has several files for the same frame number: {listed}; "
                        "keep one file per frame")
    return {frame: paths[0] for frame, paths in sorted(by_frame.items())}


@dataclass(frozen=True)
class FramePair:
    """One training example: an Input frame and its Ground Truth, matched by frame number."""

    frame: int
    input: Path
    target: Path


def pair_frames(input_dir: str | Path, target_dir: str | Path) -> list[FramePair]:
    """Match the Input and Ground Truth sequences by frame number.

    Returns:
        One :class:`FramePair` per frame, sorted by frame.

    Raises:
        DataError: as :func:`find_sequence` for either folder, or when any frame is present on
            one side only (all such frames are listed, per side; nothing is silently dropped).
    """
    inputs, targets = find_sequence(input_dir), find_sequence(target_dir)
    problems = []
    only_input = sorted(inputs.keys() - targets.keys())
    only_target = sorted(targets.keys() - inputs.keys())
    if only_input:
        problems.append(f"{_frames(only_input)} in Input {input_dir} but not in Ground Truth {target_dir}")
    if only_target:
        problems.append(f"{_frames(only_target)} in Ground Truth {target_dir} but not in Input {input_dir}")
    if problems:
        raise DataError("; ".join(problems) + ". Every Input frame needs a Ground Truth frame with the "
                        "same number: render the missing frames or remove the extra ones")
    return [FramePair(frame, inputs[frame], targets[frame]) for frame in sorted(inputs)]


def _frames(frames: list[int]) -> str:
    """``[12]`` -> "frame 12 is"; ``[1, 2, 3, 7, 9]`` -> "frames 1-3, 7, 9 are" (runs of 3+ as ranges)."""
    runs: list[list[int]] = []
    for frame in frames:
        if runs and frame == runs[-1][-1] + 1:
            runs[-1].append(frame)
        else:
            runs.append([frame])
    parts = []
    for run in runs:
        parts.extend([f"{run[0]}-{run[-1]}"] if len(run) > 2 else [str(f) for f in run])
    return f"frame {frames[0]} is" if len(frames) == 1 else f"frames {', '.join(parts)} are"


def load_pairs(pairs: Sequence[FramePair], scale: int = 1,
               channels: ChannelPlan | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Decode every pair, keeping float16 to halve memory.

    Args:
        scale: the Ground Truth's size over the Input's in both dimensions (``--scale``: 1, 2 or 4) [1].
        channels: the channels to read per side (``TrainConfig.channels``: ``inputs`` from the Input files,
            ``targets`` from the Ground Truth files, by name: :func:`read_channels`); None: RGB both sides
            (:func:`read_image`).

    Returns:
        [(input, target)] in the order of ``pairs``: inputs (H, W, Cin) and targets (scale*H, scale*W, Cout) float16
        (Cin, Cout = 3 without ``channels``), every frame the size of the first.

    Raises:
        DataError: ``pairs`` is empty; anything :func:`read_channels` raises (a missing channel names the file); a
            target is not ``scale`` times its input (:func:`check_pair_size`) or its data window does not start where
            the Input's does (:func:`check_pair_origin`); a frame's size differs from the first
            frame's (that frame named); a value is too large for float16 (over 65504).
    """
    if not pairs:
        raise DataError("no frame pairs to load; check the Input and Ground Truth folders")
    names = (RGB, RGB) if channels is None else (channels.inputs, channels.targets)
    loaded = []
    first_size: tuple[int, int] | None = None
    for pair in pairs:
        source = read_channels(pair.input, names[0], "--input-channels")
        target = read_channels(pair.target, names[1], "--target-channels")
        check_pair_size(pair, source.shape[1::-1], target.shape[1::-1], scale)  # (W, H) each
        check_pair_origin(pair, (*data_origin(pair.input), *source.shape[1::-1]),
                          (*data_origin(pair.target), *target.shape[1::-1]), scale)
        if first_size is None:
            first_size = source.shape[:2]
        elif source.shape[:2] != first_size:
            first = pairs[0]
            raise DataError(
                f"frame {pair.frame} ({pair.input}) is {_size(source)} but the first frame "
                f"{first.frame} ({first.input}) is {_size(loaded[0][0])}; all frames must be the same size")
        loaded.append((to_half(source, pair.input), to_half(target, pair.target)))
    return loaded


def check_pair_size(pair: FramePair, input_size: tuple[int, int], target_size: tuple[int, int], scale: int) -> None:
    """Refuse ``pair`` unless its Ground Truth is exactly ``scale`` (``--scale``) times its Input in both dimensions.

    ``input_size``, ``target_size``: ``(width, height)`` of the two files [pixels].

    Raises:
        DataError: naming the frame, both files, both sizes, the size ``scale`` needs and the fix; a Ground Truth
            that is exactly another scale's multiple of the Input names that ``--scale``.
    """
    (w, h), (tw, th) = input_size, target_size
    if (tw, th) == (scale * w, scale * h):
        return
    seen = f"frame {pair.frame}: Input {pair.input} is {w}x{h} but Ground Truth {pair.target} is {tw}x{th}"
    other = next((k for k in SCALES if k != scale and (tw, th) == (k * w, k * h)), None)
    if scale == 1:
        hint = (f"the Ground Truth is exactly {other}x the Input: looks like --scale {other} (upres); without it "
                if other else "")
        raise DataError(f"{seen}; {hint}Input and Ground Truth must be the same size")
    hint = f" (it is {other}x the Input: looks like --scale {other})" if other else ""
    raise DataError(f"{seen}; with --scale {scale} the Ground Truth must be {scale * w}x{scale * h} ({scale}x the "
                    f"Input): fix the frames or the --scale{hint}")


def data_origin(path: str | Path) -> tuple[int, int]:
    """``(x, y)`` of subimage 0's data window origin [pixels] (0, 0 for every format but EXR, TIFF and the like),
    from the header only. Raises DataError: the file cannot be opened as an image."""
    inp = oiio.ImageInput.open(str(path))
    if inp is None:
        raise DataError(f"cannot read image {path}: {oiio.geterror() or 'unknown error'}; re-render or remove it")
    try:
        spec = inp.spec()
        return spec.x, spec.y
    finally:
        inp.close()


def check_pair_origin(pair: FramePair, input_window: tuple[int, int, int, int],
                      target_window: tuple[int, int, int, int], scale: int) -> None:
    """Refuse ``pair`` unless its Ground Truth's data window starts ``scale`` (``--scale``) times as far from the
    origin as its Input's (the same at scale 1): pixels read from the data windows line up only then.

    ``input_window``, ``target_window``: ``(x, y, width, height)`` of each file's data window [pixels].

    Raises:
        DataError: naming the frame, both files, both data windows, where the Ground Truth's must start and the fix.
    """
    (x, y, w, h), (tx, ty, tw, th) = input_window, target_window
    if (tx, ty) == (scale * x, scale * y):
        return
    where = "the Input's origin" if scale == 1 else f"{scale}x the Input's origin"
    raise DataError(f"frame {pair.frame}: Input {pair.input} has its data window at {_window(x, y, w, h)} but Ground "
                    f"Truth {pair.target} at {_window(tx, ty, tw, th)}; the Ground Truth's must start at "
                    f"({scale * x},{scale * y}) ({where}), or the pairs train misaligned: write both with the same "
                    "data window (e.g. crop both alike in comp)")


def _window(x: int, y: int, w: int, h: int) -> str:
    """A data window as its first and last pixel, ``(x,y)-(x+w-1,y+h-1)`` [pixels]."""
    return f"({x},{y})-({x + w - 1},{y + h - 1})"


def to_half(rgb: np.ndarray, path: Path) -> np.ndarray:
    """(H, W, C) float32 -> float16; raises DataError naming ``path`` for values that would overflow to inf."""
    with np.errstate(over="ignore"):  # overflow becomes inf, reported just below
        half = rgb.astype(np.float16)
    if not np.isfinite(half).all():
        raise DataError(f"{path} has values beyond the float16 range (|value| > 65504); "
                        "clamp them in comp and write the frame again")
    return half


def _size(rgb: np.ndarray) -> str:
    """(H, W, C) array -> "WxH" as artists read image sizes."""
    return f"{rgb.shape[1]}x{rgb.shape[0]}"


def identity_warning(input_dir: str | Path, target_dir: str | Path,
                     frames: Sequence[tuple[np.ndarray, np.ndarray]],
                     channels: ChannelPlan | None = None) -> str | None:
    """The warning to log when Input and Ground Truth teach nothing (loss 0 from step 1), else None.

    Warned, not refused: a few identical pairs are a legitimate "leave this alone" example, and an artist who
    picks the same folder by mistake sees the message first thing in the log and the Runs panel's flat loss.
    Only when every trained channel is read from the same-named Input channel (``channels.residual``, RGB -> RGB
    without ``channels``): a plan with a new channel (RGB in, alpha out, even from the same RGBA files) is a matte
    job, not a mistake, and is never warned about.
    ``frames``: the loaded (input, target) pairs, each (H, W, Cin) and (H, W, Cout) in the plan's order.
    """
    residual = (0, 1, 2) if channels is None else channels.residual
    if any(r < 0 for r in residual):
        return None
    if Path(input_dir).resolve() == Path(target_dir).resolve():
        return (f"Input and Ground Truth are the same folder ({input_dir}): the model learns the identity and the "
                "loss stays 0; point --target at the corrected frames")
    if frames and all(np.array_equal(_channels_of(a, residual), b) for a, b in frames):
        return (f"every Input frame equals its Ground Truth frame ({input_dir} vs {target_dir}): the model learns "
                "the identity and the loss stays 0; check that --target holds the corrected frames")
    return None


def _channels_of(frame: np.ndarray, picked: Sequence[int]) -> np.ndarray:
    """(H, W, C) -> (H, W, len(picked)); ``frame`` itself when it has exactly the channels 0..C-1 picked."""
    if frame.ndim == 3 and tuple(picked) == tuple(range(frame.shape[2])):
        return frame
    return frame[..., list(picked)] if frame.ndim == 3 else frame

"""Frame sequences of training data: indexing a folder by frame number, pairing Input with Ground Truth, loading
the pairs (sizes, data windows and float16 checked) and the identity check (no torch here).

A training sequence is a folder of files ``name.<frame>.<ext>``; :func:`find_sequence` indexes one by frame number
and :func:`pair_frames` matches an Input sequence with its Ground Truth. Input and Ground Truth data windows must
line up: the Ground Truth's origin ``--scale`` times the Input's (the same at scale 1) and its size ``--scale``
times the Input's, else the pairs would train misaligned (:func:`check_pair_origin`, :func:`check_pair_size`).
Frames are read by :mod:`trainer.data.images`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import OpenImageIO as oiio

from trainer.core.channels import RGB, ChannelPlan
from trainer.core.config import SCALES
from trainer.data.images import IMAGE_EXTENSIONS, DataError, read_channels

log = logging.getLogger(__name__)

_DIGITS = re.compile(r"\d+")


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

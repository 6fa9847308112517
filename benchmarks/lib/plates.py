"""Synthetic production plates for ``bench_plates.py``: 4K (or 2K) half-float RGBA EXRs written by OpenImageIO.

Each pair is a Ground Truth frame (a clean plate) and an Input frame (the same plate softened and with
heavier grain), like a CopyCat denoise/cleanup shot. The picture is a mosaic of the photographs that
ship with scikit-image, in scene-linear values (highlights up to ~2.5), panned a few pixels per frame so
no two frames are alike, with per-frame film grain so ZIP compresses them as it would real plates
(a grain-free synthetic image would shrink to a few MB and flatter every reader).

Files: ``OUT/input/plate.####.exr`` and ``OUT/target/plate.####.exr``, RGBA half, ZIP compression,
scanline (``tiled=False``) or 64x64 tiles (``tiled=True``). :func:`link_plates` makes a longer or shorter
shot of symbolic links to an existing one (200 pairs on the disk space of 100); the trainer reads each link
as a frame of its own (it decodes it again).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import OpenImageIO as oiio

UHD4K = (4096, 2160)  # DCI 4K width, height [pixels]
DCI2K = (2048, 1080)  # DCI 2K width, height [pixels]
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field", "immunohistochemistry", "retina",
          "colorwheel")


def _mosaic(width: int, height: int) -> np.ndarray:
    """(H, W, 3) float32 scene-linear mosaic of scikit-image's photographs, scaled to cover the frame."""
    import skimage.data
    from skimage.transform import resize

    cols, rows = 4, 2
    cell_w, cell_h = width // cols + 64, height // rows + 64  # a margin for the per-frame pan
    out = np.zeros((rows * cell_h, cols * cell_w, 3), np.float32)
    for i in range(rows * cols):
        photo = getattr(skimage.data, PHOTOS[i % len(PHOTOS)])()[..., :3].astype(np.float32) / 255.0
        cell = resize(photo, (cell_h, cell_w), order=1, anti_aliasing=False)
        r, c = divmod(i, cols)
        out[r * cell_h:(r + 1) * cell_h, c * cell_w:(c + 1) * cell_w] = cell
    return (out ** 2.2 * 2.5).astype(np.float32)  # sRGB-ish code values -> scene-linear, highlights above 1


def _write(path: Path, rgb: np.ndarray, tiled: bool) -> None:
    """RGBA half ZIP EXR (alpha 1), scanline or 64x64 tiles."""
    h, w = rgb.shape[:2]
    spec = oiio.ImageSpec(w, h, 4, "half")
    spec.channelnames = ("R", "G", "B", "A")
    spec.attribute("compression", "zip")
    if tiled:
        spec.tile_width = spec.tile_height = 64
    rgba = np.concatenate([rgb, np.ones((h, w, 1), np.float32)], axis=2)
    out = oiio.ImageOutput.create(str(path))
    if out is None or not out.open(str(path), spec) or not out.write_image(rgba):
        raise OSError(f"cannot write {path}: {oiio.geterror()}")
    out.close()


def make_plates(out: Path, pairs: int, size: tuple[int, int] = UHD4K, *, tiled: bool = False, seed: int = 0) -> int:
    """Write ``pairs`` frame pairs under ``out`` (see module doc); returns the bytes written to disk.

    Existing complete folders are kept (a re-run writes only missing frames).
    """
    width, height = size
    base = _mosaic(width, height)
    rng = np.random.default_rng(seed)
    written = 0
    for side in ("input", "target"):
        (out / side).mkdir(parents=True, exist_ok=True)
    for frame in range(1, pairs + 1):
        name = f"plate.{frame:04d}.exr"
        if (out / "input" / name).exists() and (out / "target" / name).exists():
            continue
        dy, dx = (frame * 7) % 64, (frame * 13) % 64
        clean = base[dy:dy + height, dx:dx + width]
        grain = rng.standard_normal((height, width, 3), dtype=np.float32)
        target = clean + 0.004 * grain * np.sqrt(clean + 0.01)
        soft = 0.5 * clean + 0.25 * (np.roll(clean, 1, 0) + np.roll(clean, 1, 1))
        noisy = soft + 0.03 * rng.standard_normal((height, width, 3), dtype=np.float32) * np.sqrt(soft + 0.01)
        _write(out / "target" / name, target, tiled)
        _write(out / "input" / name, noisy, tiled)
        written += (out / "target" / name).stat().st_size + (out / "input" / name).stat().st_size
    return written


def link_plates(source: Path, out: Path, pairs: int) -> None:
    """``pairs`` frames under ``out`` as symbolic links to the frames of ``source`` (cycled when longer)."""
    have = sorted((source / "input").glob("plate.*.exr"))
    for side in ("input", "target"):
        (out / side).mkdir(parents=True, exist_ok=True)
        for frame in range(1, pairs + 1):
            link = out / side / f"plate.{frame:04d}.exr"
            if not link.is_symlink():
                os.symlink((source / side / have[(frame - 1) % len(have)].name).resolve(), link)


def disk_bytes(folder: Path) -> int:
    """Bytes the files under ``folder`` take on disk (links not followed)."""
    return sum(p.lstat().st_blocks * 512 for p in folder.rglob("*") if p.is_file() and not p.is_symlink())

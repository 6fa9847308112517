"""Synthetic run directories (no trainer, no torch): for GUI tests, the poll benchmark and screenshots.

Everything is written through :mod:`trainer.record.rundir`, so the layout is the real one: ``run.json``,
``metrics.jsonl`` rows ``{step, loss, lr, images_per_s, wall_s, noise_scale}`` and contact sheets (3 crops as rows x
input | output | ground truth columns) as PNG files.
"""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from trainer.core.config import TrainConfig
from trainer.record.rundir import RunPaths, append_metrics, atomic_write_bytes
from trainer.record.runrecord import update_record


def png_bytes(rgb: np.ndarray) -> bytes:
    """Encode an ``(H, W, 3)`` uint8 array as an 8-bit RGB PNG."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))  # filter byte 0 (none) per scanline

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b"")


def metrics_rows(first: int, last: int, interval: int = 10, seed: int = 0) -> list[dict[str, Any]]:
    """Plausible rows for steps ``first..last`` (every ``interval``): decaying noisy loss, warmup LR."""
    rng = np.random.default_rng(seed * 1_000_003 + first)
    rows = []
    for step in range(first, last + 1, interval):
        decay = 1500.0 * (1.0 + 0.25 * seed)  # another seed learns at another pace, so curves differ
        loss = (0.02 + 0.3 * math.exp(-step / decay)) * (1.0 + 0.15 * rng.standard_normal())
        lr = 1e-3 * min(1.0, 0.1 + 0.9 * step / 500.0)
        rows.append({"step": step, "loss": abs(loss), "lr": lr,
                     "images_per_s": 120.0 + 5.0 * rng.standard_normal(), "wall_s": 0.066 * step,
                     "noise_scale": (4.0 + 40.0 * (1.0 - math.exp(-step / decay))) * (1.0 + 0.1 * rng.standard_normal())})
    return rows


def contact_sheet(step: int, crop: int = 64, total: int = 3000) -> np.ndarray:
    """A ``(3*crop, 3*crop, 3)`` sheet: rows of input | output | ground truth that converge with ``step``."""
    y, x = np.mgrid[0:crop, 0:crop] / crop
    rows = []
    for i in range(3):
        truth = np.stack([0.5 + 0.5 * np.sin(2 * math.pi * (x * (i + 2) + 0.3 * i)),
                          0.5 + 0.5 * np.cos(2 * math.pi * y * (i + 1)),
                          np.clip(1.0 - np.hypot(x - 0.5, y - 0.5) * 2, 0, 1)], axis=-1)
        source = truth.mean(axis=-1, keepdims=True).repeat(3, axis=-1) * 0.8
        done = min(1.0, step / total)
        output = source + (truth - source) * done
        rows.append(np.concatenate([source, output, truth], axis=1))
    return (np.clip(np.concatenate(rows, axis=0), 0, 1) * 255).astype(np.uint8)


def write_run(root: str | Path, steps: int = 3000, logged_to: int | None = None, log_interval: int = 10,
              sheet_interval: int = 500, world_size: int = 4, state: str = "running",
              farm: dict[str, str] | None = None, seed: int = 0) -> RunPaths:
    """Write a run directory whose run logged up to step ``logged_to`` (default: all ``steps``).

    Returns:
        The run's :class:`RunPaths`.
    """
    paths = RunPaths.of(root)
    paths.create()
    logged_to = steps if logged_to is None else logged_to
    config = TrainConfig(input_dir="/shows/demo/plates/in", target_dir="/shows/demo/plates/gt", run_dir=str(root),
                         steps=steps, batch_size=8, log_interval=log_interval, contact_sheet_interval=sheet_interval)
    record: dict[str, Any] = {"config": config.to_dict(), "world_size": world_size, "state": state,
                              "started_at": "2025-01-01T12:00:00+00:00", "versions": {"cuetrain": "synthetic"}}
    if farm:
        record["farm"] = farm
    update_record(paths, **record)
    append_metrics(paths, metrics_rows(log_interval, logged_to, log_interval, seed))
    for step in range(sheet_interval, logged_to + 1, sheet_interval):
        add_sheet(paths, step, total=steps)
    return paths


def add_sheet(paths: RunPaths, step: int, total: int = 3000) -> Path:
    """Write the contact sheet of ``step``; returns its path."""
    path = paths.contact_sheet(step)
    atomic_write_bytes(path, png_bytes(contact_sheet(step, total=total)))
    return path

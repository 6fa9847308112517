"""Random crops of paired frames, split across ranks.

How crops are drawn (a deliberate design): the crop *coordinates* of the whole global batch of a
step come from a generator seeded with ``(seed, step)``; rank ``r`` takes its own contiguous slice
of that global batch. So every rank draws different crops, no two ranks ever train on the same
crop, resuming at step N draws exactly what an uninterrupted run would, and a run on 1 rank sees
the same global batches as the run on N ranks (which makes DDP testable for equality).

Batch split: per-rank batch = global // world_size; the remainder ``global % world_size`` goes one
extra crop each to the lowest ranks (rank < remainder). The loss is weighted so that the gradient
DDP averages equals the mean over the global batch exactly (see :func:`rank_loss_weight`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from trainer.images import DataError


@dataclass(frozen=True)
class CropBatch:
    """One rank's share of a step.

    Attributes:
        input: (b, 3, crop, crop) float32 crops of the Input frames.
        target: (b, 3, crop, crop) float32 crops of the Ground Truth frames.
    """

    input: torch.Tensor
    target: torch.Tensor


def rank_slice(global_batch: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, stop)`` of rank's crops within the global batch.

    Raises:
        DataError: fewer crops than ranks (every rank needs at least one crop per step).
    """
    if global_batch < world_size:
        raise DataError(
            f"batch size {global_batch} is smaller than the world size {world_size}; every rank needs at "
            "least one crop per step: raise --batch-size or use fewer ranks")
    per, rem = divmod(global_batch, world_size)
    start = rank * per + min(rank, rem)
    return start, start + per + (1 if rank < rem else 0)


def rank_loss_weight(local_batch: int, global_batch: int, world_size: int) -> float:
    """Factor for the mean loss of a rank's ``local_batch`` crops.

    DDP averages gradients over ranks (divides the sum by ``world_size``); with uneven batches
    ``mean_local * local_batch * world_size / global_batch`` makes that average equal the gradient
    of the global-batch mean.
    """
    return local_batch * world_size / global_batch


class CropSampler:
    """Draws this rank's random crops (with horizontal/vertical flips) for any step.

    Args:
        frames: decoded pairs ``(input, target)``, each (H, W, 3) float16/float32, all one size.
        crop_size: crop side [pixels].
        global_batch: crops per step over all ranks.
        rank, world_size: this rank and the gang size.
        seed: base seed.

    Raises:
        DataError: no frames, or crop larger than the frames.
    """

    def __init__(self, frames: Sequence[tuple[np.ndarray, np.ndarray]], crop_size: int, global_batch: int,
                 rank: int = 0, world_size: int = 1, seed: int = 0) -> None:
        if not frames:
            raise DataError("no training frames were loaded; check --input and --target")
        h, w = frames[0][0].shape[:2]
        if crop_size > h or crop_size > w:
            raise DataError(f"crop size {crop_size} px is larger than the frames ({w}x{h} px); "
                            f"use --crop-size {min(h, w)} or less")
        self.frames = frames
        self.crop = crop_size
        self.size = (h, w)
        self.global_batch = global_batch
        self.start, self.stop = rank_slice(global_batch, rank, world_size)
        self.seed = seed

    @property
    def local_batch(self) -> int:
        """Crops this rank draws per step."""
        return self.stop - self.start

    def coords(self, step: int, count: int | None = None, stream: int = 0) -> np.ndarray:
        """Crop coordinates of the global batch of ``step``: (count, 5) int64 rows of
        ``frame, y, x, flip_h, flip_v`` (``count`` defaults to the global batch)."""
        n = self.global_batch if count is None else count
        rng = np.random.default_rng([self.seed, stream, step])
        h, w = self.size
        return np.stack([rng.integers(0, len(self.frames), n), rng.integers(0, h - self.crop + 1, n),
                         rng.integers(0, w - self.crop + 1, n), rng.integers(0, 2, n), rng.integers(0, 2, n)], 1)

    def cut(self, rows: np.ndarray) -> CropBatch:
        """Crops for coordinate rows (see :meth:`coords`)."""
        c = self.crop
        ins, tgts = [], []
        for f, y, x, fh, fv in rows.tolist():
            a = self.frames[f][0][y:y + c, x:x + c]
            b = self.frames[f][1][y:y + c, x:x + c]
            if fh:
                a, b = a[:, ::-1], b[:, ::-1]
            if fv:
                a, b = a[::-1], b[::-1]
            ins.append(a)
            tgts.append(b)
        # (b, c, c, 3) -> (b, 3, c, c)
        to_tensor = lambda xs: torch.from_numpy(np.ascontiguousarray(np.stack(xs), dtype=np.float32)).permute(0, 3, 1, 2)
        return CropBatch(to_tensor(ins).contiguous(), to_tensor(tgts).contiguous())

    def batch(self, step: int) -> CropBatch:
        """This rank's crops for ``step``: (local_batch, 3, crop, crop) float32 each."""
        return self.cut(self.coords(step)[self.start:self.stop])

    def preview(self, step: int, count: int = 3) -> CropBatch:
        """``count`` random crops for a contact sheet (independent of the training stream)."""
        return self.cut(self.coords(step, count, stream=1))

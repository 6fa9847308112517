"""Random crops of paired frames, split across ranks.

How crops are drawn (a deliberate design): the crop *coordinates* of the whole global batch of a
step come from a generator seeded with ``(seed, step)``; rank ``r`` takes its own contiguous slice
of that global batch. So every rank draws different crops, no two ranks ever train on the same
crop, resuming at step N draws exactly what an uninterrupted run would, and a run on 1 rank sees
the same global batches as the run on N ranks (which makes DDP testable for equality).

Batch split: per-rank batch = global // world_size; the remainder ``global % world_size`` goes one
extra crop each to the lowest ranks (rank < remainder). The loss is weighted so that the gradient
DDP averages equals the mean over the global batch exactly (see :func:`rank_loss_weight`).

Where crops are cut: on the training device, from frames uploaded once (see :class:`CropSampler`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from trainer.images import DataError

log = logging.getLogger(__name__)


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
    """Draws this rank's random crops (with horizontal/vertical flips) for any step, on ``device``.

    The frames are stacked once into two (N, H, W, 3) tensors (their dtype kept, float16 from
    ``trainer.images.load_pairs``) and moved to ``device`` once: on a GPU the crops are then cut
    there by one gather per step, so no image data crosses the bus during training. When the
    frames would take more than :data:`GPU_FRAME_FRACTION` of the GPU's free memory they stay in
    pinned host memory instead, and each batch is cut there and copied with ``non_blocking=True``.
    Only the (b, 5) crop coordinates come from numpy's generator (see the module doc), so a batch is
    the same on every device.

    Args:
        frames: decoded pairs ``(input, target)``, each (H, W, 3) float16/float32, all one size.
        crop_size: crop side [pixels].
        global_batch: crops per step over all ranks.
        rank, world_size: this rank and the gang size.
        seed: base seed.
        device: where batches are returned (default CPU).
        memory_format: layout of the returned batches (``torch.contiguous_format`` or ``torch.channels_last``).

    Raises:
        DataError: no frames, or crop larger than the frames.
    """

    def __init__(self, frames: Sequence[tuple[np.ndarray, np.ndarray]], crop_size: int, global_batch: int,
                 rank: int = 0, world_size: int = 1, seed: int = 0, device: torch.device | str = "cpu",
                 memory_format: torch.memory_format = torch.contiguous_format) -> None:
        if not frames:
            raise DataError("no training frames were loaded; check --input and --target")
        h, w = frames[0][0].shape[:2]
        if crop_size > h or crop_size > w:
            raise DataError(f"crop size {crop_size} px is larger than the frames ({w}x{h} px); "
                            f"use --crop-size {min(h, w)} or less")
        self.crop = crop_size
        self.count = len(frames)
        self.size = (h, w)
        self.global_batch = global_batch
        self.start, self.stop = rank_slice(global_batch, rank, world_size)
        self.seed = seed
        self.device = torch.device(device)
        self.memory_format = memory_format
        # (N, H, W, 3) each; frame data lives where the crops are cut (see class doc)
        self.inputs, self.targets = (_frames_tensor([p[i] for p in frames], self.device) for i in (0, 1))
        self._ramp = torch.arange(crop_size, device=self.inputs.device)

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
        return np.stack([rng.integers(0, self.count, n), rng.integers(0, h - self.crop + 1, n),
                         rng.integers(0, w - self.crop + 1, n), rng.integers(0, 2, n), rng.integers(0, 2, n)], 1)

    def cut(self, rows: np.ndarray) -> CropBatch:
        """Crops for coordinate rows (see :meth:`coords`): (b, 3, crop, crop) float32 each, on ``device``."""
        r = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64)).to(self.inputs.device, non_blocking=True)
        f, y, x, flip_h, flip_v = r.unbind(1)  # (b,) each
        ramp = self._ramp[None]  # (1, c)
        ys = y[:, None] + torch.where(flip_v[:, None] == 1, self.crop - 1 - ramp, ramp)  # (b, c) source rows
        xs = x[:, None] + torch.where(flip_h[:, None] == 1, self.crop - 1 - ramp, ramp)  # (b, c) source columns
        idx = (f[:, None, None], ys[:, :, None], xs[:, None, :])  # broadcast to (b, c, c)
        return CropBatch(self._finish(self.inputs[idx]), self._finish(self.targets[idx]))

    def _finish(self, crops: torch.Tensor) -> torch.Tensor:
        """(b, c, c, 3) gathered crops -> (b, 3, c, c) float32 on ``device`` in ``memory_format``."""
        nchw = crops.permute(0, 3, 1, 2)  # a view whose strides are already channels_last
        if nchw.device != self.device:  # frames kept in pinned host memory
            nchw = nchw.float().contiguous(memory_format=self.memory_format).pin_memory()
            return nchw.to(self.device, non_blocking=True)
        return nchw.float().contiguous(memory_format=self.memory_format)

    def batch(self, step: int) -> CropBatch:
        """This rank's crops for ``step``: (local_batch, 3, crop, crop) float32 each."""
        return self.cut(self.coords(step)[self.start:self.stop])

    def preview(self, step: int, count: int = 3) -> CropBatch:
        """``count`` random crops for a contact sheet (independent of the training stream)."""
        return self.cut(self.coords(step, count, stream=1))


#: Frames go to the GPU when they take at most this fraction of its free memory [1]; the rest is
#: left for the model, activations and cuDNN workspaces.
GPU_FRAME_FRACTION = 0.5


def _frames_tensor(images: Sequence[np.ndarray], device: torch.device) -> torch.Tensor:
    """Stack (H, W, 3) images into one (N, H, W, 3) tensor on ``device`` (or pinned host memory, see
    :class:`CropSampler`), keeping their dtype."""
    stacked = torch.from_numpy(np.stack(images))
    if device.type != "cuda":
        return stacked
    free, _ = torch.cuda.mem_get_info(device)
    if stacked.numel() * stacked.element_size() * 2 <= GPU_FRAME_FRACTION * free:  # x2: input and target
        return stacked.to(device)
    log.info("training frames (%.1f GiB x 2) exceed %.0f%% of free GPU memory: crops are cut in pinned host memory",
             stacked.numel() * stacked.element_size() / 2 ** 30, GPU_FRAME_FRACTION * 100)
    return stacked.pin_memory()

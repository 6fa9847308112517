"""Random crops of paired frames, split across ranks.

How crops are drawn (a deliberate design): the crop *coordinates* of the whole global batch of a
step come from a generator seeded with ``(seed, step)``; rank ``r`` takes its own contiguous slice
of that global batch. So every rank draws different crops, no two ranks ever train on the same
crop, resuming at step N draws exactly what an uninterrupted run would, and a run on 1 rank sees
the same global batches as the run on N ranks (which makes DDP testable for equality).

Batch split: per-rank batch = global // world_size; the remainder ``global % world_size`` goes one
extra crop each to the lowest ranks (rank < remainder). The loss is weighted so that the gradient
DDP averages equals the mean over the global batch exactly (see :func:`rank_loss_weight`).

Where crops are cut (see :class:`CropSampler`): from a :class:`trainer.data.sources.FrameSource`, the host's
decoded copy of the shot (``trainer.data.hostcache``) in training or frames already in memory
(:class:`trainer.data.sources.FramesInMemory`), on the host; on a GPU the frames are uploaded once instead when
they fit in :data:`GPU_FRAME_FRACTION` of its free memory, and crops are cut there. Every path gives the same crops, bit for bit.

Upres (``--scale`` s): the Ground Truth is s times the Input in both dimensions, and crops are aligned: the Input
crop of side c at ``(y, x)`` pairs with the Ground Truth crop of side s*c at ``(s*y, s*x)``, flipped the same way.
The coordinates are drawn in Input pixels exactly as for s = 1, so scale 1 batches are what they always were.

Channels (``--input-channels``, ``--target-channels``): each side has its own channel count, Cin and Cout (3 and 3
for RGB); a source's crops and images carry them last, (.., C), and batches are (b, Cin, c, c) and
(b, Cout, s*c, s*c).

Augmentation (``--augment P``, ``trainer.data.augment``): a crop of the global batch is augmented with probability P
(one draw per step for the global batch, stream 2, so batches stay the same on any number of ranks). For those
crops the sampler cuts a window of side :func:`trainer.data.augment.window` (c) centred on the crop (s times that on
the Ground Truth, at s times its position), flipped as the crop, warps both sides with the same draw and grades the
colour channels of the sides ``grade_sides`` names. A window must lie inside the frame: an augmented crop nearer the
frame's edge than ``(window - c) / 2`` px is moved inwards by that much at most (its window touches the edge); on
frames smaller than the window, the window shrinks to the largest that fits (logged; rotated crops may then take
reflected pixels in their corners). Crops not augmented are exactly the crops of P = 0, and P = 0 draws nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from trainer.core.channels import RGB, ChannelPlan
from trainer.data import augment as aug
from trainer.data.colour import colour_channels
from trainer.data.crop_focus import CropFocus
from trainer.data.images import DataError
from trainer.data.sources import FrameSource, FramesInMemory

log = logging.getLogger(__name__)

#: Frames go to the GPU when both sides take at most this fraction of its free memory [1]; the rest is
#: left for the model, activations and cuDNN workspaces. Otherwise only crops cross the bus.
GPU_FRAME_FRACTION = 0.5
#: ``grade_sides`` of :class:`CropSampler`: which sides' colour channels an augmented crop grades.
GRADE_SIDES = ("none", "input", "both")


@dataclass(frozen=True)
class CropBatch:
    """One rank's share of a step.

    Attributes:
        input: (b, Cin, crop, crop) float32 crops of the Input frames (Cin: the Input channels, 3 for RGB).
        target: (b, Cout, scale*crop, scale*crop) float32 crops of the Ground Truth frames, aligned with ``input``
            (Cout: the Ground Truth channels).
    """

    input: torch.Tensor
    target: torch.Tensor


def per_crop_l1(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean absolute difference of each crop: (b, C, h, w) ``output`` (any float dtype: autocast may give bf16
    or fp16) and (b, C, h, w) float32 ``target`` -> (b,) float32. The training loss (``trainer.learn.train``, and the
    advisor's probe of it); with the crops' input as ``output``, the loss of returning the input unchanged
    (``trainer.learn.divergence``)."""
    return (output.float() - target).abs().mean(dim=(1, 2, 3))


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


def frames_fit_gpu(frame_bytes: int, free_bytes: int) -> bool:
    """True when frames of ``frame_bytes`` (both sides) fit in :data:`GPU_FRAME_FRACTION` of ``free_bytes``."""
    return frame_bytes <= GPU_FRAME_FRACTION * free_bytes


class CropSampler:
    """Draws this rank's random crops (with horizontal/vertical flips) for any step, on ``device``.

    Crops are cut on the host from ``frames`` (a :class:`FrameSource`, or decoded pairs, which are wrapped
    in :class:`FramesInMemory`) into a (b, crop, crop, Cin) Input buffer and a (b, s*crop, s*crop, Cout) Ground Truth
    buffer (s = the source's ``scale``; the frames' dtype: float16 from a shot), pinned when ``device`` is a GPU
    and copied with ``non_blocking=True``. On a GPU the frames are uploaded once instead, image by
    image, when both sides fit in :data:`GPU_FRAME_FRACTION` of its free memory; crops are then cut there by
    one gather per side per step and no image data crosses the bus during training. Only the (b, 5) crop
    coordinates (and the augmentation's draw) come from numpy's generator (see the module doc), so a batch is the
    same on every path.

    Args:
        frames: a :class:`FrameSource`, or decoded pairs ``[(input, target)]`` float16/float32, inputs (H, W, Cin),
            targets (s*H, s*W, Cout).
        crop_size: side of the Input crops [pixels] (the Ground Truth crops are s times that).
        global_batch: crops per step over all ranks.
        rank, world_size: this rank and the gang size.
        seed: base seed.
        device: where batches are returned (default CPU).
        memory_format: layout of the returned batches (``torch.contiguous_format`` or ``torch.channels_last``).
        check: called with the step number before each training batch (e.g. ``trainer.data.shot_loading.ShotWatch``:
            raises when a file of the shot changed), or None.
        channels: the run's channel plan (``TrainConfig.channels``): names the sides' channels, so a grade touches
            only R, G, B (``trainer.data.colour.colour_channels``); None: R, G, B on a side of 3 channels.
        augment: probability per crop of a random transform (module doc, ``--augment``) [1]; 0 = off.
        grade_sides: with ``augment``, which sides' colour channels an augmented crop also grades: ``none``,
            ``input`` or ``both`` (:data:`GRADE_SIDES`; :func:`grade_sides_for` maps ``--augment-grade``).

    Raises:
        DataError: no frames, crop larger than the frames, or frames whose channel counts are not the plan's.
        ValueError: ``augment`` outside 0..1 or ``grade_sides`` not one of :data:`GRADE_SIDES`.
    """

    def __init__(self, frames: FrameSource | Sequence[tuple[np.ndarray, np.ndarray]], crop_size: int,
                 global_batch: int, rank: int = 0, world_size: int = 1, seed: int = 0,
                 device: torch.device | str = "cpu", memory_format: torch.memory_format = torch.contiguous_format,
                 check=None, channels: ChannelPlan | None = None, augment: float = 0.0,
                 grade_sides: str = "none") -> None:
        self.source: FrameSource = frames if isinstance(frames, FrameSource) else FramesInMemory(frames)
        h, w = self.source.size
        if crop_size > h or crop_size > w:
            raise DataError(f"crop size {crop_size} px is larger than the frames ({w}x{h} px); "
                            f"use --crop-size {min(h, w)} or less")
        self.crop = crop_size
        self.count = self.source.count
        self.size = (h, w)  # the Input's [pixels]
        self.scale = self.source.scale  # Ground Truth pixels per Input pixel, in each dimension [1]
        self.global_batch = global_batch
        self.start, self.stop = rank_slice(global_batch, rank, world_size)
        self.seed = seed
        self.device = torch.device(device)
        self.memory_format = memory_format
        self.check = check
        probes = [np.asarray(self.source.crop(side, 0, 0, 1)) for side in (0, 1)]
        self.dtype = torch.from_numpy(probes[0]).dtype  # kept: float16 from a shot
        self.channels = tuple(int(p.shape[-1]) for p in probes)  # (Cin, Cout) [count]
        self.names = _side_names(self.channels, channels)
        if not 0.0 <= augment <= 1.0 or grade_sides not in GRADE_SIDES:
            raise ValueError(f"augment={augment!r} must be within 0..1 and grade_sides={grade_sides!r} one of "
                             f"{', '.join(GRADE_SIDES)}")
        self.augment = augment
        self.window = self._window() if augment > 0 else crop_size  # side of an augmented crop's window [pixels]
        graded = {"none": (False, False), "input": (True, False), "both": (True, True)}[grade_sides]
        self.graded = tuple(colour_channels(n) if g else () for n, g in zip(self.names, graded))  # per side
        self.on_device = self._upload() if self.device.type == "cuda" else None  # (inputs, targets) or None
        self.focus: CropFocus | None = None  # a head start's (trainer.learn.focus_map); set before the first batch

    @property
    def local_batch(self) -> int:
        """Crops this rank draws per step."""
        return self.stop - self.start

    def coords(self, step: int, count: int | None = None, stream: int = 0) -> np.ndarray:
        """Crop coordinates of the global batch of ``step``: (count, 5) int64 rows of
        ``frame, y, x, flip_h, flip_v``, y and x in Input pixels (``count`` defaults to the global batch); with
        :attr:`focus` set, its share of the training stream's rows is drawn by its weights
        (``trainer.data.crop_focus``)."""
        n = self.global_batch if count is None else count
        rng = np.random.default_rng([self.seed, stream, step])
        h, w = self.size
        rows = np.stack([rng.integers(0, self.count, n), rng.integers(0, h - self.crop + 1, n),
                         rng.integers(0, w - self.crop + 1, n), rng.integers(0, 2, n), rng.integers(0, 2, n)], 1)
        return self.focus.apply(rows, self.seed, step) if self.focus is not None and stream == 0 else rows

    def cut(self, rows: np.ndarray, size: int | None = None) -> CropBatch:
        """Crops for coordinate rows (see :meth:`coords`), on ``device``: (b, Cin, n, n) Input and
        (b, Cout, s*n, s*n) Ground Truth float32, n = ``size`` (default the crop side), the Ground Truth's at
        ``(s*y, s*x)`` (module doc)."""
        size = self.crop if size is None else size
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        if self.on_device is not None:
            return self._gather(rows, size)
        pin = self.device.type == "cuda"
        scales = (1, self.scale)  # per side: its pixels per Input pixel
        sides = [torch.empty((len(rows), k * size, k * size, c), dtype=self.dtype, pin_memory=pin)
                 for k, c in zip(scales, self.channels)]
        bufs = [s.numpy() for s in sides]
        for i, (f, y, x, flip_h, flip_v) in enumerate(rows.tolist()):
            for side, k in enumerate(scales):
                px = self.source.crop(2 * f + side, k * y, k * x, k * size)
                bufs[side][i] = px[::-1 if flip_v else 1, ::-1 if flip_h else 1]
        return CropBatch(*(self._finish(s.to(self.device, non_blocking=True) if pin else s) for s in sides))

    def _finish(self, crops: torch.Tensor) -> torch.Tensor:
        """(b, c, c, C) crops -> (b, C, c, c) float32 in ``memory_format``, where ``crops`` are."""
        nchw = crops.permute(0, 3, 1, 2)  # a view whose strides are already channels_last
        return nchw.float().contiguous(memory_format=self.memory_format)

    def batch(self, step: int) -> CropBatch:
        """This rank's crops for ``step``: (local_batch, Cin, crop, crop) Input and (local_batch, Cout, s*crop,
        s*crop) Ground Truth, float32; augmented with ``augment`` > 0 (module doc)."""
        if self.check is not None:
            self.check(step)
        rows = self.coords(step)
        crops = self.cut(rows[self.start:self.stop])
        return self._augmented(step, rows, crops) if self.augment > 0 else crops

    def preview(self, step: int, count: int = 3) -> CropBatch:
        """``count`` random crops for a contact sheet (independent of the training stream, never augmented), shaped
        as :meth:`batch`'s."""
        return self.cut(self.coords(step, count, stream=1))

    # ------------------------------------------------------------------------------------------
    # Augmentation (trainer.data.augment)

    def _window(self) -> int:
        """Side of the window cut around an augmented crop [Input pixels]: ``augment.window(crop)``, or the largest
        crop + an even number that fits in the frames (logged)."""
        want = aug.window(self.crop)
        fits = self.crop + 2 * ((min(self.size) - self.crop) // 2)
        if fits < want:
            log.warning("--augment: frames of %dx%d px are smaller than the %d px window a %d px crop needs for any "
                        "rotation; windows shrink to %d px, so rotated crops may take reflected pixels in their "
                        "corners (use a smaller --crop-size to avoid it)", self.size[1], self.size[0], want,
                        self.crop, fits)
        return min(want, fits)

    def window_rows(self, rows: np.ndarray) -> np.ndarray:
        """Coordinate rows (:meth:`coords`) -> the rows of their windows: the crop moved inwards until its window
        of side :attr:`window`, centred on it, lies inside the frame, then the window's corner; (b, 5) int64."""
        m = (self.window - self.crop) // 2  # the crop's offset inside its window [Input pixels]
        h, w = self.size
        out = np.array(rows, dtype=np.int64, copy=True)
        out[:, 1] = np.clip(out[:, 1], m, h - self.crop - m) - m
        out[:, 2] = np.clip(out[:, 2], m, w - self.crop - m) - m
        return out

    def _augmented(self, step: int, rows: np.ndarray, crops: CropBatch) -> CropBatch:
        """``crops`` (this rank's rows of the global ``rows``) with the augmented ones replaced by their warped (and
        graded) windows; the draw is the global batch's, so any split across ranks gives the same crops."""
        d = aug.draw(self.seed, step, self.global_batch, self.augment)
        on = np.flatnonzero(d.apply[self.start:self.stop])  # this rank's augmented rows
        if not len(on):
            return crops
        picked = on + self.start  # the same rows of the global batch and its draw
        windows = self.cut(self.window_rows(rows[picked]), self.window)
        local = torch.from_numpy(on).to(self.device)
        for out, win, k, colour in zip((crops.input, crops.target), (windows.input, windows.target),
                                       (1, self.scale), self.graded):
            x = aug.warp(win, d, picked, k * self.crop)  # (n, C, k*crop, k*crop) float32
            out[local] = aug.grade(x, d, picked, colour) if colour else x
        return crops

    # ------------------------------------------------------------------------------------------
    # GPU-resident frames

    def _upload(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Both sides on the GPU, image by image, when they fit (class doc): (N, H, W, Cin) Inputs and
        (N, s*H, s*W, Cout) Ground Truths, the frames' dtype."""
        h, w = self.size
        scales = (1, self.scale)
        need = sum(self.count * k * h * k * w * c * self.dtype.itemsize for k, c in zip(scales, self.channels))
        free, _ = torch.cuda.mem_get_info(self.device)
        if not frames_fit_gpu(need, free):
            log.info("training frames (%.1f GiB) exceed %.0f%% of free GPU memory (%.1f GiB): crops are cut on the "
                     "host and copied", need / 2**30, GPU_FRAME_FRACTION * 100, free / 2**30)
            return None
        out = tuple(torch.empty((self.count, k * h, k * w, c), dtype=self.dtype, device=self.device)
                    for k, c in zip(scales, self.channels))
        for f in range(self.count):
            for side in (0, 1):
                out[side][f].copy_(torch.from_numpy(self.source.image(2 * f + side)))
        return out

    def _gather(self, rows: np.ndarray, size: int) -> CropBatch:
        """Crops of side ``size`` (s times that on the Ground Truth) of the uploaded frames (:meth:`_upload`) for
        coordinate rows, one gather per side."""
        r = torch.from_numpy(rows).to(self.device, non_blocking=True)
        inputs, targets = self.on_device
        return CropBatch(self._finish(inputs[crop_index(r, size, 1)]),
                         self._finish(targets[crop_index(r, size, self.scale)]))


def _side_names(counts: tuple[int, ...], plan: ChannelPlan | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Channel names per side: the plan's (checked against the sources' channel ``counts``), else R, G, B on a side
    of 3 channels and unnamed channels otherwise. Raises DataError: a count is not the plan's."""
    if plan is None:
        return tuple(RGB if c == 3 else tuple(f"#{i}" for i in range(c)) for c in counts)
    names = (plan.inputs, plan.targets)
    if tuple(len(n) for n in names) != counts:
        raise DataError(f"the frames have {counts[0]} Input and {counts[1]} Ground Truth channels but the channel plan "
                        f"reads {', '.join(plan.inputs)} -> {', '.join(plan.targets)}; load the frames with that plan "
                        "(trainer.data.sequences.load_pairs(channels=...), trainer.data.shot.list_shot(channels=...))")
    return names


def grade_sides_for(augment_grade: str, plan: ChannelPlan) -> str:
    """``--augment-grade`` -> :class:`CropSampler`'s ``grade_sides``: ``auto`` grades the Input of a matte task (the
    matte of a regraded plate is the same matte) and nothing otherwise; ``on`` grades both sides with the same draw;
    ``off`` nothing (``trainer.data.augment`` module doc). Raises ValueError: another value."""
    sides = {"auto": "input" if plan.task == "matte" else "none", "on": "both", "off": "none"}
    if augment_grade not in sides:
        raise ValueError(f"--augment-grade {augment_grade!r} must be one of auto, on, off")
    return sides[augment_grade]


def crop_index(rows: torch.Tensor, crop: int, scale: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The advanced index that cuts the crops of coordinate ``rows`` out of a stack of one side's frames.

    Args:
        rows: (b, 5) int64 ``frame, y, x, flip_h, flip_v`` in Input pixels (:meth:`CropSampler.coords`).
        crop: side of the Input crops [pixels].
        scale: the side's pixels per Input pixel (1 for the Input, ``--scale`` for the Ground Truth) [1].

    Returns:
        ``(frames (b, 1, 1), rows (b, n, 1), columns (b, 1, n))``, n = scale*crop, on ``rows``' device: indexing an
        (N, scale*H, scale*W, 3) stack with it gives the (b, n, n, 3) crops at ``(scale*y, scale*x)``, flipped.
    """
    f, y, x, flip_h, flip_v = rows.unbind(1)  # (b,) each
    n = scale * crop
    ramp = torch.arange(n, device=rows.device)[None]  # (1, n)
    ys = scale * y[:, None] + torch.where(flip_v[:, None] == 1, n - 1 - ramp, ramp)  # (b, n) source rows
    xs = scale * x[:, None] + torch.where(flip_h[:, None] == 1, n - 1 - ramp, ramp)  # (b, n) source columns
    return f[:, None, None], ys[:, :, None], xs[:, None, :]  # broadcast to (b, n, n)


def warn_identity(input_dir: str, target_dir: str, channels: ChannelPlan | None = None) -> None:
    """Log a WARNING when the trained channels are the Input's own: Input and Ground Truth are the same folder or
    every pair of files is byte-identical, and every target channel is an Input channel of the same name
    (``trainer.data.sequences.identity_warning``; always so for RGB -> RGB, ``channels`` None). A plan with a new
    channel (RGB in, alpha out) is a matte job, never warned about. Compares files, not decoded frames, so a long
    4K shot is not decoded for it; stops at the first pair that differs (usually the first)."""
    import filecmp

    from trainer.data.sequences import identity_warning, pair_frames

    message = identity_warning(input_dir, target_dir, [], channels)
    if message is None and (channels is None or min(channels.residual) >= 0):
        pairs = pair_frames(input_dir, target_dir)
        if pairs and all(filecmp.cmp(p.input, p.target, shallow=False) for p in pairs):
            message = identity_warning(input_dir, target_dir, [(np.zeros(1), np.zeros(1))], channels)
    if message:
        log.warning(message)

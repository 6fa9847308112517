"""The head start's crop focus: a model's error on this shot's training frames (``--init-focus``).

Before the first step of a run with ``--init-from``, the source model (the weights just loaded) renders every training
frame once; its mean absolute error over the channels, per Input pixel, weighs where
:class:`trainer.data.crop_focus.CropFocus` draws its share of each batch's crops. Every ``--init-focus-every`` steps
the network being trained renders them again and its own error takes the source's place, so the focus follows what
the fine-tune still renders worst (online hard example mining: Shrivastava et al. 2016, "Training Region-based
Object Detectors with Online Hard Example Mining", which draws the examples a detector gets most wrong in each batch).

Rank r renders frames r, r + N, ... and one all-reduce sums the grids, so every rank holds the same weights; a map
costs one forward pass per rendered frame over the gang, in float32 (the same on any precision), without gradients.
On a large shot the source's map renders one frame in every :func:`map_stride` (the middle one of each run of that many
consecutive training frames, whose map they all take), so that it costs at most :data:`MAP_PIXEL_SHARE` of the pixels
the run trains on. The grid is kept in float16 (:data:`CELL_DTYPE`): the checkpoint stores it, so a resumed run draws
from the same map as one that ran on.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch
import torch.nn.functional as F

from trainer.data.crop_focus import CropFocus, crop_means, grid_shape
from trainer.data.sources import FrameSource
from trainer.gang import distributed

log = logging.getLogger(__name__)

#: The grid's stored type: half the bytes of float32 (a 2K frame's grid, 128 x 232 cells: 58 KiB) [1].
CELL_DTYPE = np.float16
#: A refresh renders at most this share of the Input pixels the steps since the last one trained on [1]. A rendered
#: pixel costs about a quarter to a third of a trained one (one forward pass of a whole frame against a forward and a
#: backward of small crops; the 2-core AVX512-BF16 VM): 100 frames of 320x136 px, 0.53 of the pixels of 250 steps of
#: 8 crops of 64 px, took 1.0 s against those steps' 7.5 s (13%); about 0.3 at 640x272 and 1280x720 px
#: (docs/studies/head_start.md, "The source's map on a large shot"). At 0.6 a refresh costs about 15-18% of the
#: training time.
REFRESH_PIXEL_SHARE = 0.6
#: The source's map renders at most this share of the Input pixels the run's steps train on [1], one frame in every
#: :func:`map_stride`: at a rendered pixel's cost of about 0.3 of a trained one, about a twentieth of the run's time.
#: Rendering one frame in 4 and in 10 kept the focus's gain on bikes at 640x272 px, and one in 10 on the study's
#: smaller clips; 4 frames of 100 lost up to 0.03 dB of its 0.04 (docs/studies/head_start.md, "The source's map on a
#: large shot").
MAP_PIXEL_SHARE = 0.15


def map_stride(frames: int, size: tuple[int, int], steps: int, global_batch: int, crop: int) -> int:
    """Training frames per rendered frame of the source's map [frames]: 1 (every frame) unless ``frames`` of ``size``
    (H, W) [pixels] are more than :data:`MAP_PIXEL_SHARE` of the Input pixels ``steps`` steps of ``global_batch``
    crops of ``crop`` px train on; then the fewest frames per rendered one that keep the map within it (at least one
    frame is rendered). A 100-frame 1280x720 shot, 1,500 steps of 8 crops of 64 px: 13 (8 frames rendered)."""
    budget = MAP_PIXEL_SHARE * max(steps, 0) * global_batch * crop * crop
    rendered = max(1, int(budget // (size[0] * size[1])))
    return max(1, -(-frames // rendered))


def refresh_every(every: int, frames: int, size: tuple[int, int], global_batch: int, crop: int) -> int:
    """The steps between refreshes of the crop focus [steps]: ``every`` (``--init-focus-every``; 0: never), stretched
    so that one renders at most :data:`REFRESH_PIXEL_SHARE` of the Input pixels trained on in between: ``frames`` of
    ``size`` (H, W) [pixels] against ``global_batch`` crops of ``crop`` px per step. A 100-frame 2K shot at 16 crops of
    64 px: every 5,626 steps, so in practice the source's map all run."""
    if every <= 0:
        return 0
    pixels = frames * size[0] * size[1]
    return max(every, -(-int(pixels) // int(REFRESH_PIXEL_SHARE * global_batch * crop * crop)))


def frame_error(net: torch.nn.Module, source: FrameSource, frame: int, device: torch.device) -> np.ndarray:
    """``net``'s mean absolute error over the output channels on training ``frame`` of ``source``: (H, W) float32
    per Input pixel (an upres model's (sH, sW) error averaged over each s x s block)."""
    x = torch.from_numpy(np.ascontiguousarray(source.image(2 * frame))).to(device).float()
    y = torch.from_numpy(np.ascontiguousarray(source.image(2 * frame + 1))).to(device).float()
    out = net(x.permute(2, 0, 1)[None]).float()  # (1, Cout, sH, sW)
    err = (out - y.permute(2, 0, 1)[None]).abs().mean(dim=1, keepdim=True)  # (1, 1, sH, sW)
    if source.scale > 1:
        err = F.avg_pool2d(err, source.scale)
    return err[0, 0].cpu().numpy()


def rendered_frames(frames: int, stride: int) -> np.ndarray:
    """The training frame each of ``frames`` takes its map from, one rendered in every ``stride`` [frames]: the middle
    one of its run of ``stride`` consecutive frames (of the last, shorter run at the end): (frames,) int64. 10 frames,
    stride 4: frames 2, 6 and 9 are rendered.

    Raises:
        ValueError: ``stride`` below 1.
    """
    if stride < 1:
        raise ValueError(f"a map renders one frame in every {stride!r}: the stride must be at least 1")
    first = np.arange(frames) // stride * stride
    return first + (np.minimum(first + stride, frames) - first) // 2


def error_cells(net: torch.nn.Module, source: FrameSource, crop: int, rt: distributed.Runtime,
                stride: int = 1) -> np.ndarray:
    """``net``'s (unwrapped) mean error over each crop position of ``source``'s training frames: (N, GH, GW)
    :data:`CELL_DTYPE`, the same on every rank (:func:`trainer.data.crop_focus.crop_means` per frame), rendered on one
    frame in every ``stride`` (:func:`rendered_frames`; each other frame takes its rendered neighbour's cells). Every
    rank must call it at the same point of the run (one all-reduce when distributed)."""
    takes = rendered_frames(source.count, stride)
    shown = np.unique(takes)
    cells = np.zeros((len(shown), *grid_shape(source.size, crop)), dtype=np.float64)
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad():
            for i in range(rt.env.rank, len(shown), rt.env.world_size):
                cells[i] = crop_means(frame_error(net, source, int(shown[i]), rt.device), crop)
    finally:
        net.train(was_training)
    if rt.backend != "none":
        cells = distributed.all_reduce_array(cells, rt)
    return cells[np.searchsorted(shown, takes)].astype(CELL_DTYPE)


def focus_of(cells: np.ndarray, source: FrameSource, crop: int, share: float) -> CropFocus | None:
    """The crop focus of ``cells`` (:func:`error_cells`, or a checkpoint's copy); None when every cell is 0 (the model
    renders every frame exactly: nothing to focus on, every crop stays uniform).

    Raises:
        ValueError: ``share`` outside 0..1, or a grid that is not ``source``'s (:meth:`CropFocus.from_cells`).
    """
    if not cells.max() > 0:
        return None
    return CropFocus.from_cells(np.asarray(cells, dtype=np.float64), source.size, crop, share)


def model_focus(net: torch.nn.Module, source: FrameSource, crop: int, share: float, rt: distributed.Runtime,
                what: str = "the source model", stride: int = 1) -> tuple[CropFocus | None, np.ndarray]:
    """The crop focus of ``net`` (unwrapped) on ``source``'s training frames and its grid (module doc; logged, naming
    the model as ``what``), rendered on one frame in every ``stride`` (:func:`error_cells`). As :func:`error_cells`,
    every rank calls it at the same point.

    Raises:
        ValueError: ``share`` outside 0..1, or ``stride`` below 1.
    """
    t0 = time.monotonic()
    cells = error_cells(net, source, crop, rt, stride)
    focus = focus_of(cells, source, crop, share)
    shown = -(-source.count // stride)  # one frame of each run of ``stride`` (rendered_frames)
    if focus is None:
        log.info("crop focus: %s renders the training frames exactly; every crop is drawn uniformly", what)
    else:
        log.info("crop focus: %.0f%% of each batch's crops drawn where %s's error is largest (--init-focus; its error "
                 "on %d of the %d training frames took %.1f s)", share * 100, what, shown, source.count,
                 time.monotonic() - t0)
    return focus, cells

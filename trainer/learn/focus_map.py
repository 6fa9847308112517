"""The head start's crop focus: the source model's error on this shot's training frames (``--init-focus``).

Before the first step of a run with ``--init-from``, the source model (the weights just loaded, or on a resume those
loaded again from the source) renders every training frame once; its mean absolute error over the channels, per
Input pixel, weighs where :class:`trainer.data.crop_focus.CropFocus` draws its share of each batch's crops. Rank r
renders frames r, r + N, ... and one all-reduce sums the grids, so every rank holds the same weights; the map
costs one forward pass per frame over the gang, in float32 (the same on any precision), without gradients.
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


def source_focus(net: torch.nn.Module, source: FrameSource, crop: int, share: float,
                 rt: distributed.Runtime) -> CropFocus | None:
    """The crop focus of ``net`` (the source's weights, unwrapped) on ``source``'s training frames (module doc);
    None when the source renders every frame exactly (nothing to focus on: every crop stays uniform, logged).

    Every rank must call it at the same point of the run (one all-reduce when distributed).

    Raises:
        ValueError: ``share`` outside 0..1.
    """
    t0 = time.monotonic()
    size = source.size
    cells = np.zeros((source.count, *grid_shape(size, crop)), dtype=np.float64)
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad():
            for f in range(rt.env.rank, source.count, rt.env.world_size):
                cells[f] = crop_means(frame_error(net, source, f, rt.device), crop)
    finally:
        net.train(was_training)
    if rt.backend != "none":
        cells = distributed.all_reduce_array(cells, rt)
    if not cells.max() > 0:
        log.info("head start: the source model renders every training frame exactly; every crop stays uniform")
        return None
    focus = CropFocus.from_cells(cells, size, crop, share)
    log.info("head start: %.0f%% of each batch's crops drawn where the source model's error is largest "
             "(--init-focus; its error on %d frames took %.1f s)", share * 100, source.count, time.monotonic() - t0)
    return focus

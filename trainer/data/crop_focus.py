"""Crops drawn where the error is: a share of each batch's crops follows a weight per crop position.

A uniform draw spends its crops evenly over a shot, on what a network already renders well (a flat wall, a
blurred background) as much as on what it does not. A head start (``--init-from``) knows better: the source model's
error on the new shot's frames says where the new shot differs from what it learned. ``--init-focus SHARE`` draws
that share of every global batch with probability proportional to the source model's mean L1 error over the crop,
raised to :data:`POWER`; the rest stay uniform (docs/studies/head_start.md, "Crops where the source is wrong").

The weights live on a grid of crop corners every :data:`STRIDE` Input pixels (a 2K frame: 128 x 232 cells, about
120 KiB per frame in float32). A cell's weight is that of the crop at its first corner; a drawn cell gives a corner
uniformly within it, clipped to the last corner a crop can take. The draw comes from its own generator, seeded with
``(seed, 4, step)`` (:data:`STREAM`), and replaces whole rows of the uniform draw's coordinates (frame, y, x; the
flips stay), so the global batch is the same on any number of ranks and after a resume, as
``trainer.data.crops`` promises, and a share of 0 draws nothing.

Shapes: error maps (H, W) float32 per frame, Input pixels; weights (N, GH, GW) float64. No torch here: the error
maps come from :mod:`trainer.learn.focus_map` (the source model run on the frames).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

#: The weight of a crop position is its mean error to this power [1]: measured 2, 8 and 16 at a share of 0.5 on the
#: alike pair (head_start.md): 8 gained most. Higher powers put nearly every focused crop on a few spots.
POWER = 8.0
#: Spacing of the weight grid [Input pixels]: crops 8 px apart overlap by 7/8 of a 64 px crop.
STRIDE = 8
#: The generator stream of the focused draw (0: training crops, 1: previews, 2: augmentation, 3: the advisor's
#: evaluation crops).
STREAM = 4


def grid_shape(size: tuple[int, int], crop: int, stride: int = STRIDE) -> tuple[int, int]:
    """(GH, GW): grid cells of crop corners for frames of ``size`` (H, W) [pixels] and crops of side ``crop``."""
    return tuple(-(-(side - crop + 1) // stride) for side in size)  # type: ignore[return-value]


def crop_means(error: np.ndarray, crop: int, stride: int = STRIDE) -> np.ndarray:
    """Mean of ``error`` (H, W) over the ``crop``-sided window at each grid cell's first corner (:func:`grid_shape`;
    clipped to the last corner a crop can take): (GH, GW) float64, from a summed-area table.

    Raises:
        ValueError: the crop is larger than the map.
    """
    h, w = error.shape
    if crop > h or crop > w:
        raise ValueError(f"a crop of {crop} px does not fit an error map of {w}x{h} px")
    table = np.zeros((h + 1, w + 1))
    table[1:, 1:] = np.asarray(error, dtype=np.float64).cumsum(0).cumsum(1)
    gh, gw = grid_shape((h, w), crop, stride)
    ys = np.minimum(np.arange(gh) * stride, h - crop)[:, None]
    xs = np.minimum(np.arange(gw) * stride, w - crop)[None, :]
    total = table[ys + crop, xs + crop] - table[ys, xs + crop] - table[ys + crop, xs] + table[ys, xs]
    return total / crop ** 2


@dataclass(frozen=True)
class CropFocus:
    """Where the focused share of each batch's crops is drawn (module doc).

    Attributes:
        cdf: (N * GH * GW,) float64 cumulative weights of the grid cells, frame-major; the last is 1.
        grid: (N, GH, GW): frames, grid rows, grid columns.
        size: (H, W) of the Input frames [pixels].
        crop: crop side [Input pixels].
        share: fraction of each global batch drawn by weight, 0..1.
        stride: grid spacing [Input pixels].
    """

    cdf: np.ndarray
    grid: tuple[int, int, int]
    size: tuple[int, int]
    crop: int
    share: float
    stride: int = STRIDE

    @classmethod
    def from_errors(cls, errors: Iterable[np.ndarray], crop: int, share: float, power: float = POWER,
                    stride: int = STRIDE) -> "CropFocus":
        """From one (H, W) error map per frame (any non-negative float, e.g. the mean absolute error over channels).

        Raises:
            ValueError: no maps, maps of different sizes, or as :meth:`from_cells`.
        """
        cells, size = [], None
        for error in errors:
            if size is not None and error.shape != size:
                raise ValueError(f"error maps of {error.shape} and {size} in one shot: every frame must match")
            size = error.shape
            cells.append(crop_means(error, crop, stride))
        if size is None:
            raise ValueError("no error maps: a shot has at least one frame")
        return cls.from_cells(np.stack(cells), size, crop, share, power, stride)

    @classmethod
    def from_cells(cls, cells: np.ndarray, size: tuple[int, int], crop: int, share: float, power: float = POWER,
                   stride: int = STRIDE) -> "CropFocus":
        """From (N, GH, GW) mean errors at the grid's crop corners (:func:`crop_means` per frame) of frames of
        ``size`` (H, W) [pixels].

        Raises:
            ValueError: ``share`` outside 0..1, a grid that is not ``size``'s, a negative or non-finite error, or
                every weight zero (nothing to focus on: use a share of 0).
        """
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"the focused share {share!r} must be within 0..1")
        if cells.ndim != 3 or cells.shape[1:] != grid_shape(size, crop, stride):
            raise ValueError(f"a grid of {cells.shape} does not match frames of {size} px and crops of {crop} px")
        if not np.isfinite(cells).all() or (cells < 0).any():
            raise ValueError("an error map holds a negative or non-finite value")
        top = float(cells.max())
        if not top > 0:
            raise ValueError("every crop's error is 0: nothing to focus on")
        cdf = np.cumsum((np.asarray(cells, dtype=np.float64).ravel() / top) ** power)  # scaled: no underflow
        return cls(cdf / cdf[-1], cells.shape, tuple(size), crop, share, stride)  # type: ignore[arg-type]

    def apply(self, rows: np.ndarray, seed: int, step: int) -> np.ndarray:
        """``rows`` (n, 5) int64 ``frame, y, x, flip_h, flip_v`` (``CropSampler.coords``) with a share of them
        re-drawn by weight: a new (n, 5) array; rows not picked are unchanged."""
        rng = np.random.default_rng([seed, STREAM, step])
        n = len(rows)
        picked = rng.random(n) < self.share
        cell = np.searchsorted(self.cdf, rng.random(n), side="right").clip(0, len(self.cdf) - 1)
        f, gy, gx = np.unravel_index(cell, self.grid)
        jitter = rng.integers(0, self.stride, (2, n))
        h, w = self.size
        out = np.array(rows, dtype=np.int64, copy=True)
        out[picked, 0] = f[picked]
        out[picked, 1] = np.minimum(gy * self.stride + jitter[0], h - self.crop)[picked]
        out[picked, 2] = np.minimum(gx * self.stride + jitter[1], w - self.crop)[picked]
        return out

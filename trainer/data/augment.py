"""Automatic data augmentation (``--augment P``): a random transform and, for some tasks, a random grade per crop.

What it copies: BigCat's *Automatic Data Augmentation* tab (Foundry, Nuke 17: "Using BigCat",
learn.foundry.com/nuke/17.0v1-beta4/content/comp_environment/air_tools/using-bigcat.html) adds "probabilistic grade
and transform changes" so a model generalises to lighting and movement it has not seen. Its probability defaults to
0 (extra variation can hinder a model trained for a single shot); Foundry trained CopyCat's initial weights with 0.5.
Here ``--augment`` is that probability per crop: a crop either keeps exactly what the sampler cut, or takes one draw
of every parameter of :class:`AugmentDraw`.

Transform (:func:`warp`): a rotation by any angle, a zoom and a horizontal flip about the crop's centre, applied to
both sides the same way, so every task stays right. The sampler cuts a *window* around each crop
(:func:`window`) and :func:`warp` resamples the crop out of it. Geometry: a crop of side c rotated by theta and zoomed
by z (z > 1 magnifies) reads a square of side c/z turned by theta, whose bounding box has side
``c * (|cos theta| + |sin theta|) / z``: at most ``sqrt(2) * c / z`` (theta = 45 degrees). A window of side
:data:`WINDOW` x c = 1.8 c therefore holds every angle for z >= sqrt(2)/1.8 = 1/1.27, and the zoom never goes below
0.8; bilinear taps then stay inside the window (reflection padding is only a safety net). Upres: the Ground Truth's
window is s times the Input's and its crop s times the crop; :func:`warp` works in normalised coordinates
(-1..1 over the window), so both sides take the same transform and stay aligned.

Grade (:func:`grade`): gain, gamma and offset on colour channels, never on alpha. Which tasks may take one:

- a matte: grading the Input alone keeps the Ground Truth right (the matte of a darker plate is the same matte),
  and teaches the network to cut the matte under other lighting;
- a deblur, denoise or repair: the *same* grade on both sides keeps the pair right (up to the grade not commuting
  exactly with a blur);
- a colour correction: the Ground Truth *is* a grade of the Input, so grading the Input alone teaches a different
  correction, and grading both sides teaches a different one again: either way the model learns the wrong thing.

So ``--augment-grade auto`` grades the Input of matte tasks only (the caller decides; this module only grades what
it is given). Draws come from numpy's generator seeded ``(seed, stream, step)`` for the whole global batch, like the
crop coordinates (``trainer.data.crops``): each rank slices its own rows, and a resumed run draws what an
uninterrupted one would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

#: Window side over crop side [1]: room for a rotation of any angle at zoom >= sqrt(2)/WINDOW = 1/1.27 (module doc).
WINDOW = 1.8
#: Zoom range [1], log-uniform: 0.8..1.25 = 1/0.8, as likely to magnify as to shrink, and within what WINDOW holds.
ZOOM = (0.8, 1.25)
#: Exposure range [1], log-uniform, shared by the colour channels: about half a stop either way.
EXPOSURE = (0.75, 1 / 0.75)
#: Tint: each colour channel's gain is the exposure times exp(U(-TINT, TINT)) [1]; gains span about 0.71..1.40.
TINT = 0.05
#: Gamma range [1], log-uniform (x ** gamma).
GAMMA = (0.8, 1.25)
#: Offset range [image units], uniform -OFFSET..OFFSET, shared by the colour channels.
OFFSET = 0.02
#: ``F.grid_sample`` padding: never reached inside a :func:`window` (module doc), kept as a safety net.
PADDING = "reflection"


def window(crop: int) -> int:
    """Side of the window the sampler cuts around a crop of side ``crop`` [pixels]: at least ``WINDOW * crop``, and
    ``crop`` plus an even number, so the crop sits exactly in the window's centre (``(window - crop) // 2`` from
    its top-left corner). Raises ValueError for a crop below 1."""
    if crop < 1:
        raise ValueError(f"crop side {crop} must be at least 1 pixel; check --crop-size")
    return crop + 2 * math.ceil((WINDOW - 1) * crop / 2)


@dataclass(frozen=True)
class AugmentDraw:
    """One draw per crop of the global batch (:func:`draw`); ``d[rows]`` is a rank's share.

    Attributes:
        apply: (n,) bool: True where the crop is augmented; the other fields matter only there.
        angle: (n,) float64 rotation [radians], uniform -pi..pi; pi/2 turns the crop as ``torch.rot90(crop, 1, (-2, -1))``.
        zoom: (n,) float64 magnification [1], log-uniform over :data:`ZOOM` (> 1 magnifies).
        flip: (n,) bool: mirror left-right.
        gain: (n, 3) float64 gain per colour channel [1]: exposure (:data:`EXPOSURE`) times tint (:data:`TINT`).
        gamma: (n,) float64 exponent [1], log-uniform over :data:`GAMMA`.
        offset: (n,) float64 added after gain [image units], uniform +-:data:`OFFSET`.
    """

    apply: np.ndarray
    angle: np.ndarray
    zoom: np.ndarray
    flip: np.ndarray
    gain: np.ndarray
    gamma: np.ndarray
    offset: np.ndarray

    def __len__(self) -> int:
        return len(self.apply)

    def __getitem__(self, rows: slice | np.ndarray) -> "AugmentDraw":
        """The draws of ``rows``: a slice of the global batch (a rank's ``slice(start, stop)``) or an index array."""
        return AugmentDraw(*(getattr(self, f)[rows] for f in self.__dataclass_fields__))


def draw(seed: int, step: int, n: int, p: float, stream: int = 2) -> AugmentDraw:
    """The augmentation of the ``n`` crops of the global batch of ``step``, each applied with probability ``p``.

    Deterministic: numpy ``default_rng([seed, stream, step])`` (stream 0 and 1 are the crop coordinates and the
    preview's, ``trainer.data.crops``), every field drawn for every crop whatever ``p`` is, so every rank draws the
    same global batch and slices its rows. Raises ValueError: ``p`` outside 0..1 or ``n`` negative.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"augment probability {p} must be within 0..1; check --augment")
    if n < 0:
        raise ValueError(f"crop count {n} must not be negative")
    rng = np.random.default_rng([seed, stream, step])

    def log_uniform(lo_hi: tuple[float, float], shape) -> np.ndarray:
        return np.exp(rng.uniform(math.log(lo_hi[0]), math.log(lo_hi[1]), shape))

    apply = rng.random(n) < p
    angle = rng.uniform(-math.pi, math.pi, n)
    zoom = log_uniform(ZOOM, n)
    flip = rng.random(n) < 0.5
    gain = log_uniform(EXPOSURE, (n, 1)) * np.exp(rng.uniform(-TINT, TINT, (n, 3)))
    gamma = log_uniform(GAMMA, n)
    offset = rng.uniform(-OFFSET, OFFSET, n)
    return AugmentDraw(apply, angle, zoom, flip, gain, gamma, offset)


def _rows(d: AugmentDraw, rows: slice, b: int) -> AugmentDraw:
    """``d[rows]``, checked against the batch: raises ValueError when it does not have ``b`` rows."""
    mine = d[rows]
    if len(mine) != b:
        raise ValueError(f"augment rows {rows} select {len(mine)} draws for a batch of {b} crops; pass the rank's "
                         "slice of the global batch the draw was made for")
    return mine


def _grid(d: AugmentDraw, crop: int, side: int, device: torch.device) -> torch.Tensor:
    """Sampling grid of the draws ``d`` for crops of side ``crop`` from windows of side ``side``: (k, crop, crop, 2)
    float32 (x, y) in ``grid_sample``'s normalised window coordinates (align_corners=False).

    Output pixel j sits at u = (2j + 1)/crop - 1 over the crop; the centred crop is window = (crop/side) * u, and the
    draw turns, zooms and mirrors that: ``(crop / (side * zoom)) * R(angle) @ diag(-1 if flip else 1, 1) @ (u, v)``.
    Only ``crop/side`` enters, so the Ground Truth's (s*crop, s*side) takes the same transform. Computed in float64
    on ``device`` and rounded once to float32 (``grid_sample`` still maps it to pixels in float32: ~ulp(side))."""
    k = crop / (side * d.zoom)  # (k,) float64

    def col(a: np.ndarray) -> torch.Tensor:  # (k,) -> (k, 1, 1) float64 on device
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64)).to(device)[:, None, None]

    a, b = col(np.where(d.flip, -k, k) * np.cos(d.angle)), col(k * np.sin(d.angle))  # a flip mirrors u
    c, e = col(np.where(d.flip, -k, k) * np.sin(d.angle)), col(k * np.cos(d.angle))
    u = (2 * torch.arange(crop, device=device, dtype=torch.float64) + 1) / crop - 1  # (crop,)
    ux, vy = u[None, None, :], u[None, :, None]  # output columns, output rows
    # float64 and elementwise (no matmul): a row's grid does not depend on which rows share its batch
    return torch.stack([a * ux - b * vy, c * ux + e * vy], -1).float()  # (k, crop, crop, 2)


def warp(windows: torch.Tensor, d: AugmentDraw, rows: slice, crop: int) -> torch.Tensor:
    """Crops of side ``crop`` out of ``windows``, transformed where the draw applies.

    Args:
        windows: (b, C, W, W) any float dtype: windows cut around the crops, the crop centred (``W - crop`` even;
            W = :func:`window` (crop) for the Input, s times that for the Ground Truth with ``crop`` s times too).
        d: the global batch's draw (:func:`draw`).
        rows: this batch's rows of it (a rank's slice).
        crop: side of the crops [pixels].

    Returns:
        (b, C, crop, crop) float32: for a row not applied, exactly the centred crop (a slice: the same values bit
        for bit); for an applied row, the window resampled bilinearly through the draw's rotation, zoom and flip
        about its centre (``F.grid_sample``, align_corners=False, :data:`PADDING`), computed in float32.

    Raises:
        ValueError: not (b, C, W, W), W < crop or ``W - crop`` odd, or ``d[rows]`` not b rows.
    """
    if windows.dim() != 4 or windows.shape[-1] != windows.shape[-2]:
        raise ValueError(f"augment windows must be (b, C, W, W), got {tuple(windows.shape)}")
    b, side = windows.shape[0], windows.shape[-1]
    if side < crop or (side - crop) % 2:
        raise ValueError(f"augment window side {side} must be the crop side {crop} plus an even number of pixels; "
                         "cut windows of trainer.data.augment.window(crop) (times --scale for the Ground Truth)")
    mine = _rows(d, rows, b)
    o = (side - crop) // 2
    out = windows[..., o:o + crop, o:o + crop].to(torch.float32, copy=True)  # (b, C, crop, crop): the centred crops
    on = np.flatnonzero(mine.apply)
    if len(on):
        idx = torch.from_numpy(on).to(windows.device)
        grid = _grid(mine[on], crop, side, windows.device)  # (k, crop, crop, 2)
        out[idx] = F.grid_sample(windows[idx].float(), grid, mode="bilinear", padding_mode=PADDING,
                                 align_corners=False)
    return out


def grade(x: torch.Tensor, d: AugmentDraw, rows: slice, channels: Sequence[int]) -> torch.Tensor:
    """``gain * max(x, 0) ** gamma + offset`` on the listed colour channels of the applied rows.

    Args:
        x: (b, C, h, w) float crops, values >= 0 (linear light; any float dtype, computed in float32).
        d: the global batch's draw (:func:`draw`); rows: this batch's rows of it.
        channels: indices into C of the colour channels to grade, at most 3: the j-th takes ``d.gain[:, j]``.
            Leave alpha out: a matte is never graded.

    Returns:
        A new tensor shaped and typed as ``x``; the other channels and the rows not applied are ``x``'s values.

    Raises:
        ValueError: more than 3 channels, a channel index outside 0..C-1, or ``d[rows]`` not b rows.
    """
    mine = _rows(d, rows, x.shape[0])
    ch = list(channels)
    if len(ch) > 3 or any(not 0 <= c < x.shape[1] for c in ch):
        raise ValueError(f"grade channels {ch} must be at most 3 indices of the {x.shape[1]} channels "
                         "(the colour channels R, G, B; never alpha)")
    out = x.clone()
    on = np.flatnonzero(mine.apply)
    if not len(on) or not ch:
        return out
    sub = mine[on]

    def col(a: np.ndarray) -> torch.Tensor:  # (k, ...) float64 -> (k, m, 1, 1) float32 on x's device
        t = torch.from_numpy(np.ascontiguousarray(a)).to(device=x.device, dtype=torch.float32)
        return t.reshape(len(on), -1, 1, 1)

    idx = torch.from_numpy(on).to(x.device)
    cidx = torch.tensor(ch, device=x.device)
    v = x[idx][:, cidx].float()  # (k, m, h, w)
    graded = col(sub.gain[:, :len(ch)]) * v.clamp_min(0) ** col(sub.gamma) + col(sub.offset)
    out[idx[:, None], cidx[None]] = graded.to(x.dtype)
    return out

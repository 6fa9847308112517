"""What a compositor looks at in a held-out matte: overlap, error, error at the edge, and flicker.

- IoU at 0.5: the Jaccard index of the two mattes thresholded at 0.5 (two empty mattes score 1).
- MAE: the mean absolute difference of the two mattes, 0..1.
- Edge MAE: the MAE inside the band of :data:`EDGE_BAND_PX` pixels either side of the true matte's 0.5 contour
  (the true matte thresholded, dilated minus eroded by a (2r+1)-pixel square), where hair, motion blur and roto
  edges live; the band-restricted error of the trimap-style evaluation of alpha matting (Rhemann et al. 2009,
  "A perceptually motivated online benchmark for image matting", which scores SAD/MSE in the unknown band).
- Flicker: over each pair of consecutive held-out frames, the mean absolute difference between the matte's change
  and the true matte's change, ``|(p[t+1] - p[t]) - (g[t+1] - g[t])|``: the frame-to-frame change the truth does
  not have (a temporal-consistency error of the kind of Lai et al. 2018's warping error, here with the truth's own
  change in place of optical flow).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

#: Half-width of the edge band [pixels]: the band is this many pixels either side of the true 0.5 contour.
EDGE_BAND_PX = 3


@dataclass(frozen=True)
class MatteScores:
    """Mean held-out scores of one matte sequence (each 0..1; IoU higher is better, the others lower).

    Attributes:
        iou: mean IoU at 0.5 [1].
        mae: mean absolute error [1].
        edge_mae: mean absolute error inside the edge band (:data:`EDGE_BAND_PX`) [1].
        flicker: mean change error between consecutive held-out frames [1]; 0.0 when no two held-out frames are
            consecutive.
    """

    iou: float
    mae: float
    edge_mae: float
    flicker: float


def matte_scores(pred: np.ndarray, truth: np.ndarray, threshold: float = 0.5) -> tuple[float, float]:
    """(IoU of ``pred >= threshold`` and ``truth >= threshold`` [1], mean absolute error [1]) of two (H, W) mattes
    0..1. IoU (Jaccard) of two empty mattes is 1."""
    a, b = pred >= threshold, truth >= threshold
    union = np.count_nonzero(a | b)
    iou = 1.0 if union == 0 else np.count_nonzero(a & b) / union
    return float(iou), float(np.mean(np.abs(pred.astype(np.float64) - truth)))


def edge_band(truth: np.ndarray, radius: int = EDGE_BAND_PX) -> np.ndarray:
    """(H, W) bool: the pixels within ``radius`` pixels (a square neighbourhood) of the 0.5 contour of ``truth``
    (H, W) 0..1; all False for a matte with no edge (empty or full)."""
    from scipy.ndimage import binary_dilation, binary_erosion

    inside = truth >= 0.5
    square = np.ones((2 * radius + 1, 2 * radius + 1), bool)
    return binary_dilation(inside, square) & ~binary_erosion(inside, square, border_value=1)


def edge_mae(pred: np.ndarray, truth: np.ndarray, radius: int = EDGE_BAND_PX) -> float:
    """Mean absolute error of ``pred`` against ``truth`` ((H, W) 0..1 each) inside :func:`edge_band`; 0.0 when the
    truth has no edge."""
    band = edge_band(truth, radius)
    return float(np.mean(np.abs(pred[band].astype(np.float64) - truth[band]))) if band.any() else 0.0


def nearest_keyframe(keys: Iterable[int], frame: int) -> int:
    """The keyframe of ``keys`` (frame numbers) nearest ``frame``, the earlier of two as near: the frame whose matte
    the "hold the nearest keyframe" baseline shows at ``frame``.

    Raises:
        ValueError: ``keys`` is empty.
    """
    return min(keys, key=lambda k: (abs(k - frame), k))


def score_sequence(preds: dict[int, np.ndarray], truths: dict[int, np.ndarray]) -> MatteScores:
    """The :class:`MatteScores` of predicted mattes against true ones, both keyed by frame number ((H, W) 0..1).

    Raises:
        ValueError: the two sets of frame numbers differ, or are empty.
    """
    if set(preds) != set(truths) or not preds:
        raise ValueError(f"predicted frames {sorted(preds)[:5]}... and true frames {sorted(truths)[:5]}... must be "
                         "the same non-empty set")
    frames = sorted(truths)
    per = [matte_scores(preds[n], truths[n]) for n in frames]
    edges = [edge_mae(preds[n], truths[n]) for n in frames]
    pairs = [(a, b) for a, b in zip(frames, frames[1:]) if b == a + 1]
    flicker = [float(np.mean(np.abs((preds[b].astype(np.float64) - preds[a]) - (truths[b].astype(np.float64)
                                                                                 - truths[a])))) for a, b in pairs]
    return MatteScores(iou=float(np.mean([p[0] for p in per])), mae=float(np.mean([p[1] for p in per])),
                       edge_mae=float(np.mean(edges)), flicker=float(np.mean(flicker)) if flicker else 0.0)

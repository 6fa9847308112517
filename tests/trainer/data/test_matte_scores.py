"""The held-out matte scores (trainer.data.matte_scores): each figure measures what its docstring says."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.data.matte_scores import (EDGE_BAND_PX, edge_band, edge_mae, matte_scores, nearest_keyframe,
                                        score_sequence)


def disc(h: int = 40, w: int = 40, r: float = 10.0, cx: float = 20.0) -> np.ndarray:
    yy, xx = np.mgrid[:h, :w]
    return ((yy - 20.0) ** 2 + (xx - cx) ** 2 <= r * r).astype(np.float32)


def test_iou_and_mae_of_known_mattes():
    a = np.zeros((4, 4), np.float32)
    a[:2] = 1.0  # 8 pixels
    b = np.zeros((4, 4), np.float32)
    b[1:3] = 1.0  # 8 pixels, 4 shared
    iou, mae = matte_scores(a, b)
    assert iou == pytest.approx(4 / 12) and mae == pytest.approx(8 / 16)
    assert matte_scores(np.zeros((3, 3)), np.zeros((3, 3))) == (1.0, 0.0)


def test_the_edge_band_lies_within_its_radius_of_the_contour_and_nowhere_else():
    truth = disc()
    band = edge_band(truth)
    yy, xx = np.mgrid[:40, :40]
    dist = np.abs(np.hypot(yy - 20.0, xx - 20.0) - 10.0)
    assert band[dist <= 1.0].all()  # the contour itself
    assert not band[dist > EDGE_BAND_PX * np.sqrt(2) + 1].any()  # far inside and far outside
    assert not edge_band(np.zeros((8, 8))).any() and not edge_band(np.ones((8, 8))).any()


def test_edge_mae_sees_an_error_at_the_edge_that_the_whole_frame_mae_dilutes():
    truth = disc(80, 80)
    pred = disc(80, 80, r=11.5)  # a matte 1.5 px too fat: wrong only at the edge
    whole = matte_scores(pred, truth)[1]
    edge = edge_mae(pred, truth)
    assert edge > 5 * whole > 0
    far = truth.copy()
    far[0, 0] = 1.0  # an error far from the edge: the edge figure does not move
    assert edge_mae(far, truth) == 0.0 and matte_scores(far, truth)[1] > 0


def test_flicker_counts_change_the_truth_does_not_have():
    truths = {n: disc(cx=15.0 + n) for n in range(2, 6)}  # a disc moving 1 px a frame
    steady = score_sequence(dict(truths), truths)
    assert steady.flicker == 0.0 and steady.iou == 1.0 and steady.edge_mae == 0.0
    jitter = {n: disc(cx=15.0 + n + (1.5 if n % 2 else 0.0)) for n in truths}  # right on average, jumping
    held = {n: truths[n if n % 2 == 0 else n - 1] for n in truths}  # held: no change where the truth moves
    assert score_sequence(jitter, truths).flicker > score_sequence(held, truths).flicker > 0
    gaps = {n: truths[n] for n in (2, 4)}  # no two frames consecutive: no flicker figure
    assert score_sequence({2: jitter[2], 4: jitter[4]}, gaps).flicker == 0.0


def test_score_sequence_refuses_frames_that_do_not_match():
    with pytest.raises(ValueError, match="same non-empty set"):
        score_sequence({1: disc()}, {2: disc()})


def test_the_nearest_keyframe_is_the_earlier_of_two_as_near():
    keys = [1, 11, 21]
    assert [nearest_keyframe(keys, n) for n in (1, 5, 6, 7, 16, 30)] == [1, 1, 1, 11, 11, 21]
    with pytest.raises(ValueError):
        nearest_keyframe([], 3)

"""The matte evaluation set (benchmarks/lib/matte_set.py) and its recipe study (lib/matte_recipes.py): four shots of
120 frames whose mattes move with their subject, a held-out shot kept out of the decision shots, variant names that
build what they name, and a run that trains and scores."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from lib import matte_recipes as mr  # noqa: E402
from lib import matte_set as ms  # noqa: E402
from trainer.learn.optim import MuonAdam  # noqa: E402
from trainer.learn.unet import PlainUNet as UNetTrunk  # noqa: E402


@pytest.mark.parametrize("name", ms.SHOTS)
def test_each_shot_has_120_frames_whose_semantic_matte_moves_with_its_subject(name):
    shot = ms.load(name)
    t, h, w, c = shot.rgb.shape
    assert (t, c) == (120, 3) and shot.matte.shape == (t, h, w)
    assert 0.0 <= shot.rgb.min() and shot.rgb.max() <= 1.0 and 0.0 <= shot.matte.min() and shot.matte.max() <= 1.0
    assert len(shot.keys) == 12 and len(shot.held) == 108 and not set(shot.keys) & set(shot.held)
    assert 0.03 < shot.matte.mean() < 0.7  # a subject, not an empty or full frame
    soft = ((shot.matte > 0.05) & (shot.matte < 0.95)).mean()
    assert soft > 0.002  # soft edges (segmentation's, or motion blur's)
    first, last = shot.matte[5] >= 0.5, shot.matte[95] >= 0.5
    assert (first ^ last).mean() > 0.02  # the subject moves


def test_a_composite_obeys_the_over_equation_where_its_matte_is_opaque_or_clear():
    """Where the matte is 0 the plate is the background; so a pixel's plate cannot be predicted from the matte
    alone: the set's mattes are not colour keys of their plates."""
    shot = ms.load("astronaut")
    clear = shot.matte[60] == 0.0
    opaque = shot.matte[60] == 1.0
    assert clear.mean() > 0.3 and opaque.mean() > 0.05
    colours_in = shot.rgb[60][opaque].mean(0)
    colours_out = shot.rgb[60][clear].mean(0)
    assert np.abs(colours_in - colours_out).max() < 0.25  # an orange subject over orange-brown: shared colours


def test_the_held_out_shot_is_not_a_decision_shot():
    assert ms.HELD_OUT_SHOT in ms.SHOTS and ms.HELD_OUT_SHOT not in mr.DECISION_SHOTS
    assert len(mr.DECISION_SHOTS) == len(ms.SHOTS) - 1


def test_an_unknown_shot_is_refused_naming_the_choices():
    with pytest.raises(KeyError, match="carphone"):
        ms.load("nope")


@pytest.mark.parametrize("name,opt_type,lr,ema,loss,width", [
    ("cuetrain", torch.optim.Adam, 1e-3, 0.999, "bce+l1+iou", 16),
    ("plain", torch.optim.Adam, 2e-3, 0.0, "bce+l1", 24),
    ("cuetrain-muon-lr0.002-ema0.99-bce-w24", MuonAdam, 2e-3, 0.99, "bce+l1", 24),
])
def test_a_variant_name_builds_what_it_names(name, opt_type, lr, ema, loss, width):
    r = mr.parse(name)
    net, opt = mr.build(r)
    assert isinstance(opt, opt_type) and opt.param_groups[0]["lr"] == lr and (r.ema, r.loss, r.width) == (ema, loss, width)
    assert isinstance(net, UNetTrunk if name.startswith("cuetrain") else mr.PlainUNet)
    with torch.no_grad():
        assert net(torch.rand(1, 3, 16, 16)).shape == (1, 1, 16, 16)
    assert mr.parse("cuetrain-crop96-b16-aug0.5-wu10-k5") == mr.Recipe("cuetrain", 16, "relu", "adam", 1e-3, 0.999,
                                                                       "bce+l1+iou", 96, 16, 0.5, 10, 5)
    with pytest.raises(ValueError, match="unknown token"):
        mr.parse("cuetrain-zzz")


def test_the_default_matte_variant_is_the_trainers_matte_recipe():
    """``cuetrain-muon-lr0.002-bce-fl0.3`` (docs/studies/matte_set.md, lr_floor.md) is what a matte job trains."""
    from trainer.core.config import TrainConfig

    r, job = mr.parse("cuetrain-muon-lr0.002-bce-fl0.3"), TrainConfig("i", "t", "r", target_channels="A")
    assert (r.optimizer, r.lr, r.loss, r.floor, r.ema) == (job.optimizer_name, job.base_lr, job.matte_loss,
                                                           job.cosine_floor, job.ema_decay)
    assert job.architecture_name == "unet" and mr.parse("cuetrain").floor == 0.1


def test_a_short_run_trains_scores_and_beats_nothing_it_should_not(capsys):
    """Training for a few steps gives real held-out scores (in range, and different from an untrained network's),
    and the baselines score the nearest keyframe above the mean keyframe."""
    shot = ms.load("carphone")
    base = mr.baselines(shot)
    assert base["nearest keyframe"]["iou"] > base["mean keyframe"]["iou"] > 0.5
    r = mr.train("cuetrain-lr0.003-ema0", shot, 30, "fp32", 0)
    assert 0.0 <= r["iou"] <= 1.0 and 0.0 < r["edge_mae"] < 1.0 and r["flicker"] >= 0.0
    torch.manual_seed(0)
    untrained = mr.build(mr.parse("cuetrain"))[0]
    held = shot.held
    pred = mr.predict(untrained, shot, held)
    from trainer.data.matte_scores import score_sequence

    assert score_sequence(pred, {i: shot.matte[i] for i in held}).mae > r["mae"]


def test_a_head_start_variant_starts_from_the_source_shots_model(monkeypatch):
    """``fromSHOT`` trains the source once per process (the fine-tuning tokens stripped: its own lr, warmup and
    steps) and starts the variant from its weights; ``sN`` and ``ftX`` set the fine-tune's steps and lr."""
    r = mr.parse("cuetrain-muon-lr0.002-bce-fromcarphone-s500-ft0.001-wu0")
    assert (r.init_from, r.steps, r.ft_lr, r.warmup, r.lr) == ("carphone", 500, 1e-3, 0, 2e-3)
    fits = []
    real_fit = mr._fit

    def fake_fit(recipe, shot, steps, precision, seed, init=None):
        fits.append((recipe, shot.name, steps, init is not None))
        return real_fit(recipe, shot, 2, precision, seed, init)

    monkeypatch.setattr(mr, "_fit", fake_fit)
    monkeypatch.setattr(mr, "_SOURCES", {})
    shot = ms.load("street")
    mr.train("cuetrain-muon-lr0.002-bce-fromcarphone-s500-ft0.001-wu0", shot, 1000, "fp32", 0)
    mr.train("cuetrain-muon-lr0.002-bce-fromcarphone-s333", shot, 1000, "fp32", 0)
    source, tuned, tuned2 = fits
    assert (source[1], source[2], source[3], source[0].lr, source[0].warmup) == ("carphone", mr.SOURCE_STEPS, False,
                                                                                2e-3, 50)
    assert (tuned[1], tuned[2], tuned[3], tuned[0].lr, tuned[0].warmup) == ("street", 500, True, 1e-3, 0)
    assert (tuned2[2], tuned2[3], tuned2[0].lr) == (333, True, 2e-3)  # the source trained once, reused


def test_mixed_targets_repair_the_clips_own_distortion_or_the_head_start_degradation():
    from lib import matte_trainer

    for name in ("carphone", "street"):
        shot = ms.load(name)
        degraded = matte_trainer.mixed_inputs(shot)
        assert degraded.shape == shot.rgb.shape and degraded.dtype == np.float32
        assert 0.0 <= degraded.min() and degraded.max() <= 1.0
        assert 0.01 < np.abs(degraded - shot.rgb).mean() < 0.1  # degraded, still the same pictures
        np.testing.assert_array_equal(degraded, matte_trainer.mixed_inputs(shot))  # the same Inputs every run
    from trainer.demo import _decode, clip_path

    carphone = ms.load("carphone")
    h264 = _decode(clip_path("carphone_distorted.mp4"))[:120].astype(np.float32) / 255.0
    np.testing.assert_array_equal(matte_trainer.mixed_inputs(carphone), h264)

"""A head start trains the v3 network's encoder at a fraction of the peak lr (``--init-encoder-lr``,
``trainer.core.recipe.HEAD_START_ENCODER_LR``): where it was measured by default, nowhere else, through the optimizer
the trainer builds, and as the checkpoint's run did after a resume."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from tests.trainer.learn.test_optim import _grads, _net
from tests.trainer.learn.test_train import NON_DIST, cfg
from trainer.core.config import ConfigError
from trainer.core.recipe import ENCODER_MODULES
from trainer.learn import train as train_mod
from trainer.learn.optim import DeviceMuon, MuonAdam
from trainer.learn.resume import resumed_schedule
from trainer.learn.schedule import build_optimizer
from trainer.record.rundir import RunPaths


def test_a_colour_head_start_with_muon_trains_its_encoder_at_half_the_lr_and_no_other_run_does(pairs, tmp_path):
    assert cfg(pairs, tmp_path, init_from="a").encoder_lr == 0.5
    assert [cfg(pairs, tmp_path, **kw).encoder_lr for kw in (
        {}, {"init_from": "a", "optimizer": "adam"}, {"init_from": "a", "target_channels": "A"},
        {"init_from": "a", "scale": 2}, {"init_from": "a", "model_size": "medium"},
        {"init_from": "a", "architecture": "v1"})] == [1.0] * 6
    assert cfg(pairs, tmp_path, init_from="a", init_encoder_lr=1.0).encoder_lr == 1.0
    assert cfg(pairs, tmp_path, init_from="a", init_encoder_lr=0.0).encoder_lr == 0.0  # a frozen encoder
    for bad, says in (({"init_encoder_lr": 0.5}, "needs init_from"), ({"init_from": "a", "init_encoder_lr": 1.5},
                      "from 0 to 1"), ({"init_from": "a", "init_encoder_lr": 0.5, "optimizer": "adam"}, "with adam"),
                      ({"init_from": "a", "init_encoder_lr": 0.5, "architecture": "v1"}, "trains v1")):
        with pytest.raises(ConfigError, match=f"init_encoder_lr=.*{says}"):
            cfg(pairs, tmp_path, **bad)


def test_the_encoders_muon_weights_step_at_their_factor_and_the_rest_as_before():
    """The same gradients: each encoder weight moves exactly half as far as without the factor (Muon's update does
    not depend on the lr), every other weight and every Adam parameter exactly as far. The first step moves only the
    output conv (it starts at zero, so nothing behind it has a gradient yet): the second step is compared."""
    plain, slowed = _net(), _net()
    opt_plain = MuonAdam(plain, 2e-3, (0.9, 0.9), ns_dtype=torch.float32)
    opt_slowed = MuonAdam(slowed, 2e-3, (0.9, 0.9), ns_dtype=torch.float32,
                          lr_scales={m: 0.5 for m in ENCODER_MODULES["v3"]})
    for net, opt in ((plain, opt_plain), (slowed, opt_slowed)):
        _grads(net)
        opt.step()
        opt.zero_grad()
    before = copy.deepcopy(plain.state_dict())
    assert all(torch.equal(v, slowed.state_dict()[k]) for k, v in before.items())
    for net, opt in ((plain, opt_plain), (slowed, opt_slowed)):
        _grads(net, seed=2)
        opt.step()
    muon = {name for name, p in plain.named_parameters() if any(p is w for w in opt_plain.weights)}
    encoder = {name for name in muon if name.startswith(("encoders.", "downs."))}
    assert len(encoder) == 8 and len(muon) == 20  # v3 small: 6 encoder convs, 2 downsamplings; 20 Muon weights
    moving = set()
    for name, start in before.items():
        moved, half = plain.state_dict()[name] - start, slowed.state_dict()[name] - start
        if name in encoder:
            torch.testing.assert_close(half, 0.5 * moved, rtol=1e-4, atol=1e-7)  # the weights' float32 rounding
            moving |= {name} if moved.abs().sum() > 0 else set()
        else:
            assert torch.equal(half, moved), name
    assert len(moving) >= 5, moving  # each block's second conv and the downsamplings (SkipInit zeroes the second)
    assert opt_slowed.state_dict().keys() == opt_plain.state_dict().keys()  # checkpoints load either way


def test_a_factor_that_would_change_nothing_is_refused_by_name():
    for scales, says in (({"encoder": 0.5}, "no Muon weight .* named 'encoder'"), ({"downs": -1.0}, "is -1.0")):
        with pytest.raises(ValueError, match=says):
            MuonAdam(_net(), 2e-3, (0.9, 0.9), lr_scales=scales)
    with pytest.raises(ValueError, match="2 factors for 3 parameters"):
        DeviceMuon([torch.nn.Parameter(torch.zeros(2, 2)) for _ in range(3)], 1e-3, torch.float32, lr_scales=[1, 1])


def test_the_trainers_optimizer_slows_the_encoder_of_a_head_start_only(pairs, tmp_path):
    net = _net()
    head = build_optimizer(cfg(pairs, tmp_path, init_from="a"), net, 3e-3)
    scales = sorted(head.muon.lr_scales.values())
    assert scales.count(0.5) == 8 and scales.count(1.0) == 12
    assert build_optimizer(cfg(pairs, tmp_path), net, 2e-3).muon.lr_scales == {}


def test_a_head_start_records_its_encoder_lr(pairs, tmp_path):
    train_mod.train(cfg(pairs, tmp_path / "a", steps=2, seed=1), NON_DIST)
    train_mod.train(cfg(pairs, tmp_path / "b", steps=2, init_from=str(tmp_path / "a")), NON_DIST)
    record = json.loads(RunPaths.of(tmp_path / "b").run_json.read_text())
    assert record["config"]["encoder_lr"] == 0.5 and record["state"] == "succeeded"
    assert json.loads(RunPaths.of(tmp_path / "a").run_json.read_text())["config"]["encoder_lr"] == 1.0


def test_a_checkpoint_from_before_the_encoder_lr_resumes_with_one_lr(pairs, tmp_path):
    head = cfg(pairs, tmp_path, init_from="a")
    recorded = {"base_lr": head.base_lr, "cosine_floor": head.cosine_floor, "focus_share": head.focus_share}
    assert resumed_schedule(head, {"config": recorded}).encoder_lr == 1.0
    now = {**recorded, "encoder_lr": 0.5}
    assert resumed_schedule(head, {"config": now}) is head
    given = cfg(pairs, tmp_path, init_from="a", init_encoder_lr=0.5)
    assert resumed_schedule(given, {"config": recorded}) is given  # --init-encoder-lr wins

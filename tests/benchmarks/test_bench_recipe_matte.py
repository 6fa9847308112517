"""benchmarks/bench_recipe.py matte (benchmarks/lib/matte.py): each variant name builds the network, optimizer and loss it names, and a variant
trains and is scored on the held-out pairs."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"))
from lib import matte as bm  # noqa: E402
from trainer.learn.optim import MuonAdam  # noqa: E402
from trainer.learn.unet import PlainUNet as UNetTrunk  # noqa: E402


@pytest.mark.parametrize("name,net_type,opt_type,lr,loss", [
    ("cuetrain-unet-adam", UNetTrunk, torch.optim.Adam, 1e-3, "bce+l1"),
    ("cuetrain-adam-iou", None, torch.optim.Adam, 1e-3, "bce+l1+iou"),
    ("cuetrain-adam-2e-3", None, torch.optim.Adam, 2e-3, "bce+l1"),
    ("cuetrain", None, MuonAdam, 2e-3, "bce+l1"),
    ("cuetrain-l1", None, MuonAdam, 2e-3, "l1"),
    ("unet", bm.PlainUNet, torch.optim.Adam, 1e-3, "bce+l1"),
])
def test_a_variant_name_builds_what_it_names(name, net_type, opt_type, lr, loss):
    net, opt, got_loss = bm.build(name)
    assert isinstance(opt, opt_type) and opt.param_groups[0]["lr"] == lr and got_loss == loss
    if net_type is not None:
        assert isinstance(net, net_type)
    with torch.no_grad():
        assert net(torch.rand(1, 3, 16, 16)).shape == (1, 1, 16, 16)


def test_unet_widths_in_the_name_set_the_trunk():
    net, _, _ = bm.build("cuetrain-unet8x16x32x64-adam")
    assert [d[0].out_channels for d in net.downs] == [8, 16, 32, 64]
    assert [d[0].out_channels for d in bm.build("unet24")[0].modules() if isinstance(d, torch.nn.Sequential)
            and isinstance(d[0], torch.nn.Conv2d)][:3] == [24, 48, 96]


def test_a_variant_trains_on_keyframes_and_is_scored_on_held_out_frames():
    rng = np.random.default_rng(0)
    frames = [rng.random((64, 72, 3), dtype=np.float32) for _ in range(4)]
    pairs = [(f, (f[..., :1] > 0.5).astype(np.float32)) for f in frames]  # the matte is a key on red
    result = bm.train("cuetrain-unet-adam", pairs[:2], pairs[2:], steps=3, precision="fp32", seed=1)
    assert 0.0 <= result["iou"] <= 1.0 and 0.0 < result["mae"] < 1.0 and result["params"] == 118_401

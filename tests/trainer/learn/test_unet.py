"""The ``unet`` network (trainer.learn.unet) and ``--architecture auto``'s choice of it for a matte."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainer.core.channels import ChannelPlan
from trainer.core.config import ConfigError, TrainConfig
from trainer.learn.model import build_model, count_parameters
from trainer.learn.unet import PlainUNet, UNetConfig

MATTE = ChannelPlan(("R", "G", "B"), ("A",))


@pytest.mark.parametrize("size,params", [("small", 118_691), ("medium", 1_947_715), ("large", 17_653_347)])
def test_documented_parameter_counts(size, params):
    assert count_parameters(build_model(size, "unet")) == params


def test_the_trunk_is_a_plain_unet_two_relu_convolutions_a_level_max_pooling_and_concatenated_skips():
    torch.manual_seed(0)
    net = build_model("small", "unet", channels=MATTE)
    assert [d[0].out_channels for d in net.downs] == [16, 32, 64] and net.multiple == 4
    assert [u.convs[0].in_channels for u in net.ups] == [64 + 32, 32 + 16]  # upsampled features + the level's skip
    seen = []
    hooks = [m.register_forward_hook(lambda m, a, o: seen.append(tuple(a[0].shape))) for m in net.downs]
    net(torch.rand(1, 3, 16, 12))
    assert seen == [(1, 3, 16, 12), (1, 16, 8, 6), (1, 32, 4, 3)]  # each level at half the size above
    for h in hooks:
        h.remove()
    x = torch.zeros(1, 16, 4, 4)
    x[0, :, 0, 0] = 1.0  # one bright pixel: max pooling keeps it whole, average pooling would quarter it
    pooled = {}
    net.downs[1].register_forward_hook(lambda m, a, o: pooled.__setitem__("in", a[0]))
    net.downs[1](F.max_pool2d(x, 2))
    assert float(pooled["in"][0, 0, 0, 0]) == 1.0


def test_untrained_rgb_unet_returns_its_input_and_upres_the_bilinear_input():
    x = torch.rand(2, 3, 19, 23)
    with torch.no_grad():
        assert torch.equal(build_model("small", "unet")(x), x)
        up = build_model("small", "unet", scale=2)(x)
    assert torch.equal(up, F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False))


def test_fewer_than_two_levels_is_refused():
    with pytest.raises(ValueError, match=r"widths \(8,\): a U-Net needs at least 2 levels"):
        PlainUNet(UNetConfig(widths=(8,)))


def test_auto_trains_unet_when_every_target_is_a_matte_and_v3_otherwise():
    def cfg(**kw) -> TrainConfig:
        return TrainConfig("in", "gt", "run", **kw)

    assert cfg().architecture == "auto" and cfg().architecture_name == "v3"
    assert cfg(target_channels="A").architecture_name == "unet"
    assert cfg(target_channels="R,G,B,A").architecture_name == "v3"  # colour + alpha: v3 (matte_set.md, mixed)
    assert cfg(scale=2).architecture_name == "v3"
    assert cfg(target_channels="A", architecture="v3").architecture_name == "v3"  # a named network is kept
    assert cfg(architecture="unet").architecture_name == "unet"
    with pytest.raises(ConfigError, match="architecture"):
        cfg(architecture="v4")

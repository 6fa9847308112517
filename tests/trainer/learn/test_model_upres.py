"""Upres networks (trainer.learn.model, ``scale`` 2 and 4): bilinear at init, s x output at any size, scriptable,
recorded in the config; scale 1 is the network it always was (the ESPCN baseline: tests/benchmarks/test_baselines.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from trainer.learn.model import ARCHITECTURES, ModelConfigV1, ModelConfigV3, build_model, count_parameters, model_config


def bilinear(x: torch.Tensor, scale: int) -> torch.Tensor:
    return F.interpolate(x, scale_factor=float(scale), mode="bilinear", align_corners=False)


def nudge(net: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Move every weight a little (as training would), so the zero tail no longer hides the network."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p += 0.05 * torch.randn(p.shape, generator=g)
    return net


@pytest.mark.parametrize("scale", [2, 4])
@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_untrained_upres_model_is_the_bilinear_upscale_at_odd_sizes(architecture, scale):
    net = build_model("small", architecture, scale=scale)
    for h, w in [(37, 51), (1, 1), (8, 16)]:
        x = torch.rand(2, 3, h, w)
        y = net(x)
        assert y.shape == (2, 3, scale * h, scale * w)
        assert torch.equal(y, bilinear(x, scale))  # zero tail: the sub-pixel detail starts at zero


@pytest.mark.parametrize("scale", [2, 4])
@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_trained_upres_model_keeps_its_shape_and_scripts_to_the_same_output(architecture, scale):
    net = nudge(build_model("small", architecture, scale=scale))
    x = torch.rand(1, 3, 33, 20)
    y = net(x)
    assert y.shape == (1, 3, 33 * scale, 20 * scale) and not torch.allclose(y, bilinear(x, scale))
    torch.testing.assert_close(torch.jit.script(net)(x), y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("architecture,tail_channels", [("v1", 12), ("v3", 12)])
def test_the_tail_returns_three_sub_pixel_channels_per_output_pixel(architecture, tail_channels):
    """3 s^2 at scale 2 (a stem packs its stem^2 too: tests/benchmarks/test_baselines.py)."""
    net = build_model("small", architecture, scale=2)
    assert net.tail.out_channels == tail_channels
    assert count_parameters(build_model("small", "v3", scale=2)) == 253_932  # 252,627 + the wider tail


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_scale_1_is_the_same_network_draw_for_draw(architecture):
    torch.manual_seed(0)
    default = build_model("small", architecture)
    after_default = torch.rand(4)
    torch.manual_seed(0)
    explicit = build_model("small", architecture, scale=1)
    assert torch.equal(torch.rand(4), after_default)  # the same number of random draws
    a, b = default.state_dict(), explicit.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert default.output.upscale is None  # scale 1 keeps the residual x + tail path


def test_config_records_the_scale_and_old_dicts_load_as_scale_1():
    cfg = model_config("small", "v3", scale=4)
    assert cfg.scale == 4 and dataclasses.asdict(cfg)["scale"] == 4
    assert model_config("small", "v3").scale == 1 and model_config("small", "v1").scale == 1
    old_v1 = {k: v for k, v in dataclasses.asdict(model_config("small", "v1")).items() if k != "scale"}
    old_v3 = {k: v for k, v in dataclasses.asdict(model_config("small", "v3")).items() if k != "scale"}
    assert ModelConfigV1(**old_v1).scale == 1 and ModelConfigV3(**old_v3).scale == 1


@pytest.mark.parametrize("scale", [0, -2, 1.5, True, "2"])
def test_a_bad_scale_is_refused(scale):
    with pytest.raises(ValueError, match="whole number >= 1"):
        build_model("small", "v3", scale=scale)


def test_a_bad_scale_in_a_config_is_refused_by_the_network():
    from trainer.learn.model import CopyCatUNetV1, CopyCatUNetV3

    with pytest.raises(ValueError, match="scale=1.5 must be a whole number"):
        CopyCatUNetV1(dataclasses.replace(model_config("small", "v1"), scale=1.5))
    with pytest.raises(ValueError, match="scale=0 must be a whole number"):
        CopyCatUNetV3(dataclasses.replace(model_config("small", "v3"), scale=0))

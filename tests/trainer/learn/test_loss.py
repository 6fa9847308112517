"""The loss per crop for named channels (trainer.learn.loss): exactly per_crop_l1 for RGB, L1 on corrections,
binary cross-entropy + L1 (or L1) on mattes, each channel weighing the same, float32 under autocast."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainer.core.channels import ChannelPlan
from trainer.data.crops import per_crop_l1
from trainer.learn.loss import EPS, per_crop_loss, soft_jaccard

MATTE = ChannelPlan(("R", "G", "B"), ("A",))
RGBA_OUT = ChannelPlan(("R", "G", "B"), ("R", "G", "B", "A"))


def pair(channels: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(3, channels, 6, 5, generator=g), torch.rand(3, channels, 6, 5, generator=g)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rgb_default_is_exactly_per_crop_l1(dtype):
    out, target = pair(3)
    out = (out * 3 - 1).to(dtype)  # scene-linear values outside 0..1 are not clamped
    got = per_crop_loss(out, target, ChannelPlan())
    assert got.dtype == torch.float32 and got.shape == (3,)
    assert torch.equal(got, per_crop_l1(out, target))
    assert torch.equal(per_crop_loss(out, target, ChannelPlan(), "l1"), got)  # no matte: --matte-loss is moot


def test_matte_bce_plus_l1_is_the_binary_cross_entropy_plus_l1():
    out, target = pair(1, seed=1)
    got = per_crop_loss(out, target, MATTE)
    p, t = out.double().clamp(EPS, 1 - EPS), target.double()
    expected = F.binary_cross_entropy(p, t, reduction="none").mean(dim=(1, 2, 3)) + (p - t).abs().mean(dim=(1, 2, 3))
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(per_crop_loss(out, target, MATTE, "l1"), (out - target).abs().mean(dim=(1, 2, 3)))


def test_matte_iou_term_is_the_soft_jaccard_loss_of_each_crop():
    out, target = pair(1, seed=3)
    base = per_crop_loss(out, target, MATTE)
    got = per_crop_loss(out, target, MATTE, "bce+l1+iou")
    p, t = out.double(), target.double()
    inter = (p * t).sum(dim=(1, 2, 3))
    expected = 1 - (inter + 1) / (p.sum(dim=(1, 2, 3)) + t.sum(dim=(1, 2, 3)) - inter + 1)
    torch.testing.assert_close((got - base).double(), expected, rtol=1e-5, atol=1e-6)
    full = torch.ones(1, 1, 4, 4)
    assert float(soft_jaccard(full, full)) == 0.0  # a perfect matte: no IoU loss
    assert float(soft_jaccard(torch.zeros_like(full), full)) == pytest.approx(1 - 1 / 17)  # missed all 16 pixels
    assert float(soft_jaccard(torch.zeros_like(full), torch.zeros_like(full))) == 0.0  # an empty crop, kept empty
    assert float(soft_jaccard(full, torch.zeros_like(full))) == pytest.approx(1 - 1 / 17)  # 16 false pixels
    rgba = per_crop_loss(torch.cat([out] * 4, 1), torch.cat([target] * 4, 1), RGBA_OUT, "bce+l1+iou")
    torch.testing.assert_close(rgba, (3 * (out - target).abs().mean(dim=(1, 2, 3)) + got) / 4)  # alpha only


def test_matte_probabilities_and_ground_truth_are_clamped():
    out = torch.tensor([0.0, 1.0, 0.5, 0.25]).reshape(1, 1, 2, 2)
    target = torch.tensor([1.0, 0.0, 1.7, -0.5]).reshape(1, 1, 2, 2)  # out of 0..1: clamped to 1 and 0
    got = per_crop_loss(out, target, MATTE)
    t = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=torch.float64)
    p = torch.tensor([EPS, 1 - EPS, 0.5, 0.25], dtype=torch.float64)
    bce = -(t * p.log() + (1 - t) * (1 - p).log())
    l1 = (torch.tensor([0.0, 1.0, 0.5, 0.25], dtype=torch.float64) - t).abs()
    assert torch.isfinite(got).all()  # log(0) would be -inf
    # rtol 1e-3: 1 - 1e-6 is 0.99999899 in float32, so that pixel's -log(1 - p) is 13.80, not 13.82
    torch.testing.assert_close(got.double(), (bce.mean() + l1.mean()).reshape(1), rtol=1e-3, atol=0)
    assert float(got) > 13.8 / 2  # two pixels at the clamp: about 13.8 nats each


def test_every_channel_weighs_the_same():
    out, target = pair(4, seed=2)
    got = per_crop_loss(out, target, RGBA_OUT)
    l1 = (out - target).abs().mean(dim=(2, 3))  # (b, 4)
    alpha = per_crop_loss(out[:, 3:], target[:, 3:], MATTE)  # the matte's own bce + l1
    torch.testing.assert_close(got, (l1[:, :3].sum(dim=1) + alpha) / 4)
    assert not torch.allclose(got, per_crop_l1(out, target))  # the matte term is not L1 alone


def test_loss_is_float32_under_bf16_autocast_and_has_gradients():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    x, target = torch.rand(2, 3, 8, 8), torch.rand(2, 4, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        raw = conv(x)
        out = torch.cat([raw[:, :3], torch.sigmoid(raw[:, 3:])], dim=1)
        assert out.dtype == torch.bfloat16
        got = per_crop_loss(out, target, RGBA_OUT)
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    torch.testing.assert_close(got, per_crop_loss(out.float(), target, RGBA_OUT))
    got.sum().backward()
    assert conv.weight.grad is not None and conv.weight.grad.abs().sum() > 0


def test_bad_arguments_are_refused():
    out, target = pair(1)
    with pytest.raises(ValueError, match=r"matte_loss='l2' is not one of bce\+l1, bce\+l1\+iou, l1"):
        per_crop_loss(out, target, MATTE, "l2")
    with pytest.raises(ValueError, match=r"must both be \(b, 4, h, w\) for target channels R, G, B, A"):
        per_crop_loss(out, target, RGBA_OUT)
    with pytest.raises(ValueError, match="must both be"):
        per_crop_loss(out, target[:, :, :4], MATTE)

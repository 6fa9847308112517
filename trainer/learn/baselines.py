"""Baseline networks for benchmarks, not offered for training: what cuetrain's own networks must beat."""

from __future__ import annotations

import torch
from torch import nn

from trainer.core.channels import ChannelPlan
from trainer.learn.heads import channel_fields, check_channels, check_scale, tail_and_output


class ESPCN(nn.Module):
    """ESPCN (Shi et al. 2016, "Real-Time Single Image and Video Super-Resolution Using an Efficient
    Sub-Pixel Convolutional Neural Network", CVPR 2016, arXiv:1609.05158), a baseline for upres benchmarks, not offered for training.

    (B, C, H, W) -> (B, C, sH, sW): 5x5 conv to 64 channels, tanh, 3x3 conv to 32, tanh (the paper's
    (f1, n1) = (5, 64), (f2, n2) = (3, 32), f3 = 3 and tanh), then a 3x3 conv to C s^2 channels and
    ``pixel_shuffle`` at the input's resolution. Unlike the paper, the sub-pixel output is added to the bilinear
    upsample of the input (``trainer.learn.heads.SubPixelUpscale``, as cuetrain's networks do) and starts at zero, so the
    untrained network is bilinear interpolation. No downsampling, so no padding.

    With a channel plan ``plan`` whose targets differ from its inputs: (B, Cin, H, W) -> (B, Cout, sH, sW) through
    the networks' named-channel output (:class:`trainer.learn.heads.ChannelOutput`; ``channels`` is then ignored).
    The tail and its output are the networks' own (:func:`trainer.learn.heads.tail_and_output`): at scale 1 the
    identity mapping ``x + raw``, which ``SubPixelUpscale`` is at scale 1.
    """

    def __init__(self, scale: int, channels: int = 3, plan: ChannelPlan | None = None) -> None:
        super().__init__()
        check_scale(scale)
        named = channel_fields(plan)
        cin = named.get("channels", channels)
        residual, bounded = named.get("residual", ()), named.get("bounded", ())
        cout = check_channels(cin, named.get("out_channels", 0), residual, bounded)
        self.in_channels, self.out_channels = cin, cout  # [channels]
        self.body = nn.Sequential(nn.Conv2d(cin, 64, 5, padding=2), nn.Tanh(),
                                  nn.Conv2d(64, 32, 3, padding=1), nn.Tanh())
        # Cout s^2 sub-pixel channels starting at zero, and the networks' own output (trainer.learn.heads)
        self.tail, self.output = tail_and_output(32, cout, scale, 1, residual, bounded)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(x, self.tail(self.body(x)))  # (B, Cin, H, W) -> (B, Cout s^2, H, W) -> (B, Cout, sH, sW)


def build_espcn(scale: int, channels: int = 3, plan: ChannelPlan | None = None) -> ESPCN:
    """An :class:`ESPCN` baseline for ``scale`` (benchmarks only), for the channel plan ``plan`` (None: ``channels``
    in and out). Raises ValueError: ``scale`` not an int >= 1."""
    return ESPCN(scale, channels, plan)

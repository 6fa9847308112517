"""Networks benchmarks compare with, not offered for training: what cuetrain's own networks must beat.

- :class:`ESPCN` (Shi et al. 2016), the upres baseline (``bench_upscale.py``).
- ``v2``: v3's network (``trainer.learn.model.CopyCatUNetV3``) with a 2x space-to-depth stem, the first level at
  half resolution (:data:`MODEL_SIZES_V2`); the time-to-quality study's candidate (docs/studies/time_to_quality.md,
  "Exploration": best on compression artefacts, worst on blur and noise), never a default, so no longer a
  ``--architecture``. :func:`build_model` builds it by name and every product architecture as the trainer does.
"""

from __future__ import annotations

from dataclasses import replace

import common  # noqa: F401  (puts the checkout on sys.path)
import torch
from torch import nn

from trainer.core.channels import ChannelPlan
from trainer.learn.heads import channel_fields, check_channel_fields, check_scale, tail_and_output
from trainer.learn.model import (CopyCatUNetV3, ModelConfigV3, ResBlock, build_model as product_build_model,  # noqa: F401
                                 count_parameters, pad_to_multiple, zero_residual_branches)

#: The v2 sizes (stem 2). Parameter counts (``count_parameters``; tests/benchmarks/test_baselines.py): small
#: 1,012,204 (1.0 M), medium 9,499,740 (9.5 M), large 68,418,252 (68.4 M). Benchmarks may add sizes at run time.
MODEL_SIZES_V2: dict[str, ModelConfigV3] = {
    "small": ModelConfigV3(width=32, enc_blocks=(1, 2), mid_blocks=2, dec_blocks=(1, 2), stem=2),
    "medium": ModelConfigV3(width=48, enc_blocks=(1, 2, 2), mid_blocks=2, dec_blocks=(1, 2, 2), stem=2),
    "large": ModelConfigV3(width=64, enc_blocks=(2, 2, 2, 2), mid_blocks=2, dec_blocks=(2, 2, 2, 2), stem=2),
}


def build_model(size: str, architecture: str, skip_init: bool | None = None, scale: int = 1,
                channels: ChannelPlan | None = None) -> nn.Module:
    """``trainer.learn.model.build_model``, plus ``architecture`` ``v2`` (:data:`MODEL_SIZES_V2`, torch's init
    unless ``skip_init``). Raises ValueError: unknown size or architecture, or ``scale`` not an int >= 1."""
    if architecture != "v2":
        return product_build_model(size, architecture, skip_init, scale, channels)
    check_scale(scale)
    if size not in MODEL_SIZES_V2:
        raise ValueError(f"model size {size!r} is not one of {', '.join(MODEL_SIZES_V2)}")
    net = CopyCatUNetV3(replace(MODEL_SIZES_V2[size], scale=scale, **channel_fields(channels)))
    return zero_residual_branches(net) if skip_init else net


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
        cout = check_channel_fields(cin, named.get("out_channels", 0), residual, bounded)
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

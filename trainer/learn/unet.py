"""The ``unet`` network: a plain U-Net trunk (Ronneberger et al. 2015) under cuetrain's output heads.

Ronneberger, Fischer & Brox, "U-Net: Convolutional Networks for Biomedical Image Segmentation", MICCAI 2015
(arXiv:1505.04597), reduced: each level is two 3x3 convolutions with ReLU; 2x2 max pooling goes down a level;
bilinear upsampling (``align_corners=False``) goes up, and the level's skip is concatenated before its two
convolutions. Padded convolutions keep the frame's size (the paper's are unpadded). The tail and the output heads
are the other networks' (:mod:`trainer.learn.heads`: the identity mapping for RGB repair, sub-pixel upres, and named
channels: a matte is ``sigmoid(raw)``), and the tail starts at zero, so an untrained ``unet`` returns its input, as
the others do; a matte's tail rows alone keep a random draw (an untrained matte is near 0.5, not exactly): under
the trunk's last ReLU a zero row locked the inside of a face at 0.81 on 2 seeds of 6
(``trainer.learn.heads.tail_and_output``).

What it is for: mattes. Segmentation is what this trunk was made for; at the small size (16/32/64 channels, half v3
small's weights) it measured better on a matte from 12 keyframes than v3 small (``benchmarks/bench_recipe.py matte``,
docs/studies/matte_network.md), so ``--architecture auto`` picks it for a run with a matte channel
(``trainer.core.config.TrainConfig.architecture_name``).

Operators: conv2d, relu, max_pool2d, upsample_bilinear2d, cat, plus the heads' (all in libtorch 1.12,
``trainer.export.compat``, and standard ONNX).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainer.learn.heads import ChannelFields, check_channel_fields, check_scale, pad_to_multiple, tail_and_output


@dataclass(frozen=True)
class UNetConfig(ChannelFields):
    """Shape of the ``unet`` network (:class:`PlainUNet`).

    Attributes:
        widths: feature channels of each level, top (full resolution) first; each further level is at half the
            resolution of the one above [channels per level]; at least 2 levels.
        channels, scale, out_channels, residual, bounded: :class:`trainer.learn.heads.ChannelFields` (keyword-only).
    """

    widths: tuple[int, ...]

    @property
    def multiple(self) -> int:
        """Frames are padded to a multiple of this [pixels]: 2 per level below the top."""
        return 2 ** (len(self.widths) - 1)


def _double_conv(cin: int, cout: int) -> nn.Sequential:
    """Two 3x3 convolutions with ReLU: (B, cin, H, W) -> (B, cout, H, W)."""
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())


class _Up(nn.Module):
    """Up a level: bilinear 2x, the skip concatenated, two 3x3 convolutions with ReLU.
    (B, C_below, h/2, w/2), skip (B, C_skip, h, w) -> (B, C_out, h, w).

    A module of its own so TorchScript specialises ``F.interpolate`` on its constant mode: called in the parent's
    loop over the levels, the exported graph kept every mode's operator, ``_upsample_lanczos2d_aa`` included, which
    libtorch 1.12 lacks (``trainer.export.compat``)."""

    def __init__(self, below: int, skip: int, out: int) -> None:
        super().__init__()
        self.convs = _double_conv(below + skip, out)

    def forward(self, y: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        y = F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False)
        return self.convs(torch.cat([y, skip], 1))


class PlainUNet(nn.Module):
    """The ``unet`` network (module doc). (B, Cin, H, W) float32 -> (B, Cout, sH, sW) float32 (s = ``cfg.scale``;
    RGB: Cin = Cout = 3), any H, W >= 1 (padded to :attr:`UNetConfig.multiple` inside, cropped back).

    Raises:
        ValueError: fewer than 2 levels, ``cfg.scale`` not an int >= 1, or bad channel fields
            (``trainer.learn.heads.check_channel_fields``).
    """

    def __init__(self, cfg: UNetConfig) -> None:
        super().__init__()
        if len(cfg.widths) < 2:
            raise ValueError(f"widths {cfg.widths}: a U-Net needs at least 2 levels")
        check_scale(cfg.scale)
        self.in_channels = cfg.channels  # Cin [channels]
        self.out_channels = check_channel_fields(cfg.channels, cfg.out_channels, cfg.residual, cfg.bounded)  # Cout
        self.multiple = cfg.multiple
        w = cfg.widths
        self.downs = nn.ModuleList([_double_conv(cfg.channels if i == 0 else w[i - 1], w[i]) for i in range(len(w))])
        self.ups = nn.ModuleList([_Up(w[i + 1], w[i], w[i]) for i in reversed(range(len(w) - 1))])
        # Cout s^2 sub-pixel channels, starting at zero (the identity; upres: the bilinear input) except a matte's,
        # drawn at random (near 0.5): the trunk ends in a ReLU, under which a zero matte row can lock a face
        self.tail, self.output = tail_and_output(w[0], self.out_channels, cfg.scale, 1, cfg.residual, cfg.bounded,
                                                 drawn_mattes=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = pad_to_multiple(x, self.multiple)  # (B, Cin, H, W) -> (B, Cin, H', W'), multiples of 2**(levels-1)
        skips: list[torch.Tensor] = []
        for i, down in enumerate(self.downs):  # level i: (B, C, h, w) -> (B, w_i, h / 2**i, w / 2**i)
            y = down(y if i == 0 else F.max_pool2d(y, 2))
            skips.append(y)
        for i, up in enumerate(self.ups):  # (B, w_{i+1}, h/2, w/2) + skip (B, w_i, h, w) -> (B, w_i, h, w)
            y = up(y, skips[len(skips) - 2 - i])
        return self.output(x, self.tail(y))  # (B, w_0, H', W') -> (B, Cout s^2, H', W') -> (B, Cout, sH, sW)


#: The ``unet`` sizes. Small is the plain small U-Net's trunk (three levels of 16/32/64 channels): on a matte from
#: 12 keyframes it measured better than the same trunk at v3 small's parameter count (24/48/96: more weights
#: overfit the keyframes; docs/studies/matte_network.md). Medium and large add a level each and double and triple
#: the width (not measured on mattes). Parameters (``count_parameters``, RGB; tests/trainer/learn/test_unet.py):
#: small 118,691, medium 1,947,715, large 17,653,347.
MODEL_SIZES_UNET: dict[str, UNetConfig] = {
    "small": UNetConfig(widths=(16, 32, 64)),
    "medium": UNetConfig(widths=(32, 64, 128, 256)),
    "large": UNetConfig(widths=(48, 96, 192, 384, 768)),
}

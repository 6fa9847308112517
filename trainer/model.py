"""The network only: a residual U-Net for image-to-image tasks (no I/O, no arguments parsing).

``output = input + unet(input)``: the last convolution starts at zero, so an untrained model is the
identity and training learns the correction (denoise, de-artifact, beauty work), as CopyCat does.
Fully convolutional: any frame size works; inputs are padded (replicate) to a multiple of
``2**depth`` and the output is cropped back, so inference runs on full frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the network.

    Attributes:
        base_channels: feature channels at full resolution; doubles at each level down [channels].
        depth: number of 2x downsamplings [levels]; frames are padded to a multiple of 2**depth.
        blocks: residual blocks per level [count].
        channels: image channels in and out (RGB) [channels].
    """

    base_channels: int
    depth: int
    blocks: int
    channels: int = 3


#: The sizes offered to artists. Parameter counts (measured by ``count_parameters``):
#: small 169,843 (0.17 M), medium 4,730,211 (4.7 M), large 42,790,419 (42.8 M); checked in
#: tests/trainer/test_model.py.
MODEL_SIZES: dict[str, ModelConfig] = {
    "small": ModelConfig(base_channels=16, depth=2, blocks=1),
    "medium": ModelConfig(base_channels=32, depth=3, blocks=2),
    "large": ModelConfig(base_channels=48, depth=4, blocks=2),
}


def pad_to_multiple(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """Replicate-pad the bottom and right of ``x`` up to a multiple of ``multiple`` pixels.

    (B, C, H, W) -> (B, C, H', W') with H' = ceil(H / multiple) * multiple (likewise W'); ``x`` itself when
    both are multiples already. The one place every model pads (the exported files' operators depend on it).

    Written as slice copies into one new tensor rather than ``F.pad(mode="replicate")``, so the exported
    TorchScript has no ``aten::pad``: libtorch 1.10 lacks it ("Unknown builtin op: aten::pad",
    pytorch/pytorch#90301). One pass over the frame, like F.pad (benchmarks/bench_pad.py); the output equals
    ``F.pad(x, [0, pw, 0, ph], mode="replicate")`` exactly, gradients to float rounding (tests/trainer/test_model.py).
    """
    h, w = x.shape[-2], x.shape[-1]
    ph = (multiple - h % multiple) % multiple
    pw = (multiple - w % multiple) % multiple
    if ph + pw == 0:
        return x
    out = x.new_empty([x.shape[0], x.shape[1], h + ph, w + pw])
    out[:, :, :h, :w] = x
    out[:, :, :h, w:] = x[:, :, :, w - 1:w]  # repeat the last column (broadcast over pw columns)
    out[:, :, h:, :] = out[:, :, h - 1:h, :]  # repeat the last (already widened) row, corner included
    return out


class ResBlock(nn.Module):
    """conv3x3 -> ReLU -> conv3x3, plus the input. (B, C, H, W) -> (B, C, H, W)."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.conv2 = nn.Conv2d(ch, ch, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.relu(self.conv1(x)))


class Down(nn.Module):
    """Residual blocks then a stride-2 conv. (B, C, H, W) -> skip (B, C, H, W), (B, 2C, H/2, W/2)."""

    def __init__(self, ch: int, blocks: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[ResBlock(ch) for _ in range(blocks)])
        self.down = nn.Conv2d(ch, ch * 2, 3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        skip = self.blocks(x)
        return skip, F.relu(self.down(skip))


class Up(nn.Module):
    """Nearest 2x upsample + conv, concat the skip, 1x1 merge, residual blocks.
    (B, 2C, H/2, W/2), skip (B, C, H, W) -> (B, C, H, W)."""

    def __init__(self, ch: int, blocks: int) -> None:
        super().__init__()
        self.up = nn.Conv2d(ch * 2, ch, 3, padding=1)
        self.merge = nn.Conv2d(ch * 2, ch, 1)
        self.blocks = nn.Sequential(*[ResBlock(ch) for _ in range(blocks)])

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.up(F.interpolate(x, scale_factor=2.0, mode="nearest")))
        return self.blocks(F.relu(self.merge(torch.cat([x, skip], dim=1))))


class CopyCatUNet(nn.Module):
    """Residual U-Net. (B, 3, H, W) float32 -> (B, 3, H, W) float32, any H, W >= 1.

    Values are whatever the training data holds (0..1 for integer formats, scene-linear for EXR).
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        c = cfg.base_channels
        self.multiple = 2 ** cfg.depth
        self.head = nn.Conv2d(cfg.channels, c, 3, padding=1)
        self.downs = nn.ModuleList([Down(c * 2 ** i, cfg.blocks) for i in range(cfg.depth)])
        self.middle = nn.Sequential(*[ResBlock(c * 2 ** cfg.depth) for _ in range(cfg.blocks)])
        self.ups = nn.ModuleList([Up(c * 2 ** i, cfg.blocks) for i in reversed(range(cfg.depth))])
        self.tail = nn.Conv2d(c, cfg.channels, 3, padding=1)
        nn.init.zeros_(self.tail.weight)  # start as the identity: output == input
        nn.init.zeros_(self.tail.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2], x.shape[-1]
        y = pad_to_multiple(x, self.multiple)  # (B, 3, H, W) -> (B, 3, H', W'), H' and W' multiples of 2**depth
        y = F.relu(self.head(y))  # (B, 3, H', W') -> (B, c, H', W')
        skips: list[torch.Tensor] = []
        for down in self.downs:  # each level: (B, C, H, W) -> (B, 2C, H/2, W/2)
            skip, y = down(y)
            skips.append(skip)
        y = self.middle(y)
        for i, up in enumerate(self.ups):  # each level: (B, 2C, H/2, W/2) -> (B, C, H, W)
            y = up(y, skips[len(skips) - 1 - i])
        return x + self.tail(y)[..., :h, :w]


def build_model(size: str) -> CopyCatUNet:
    """The network for a model size name.

    Raises:
        ValueError: unknown size (the valid names are listed).
    """
    if size not in MODEL_SIZES:
        raise ValueError(f"model size {size!r} is not one of {', '.join(MODEL_SIZES)}")
    return CopyCatUNet(MODEL_SIZES[size])


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters [count]."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

"""The networks only: residual U-Nets for image-to-image tasks (no I/O, no arguments parsing).

``output = input + unet(input)``: the last convolution starts at zero, so an untrained model is the
identity and training learns the correction (denoise, de-artifact, beauty work), as CopyCat does.
Fully convolutional: any frame size works; inputs are padded (replicate) to a multiple of the
network's total downsampling and the output is cropped back, so inference runs on full frames.

Three architectures, each in three sizes (:data:`ARCHITECTURES`); each class is named for its architecture:

- ``v3`` (:class:`CopyCatUNetV3`, :class:`ModelConfigV3`, the default for colour and upres): residual blocks at
  every level, the first at full resolution (one residual block each way there: what blur and noise need); down:
  2x2 stride-2 convolutions; up: a 1x1 convolution + ``pixel_shuffle`` (Shi et al. 2016's sub-pixel layout) and
  skips are added (NAFNet), not concatenated, so the full-resolution work costs less than v1's (v1 runs a 3x3
  convolution on the upsampled features and a 1x1 merge of a concatenation there), and what that saves buys more
  residual blocks at the lower levels. Chosen by the time-to-quality benchmark (docs/studies/time_to_quality.md,
  "v3: the default network"): better than v1 on both of its clips at the same inference cost. Its residual blocks
  start as the identity (:data:`SKIP_INIT_ARCHITECTURES`). ``ModelConfigV3.stem`` > 1 adds a space-to-depth stem
  (``pixel_unshuffle``) that puts the first level at 1/stem resolution: the v2 network of the time-to-quality
  study, which the product no longer offers (``benchmarks/lib/baselines.py`` keeps it; a v2 checkpoint is refused by
  :func:`trainer.record.netcheck.network_mismatches`); v3 records ``stem`` 1.
- ``v1`` (:class:`CopyCatUNetV1`, :class:`ModelConfigV1`): the U-Net cuetrain started with, at full resolution from
  the first convolution. Kept unchanged so runs and checkpoints made with it still resume (checkpoints without an
  architecture are v1) and the time-to-quality comparison keeps it as its baseline.
- ``unet`` (:class:`trainer.learn.unet.PlainUNet`): a plain U-Net trunk (two 3x3 convolutions with ReLU per level,
  max pooling down, bilinear upsampling and concatenated skips up; Ronneberger et al. 2015) under the same tail
  and heads; small is the plain small U-Net's 16/32/64 channels. What ``--architecture auto`` trains for a matte
  (``trainer.core.config.TrainConfig.architecture_name``; measured in docs/studies/matte_network.md).

**Upres** (``scale`` s of 2 or 4, ``TrainConfig.scale``): (B, 3, H, W) -> (B, 3, sH, sW). Every architecture
becomes ``output = bilinear(input, s) + pixel_shuffle(tail(features), s)`` (:class:`SubPixelUpscale`, the sub-pixel
convolution of Shi et al. 2016, ESPCN, arXiv:1609.05158): the tail returns 3 s^2 channels at the features'
resolution and still starts at zero, so an untrained upres model returns the bilinearly interpolated input. A
stem composes with it: the tail returns 3 (stem s)^2 channels and one ``pixel_shuffle`` by stem s reaches s x the
input (the tail is learnt, so which sub-pixel goes to which channel is immaterial). ``scale`` 1 builds exactly the
networks above. ``benchmarks/lib/baselines.py`` keeps the paper's own small network (ESPCN), a benchmark baseline.

**Named channels** (``channels``, a :class:`trainer.core.channels.ChannelPlan`; the output heads are in
:mod:`trainer.learn.heads`): the head convolution reads Cin Input channels, the tail returns Cout (x s^2) raw
channels, and each output channel is a correction ``input + raw``, a matte ``sigmoid(raw)`` (0..1; 0.5 untrained)
or ``raw``. No plan or the RGB default builds exactly the networks above (same parameters, draws and outputs).

Every operator is one torch 1.12's TorchScript has and that exports to standard ONNX (opset <= 18):
conv2d, relu, add, slicing, pixel_shuffle/pixel_unshuffle, bilinear upsampling (``upsample_bilinear2d``, ONNX
``Resize``; upres and ``unet`` only), max_pool2d and cat (``unet``), and for named channels sigmoid and cat;
padding goes through :func:`pad_to_multiple`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainer.core.channels import ChannelPlan
# SubPixelUpscale, bilinear, check_scale and pad_to_multiple live in heads; callers import them from here too.
from trainer.learn.heads import (ChannelFields, SubPixelUpscale, bilinear, channel_fields,  # noqa: F401
                                 check_channel_fields, check_scale, pad_to_multiple, tail_and_output)
from trainer.learn.unet import MODEL_SIZES_UNET, PlainUNet, UNetConfig


@dataclass(frozen=True)
class ModelConfigV1(ChannelFields):
    """Shape of the v1 network (:class:`CopyCatUNetV1`).

    Attributes:
        base_channels: feature channels at full resolution; doubles at each level down [channels].
        depth: number of 2x downsamplings [levels]; frames are padded to a multiple of 2**depth.
        blocks: residual blocks per level [count].
        channels, scale, out_channels, residual, bounded: :class:`trainer.learn.heads.ChannelFields` (keyword-only).
    """

    base_channels: int
    depth: int
    blocks: int


#: The v1 sizes. Parameter counts (measured by ``count_parameters``): small 169,843 (0.17 M), medium
#: 4,730,211 (4.7 M), large 42,790,419 (42.8 M); checked in tests/trainer/learn/test_model.py.
MODEL_SIZES_V1: dict[str, ModelConfigV1] = {
    "small": ModelConfigV1(base_channels=16, depth=2, blocks=1),
    "medium": ModelConfigV1(base_channels=32, depth=3, blocks=2),
    "large": ModelConfigV1(base_channels=48, depth=4, blocks=2),
}


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


class CopyCatUNetV1(nn.Module):
    """Residual U-Net. (B, Cin, H, W) float32 -> (B, Cout, sH, sW) float32 (s = ``cfg.scale``; RGB: Cin = Cout
    = 3), any H, W >= 1.

    Values are whatever the training data holds (0..1 for integer formats, scene-linear for EXR; mattes 0..1).

    Raises:
        ValueError: ``cfg.scale`` is not an int >= 1, or bad channel fields
            (``trainer.learn.heads.check_channel_fields``).
    """

    def __init__(self, cfg: ModelConfigV1) -> None:
        super().__init__()
        check_scale(cfg.scale)
        self.in_channels = cfg.channels  # Cin [channels]
        self.out_channels = check_channel_fields(cfg.channels, cfg.out_channels, cfg.residual, cfg.bounded)  # Cout
        c = cfg.base_channels
        self.multiple = 2 ** cfg.depth
        self.head = nn.Conv2d(cfg.channels, c, 3, padding=1)
        self.downs = nn.ModuleList([Down(c * 2 ** i, cfg.blocks) for i in range(cfg.depth)])
        self.middle = nn.Sequential(*[ResBlock(c * 2 ** cfg.depth) for _ in range(cfg.blocks)])
        self.ups = nn.ModuleList([Up(c * 2 ** i, cfg.blocks) for i in reversed(range(cfg.depth))])
        # Cout s^2 sub-pixel channels, starting at zero (the identity; upres: the bilinear input; mattes: 0.5)
        self.tail, self.output = tail_and_output(c, self.out_channels, cfg.scale, 1, cfg.residual, cfg.bounded)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = pad_to_multiple(x, self.multiple)  # (B, 3, H, W) -> (B, 3, H', W'), H' and W' multiples of 2**depth
        y = F.relu(self.head(y))  # (B, 3, H', W') -> (B, c, H', W')
        skips: list[torch.Tensor] = []
        for down in self.downs:  # each level: (B, C, H, W) -> (B, 2C, H/2, W/2)
            skip, y = down(y)
            skips.append(skip)
        y = self.middle(y)
        for i, up in enumerate(self.ups):  # each level: (B, 2C, H/2, W/2) -> (B, C, H, W)
            y = up(y, skips[len(skips) - 1 - i])
        return self.output(x, self.tail(y))  # (B, c, H', W') -> (B, Cout s^2, H', W') -> (B, Cout, sH, sW)


@dataclass(frozen=True)
class ModelConfigV3(ChannelFields):
    """Shape of the v3 network (:class:`CopyCatUNetV3`).

    Attributes:
        width: feature channels of the top level, at 1/``stem`` resolution; doubles at each level down [channels].
        enc_blocks: residual blocks of each level before it is downsampled, top level first [count per level];
            its length is the number of 2x downsamplings below the stem.
        mid_blocks: residual blocks of the lowest level [count].
        dec_blocks: residual blocks of each level after its skip is added, top level first [count per level].
        stem: space-to-depth factor: the first level runs at 1/stem resolution [pixels]; v3 is 1 (full
            resolution). No default: records written before v3 existed omit it and mean 2, the v2 network
            (:func:`model_config_from_dict`), which only ``benchmarks/lib/baselines.py`` still builds.
        channels, scale, out_channels, residual, bounded: :class:`trainer.learn.heads.ChannelFields` (keyword-only).
    """

    width: int
    enc_blocks: tuple[int, ...]
    mid_blocks: int
    dec_blocks: tuple[int, ...]
    stem: int

    @property
    def multiple(self) -> int:
        """Frames are padded to a multiple of this [pixels]: the stem times 2 per level."""
        return self.stem * 2 ** len(self.enc_blocks)


class CopyCatUNetV3(nn.Module):
    """The v3 residual U-Net (module doc). (B, Cin, H, W) float32 -> (B, Cout, sH, sW) float32 (s = ``cfg.scale``;
    RGB: Cin = Cout = 3), any H, W >= 1.

    Raises:
        ValueError: ``enc_blocks`` and ``dec_blocks`` differ in length or are empty, ``cfg.scale`` is not an
            int >= 1, or bad channel fields (``heads.check_channel_fields``).
    """

    def __init__(self, cfg: ModelConfigV3) -> None:
        super().__init__()
        if len(cfg.enc_blocks) != len(cfg.dec_blocks) or not cfg.enc_blocks:
            raise ValueError(f"enc_blocks {cfg.enc_blocks} and dec_blocks {cfg.dec_blocks} need one entry per level")
        check_scale(cfg.scale)
        self.in_channels = cfg.channels  # Cin [channels]
        self.out_channels = check_channel_fields(cfg.channels, cfg.out_channels, cfg.residual, cfg.bounded)  # Cout
        self.stem, self.multiple = cfg.stem, cfg.multiple
        packed = cfg.channels * cfg.stem ** 2  # channels after space-to-depth
        widths = [cfg.width * 2 ** i for i in range(len(cfg.enc_blocks) + 1)]
        self.head = nn.Conv2d(packed, cfg.width, 3, padding=1)
        self.encoders = nn.ModuleList([_blocks(widths[i], n) for i, n in enumerate(cfg.enc_blocks)])
        self.downs = nn.ModuleList([nn.Conv2d(widths[i], widths[i + 1], 2, stride=2) for i in range(len(cfg.enc_blocks))])
        self.middle = _blocks(widths[-1], cfg.mid_blocks)
        levels = list(reversed(range(len(cfg.dec_blocks))))  # the way up runs from the lowest level
        self.ups = nn.ModuleList([nn.Conv2d(widths[i + 1], widths[i] * 4, 1) for i in levels])
        self.decoders = nn.ModuleList([_blocks(widths[i], cfg.dec_blocks[i]) for i in levels])
        # Cout (stem s)^2 channels, starting at zero (the identity; mattes: 0.5)
        self.tail, self.output = tail_and_output(cfg.width, self.out_channels, cfg.scale, cfg.stem, cfg.residual,
                                                 cfg.bounded)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = pad_to_multiple(x, self.multiple)  # (B, 3, H, W) -> (B, 3, H', W'), H' and W' multiples of stem*2**levels
        if self.stem > 1:
            y = F.pixel_unshuffle(y, self.stem)  # (B, 3, H', W') -> (B, 3 s^2, H'/s, W'/s)
        y = self.head(y)  # (B, 3 s^2, H'/s, W'/s) -> (B, c, H'/s, W'/s)
        skips: list[torch.Tensor] = []
        for encoder, down in zip(self.encoders, self.downs):  # each level: (B, C, h, w) -> (B, 2C, h/2, w/2)
            y = encoder(y)
            skips.append(y)
            y = down(y)
        y = self.middle(y)
        for i, (up, decoder) in enumerate(zip(self.ups, self.decoders)):  # (B, 2C, h/2, w/2) -> (B, C, h, w)
            y = F.pixel_shuffle(up(y), 2) + skips[len(skips) - 1 - i]  # (B, 4C, h/2, w/2) -> (B, C, h, w)
            y = decoder(y)
        return self.output(x, self.tail(y))  # (B, c, h, w) -> (B, Cout stem^2 scale^2, h, w) -> (B, Cout, sH, sW)


def _blocks(ch: int, count: int) -> nn.Sequential:
    """``count`` residual blocks of ``ch`` channels (an empty Sequential is the identity)."""
    return nn.Sequential(*[ResBlock(ch) for _ in range(count)])


#: The v3 sizes (no stem: the first level at full resolution), each about the parameter count
#: of the v1 size it replaces. Counts (``count_parameters``; tests/trainer/learn/test_model.py): small 252,627
#: (0.25 M), medium 4,220,579 (4.2 M), large 38,483,379 (38.5 M).
MODEL_SIZES_V3: dict[str, ModelConfigV3] = {
    "small": ModelConfigV3(width=16, enc_blocks=(1, 2), mid_blocks=2, dec_blocks=(1, 2), stem=1),
    "medium": ModelConfigV3(width=32, enc_blocks=(1, 2, 2), mid_blocks=2, dec_blocks=(1, 2, 2), stem=1),
    "large": ModelConfigV3(width=48, enc_blocks=(2, 2, 2, 2), mid_blocks=2, dec_blocks=(2, 2, 2, 2), stem=1),
}

#: Architecture name -> its sizes (every architecture offers the same three size names).
ARCHITECTURES: dict[str, dict[str, ModelConfigV1] | dict[str, ModelConfigV3] | dict[str, UNetConfig]] = {
    "v1": MODEL_SIZES_V1, "v3": MODEL_SIZES_V3, "unet": MODEL_SIZES_UNET}
#: Any network's constructor arguments.
AnyConfig = ModelConfigV1 | ModelConfigV3 | UNetConfig
#: The size names artists pick from.
MODEL_SIZES = tuple(MODEL_SIZES_V3)


def model_config(size: str, architecture: str, scale: int = 1,
                 channels: ChannelPlan | None = None) -> AnyConfig:
    """The constructor arguments of a network (what checkpoints and model.json record), at upres ``scale``, for
    the channel plan ``channels`` (None or the RGB default: RGB in and out, today's network exactly; module doc,
    "Named channels").

    Raises:
        ValueError: unknown architecture or size (the valid names are listed), or ``scale`` not an int >= 1.
    """
    check_scale(scale)
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture {architecture!r} is not one of {', '.join(ARCHITECTURES)}")
    sizes = ARCHITECTURES[architecture]
    if size not in sizes:
        raise ValueError(f"model size {size!r} is not one of {', '.join(sizes)}")
    return replace(sizes[size], scale=scale, **channel_fields(channels))


def model_config_from_dict(data: Mapping[str, Any]) -> AnyConfig:
    """A network config back from its ``dataclasses.asdict`` (a checkpoint's or model.json's ``model_config``; JSON
    lists become tuples): :class:`ModelConfigV3` when it has ``width``, :class:`UNetConfig` when it has ``widths``,
    else :class:`ModelConfigV1`. Keys written before channels were named take their defaults (RGB); a ``width``
    record without ``stem`` was written before v3 existed and is the v2 network (stem 2), so an old v2 run's
    ``model.pt`` still exports to ONNX.

    Raises:
        ValueError: a key the config has not, or a missing required one (both named, with the valid keys).
    """
    cls = UNetConfig if "widths" in data else ModelConfigV3 if "width" in data else ModelConfigV1
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"model_config keys {unknown} are not {cls.__name__} fields ({', '.join(sorted(names))}); "
                         "the file was written by another cuetrain: re-export it with this one")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
    if cls is ModelConfigV3:
        values.setdefault("stem", 2)
    try:
        return cls(**values)
    except TypeError as exc:
        raise ValueError(f"model_config {dict(data)} is incomplete for {cls.__name__}: {exc}") from None


def network(cfg: AnyConfig) -> nn.Module:
    """The network a config describes, with torch's init (:class:`CopyCatUNetV1`, :class:`CopyCatUNetV3` or
    :class:`PlainUNet`)."""
    if isinstance(cfg, UNetConfig):
        return PlainUNet(cfg)
    return CopyCatUNetV1(cfg) if isinstance(cfg, ModelConfigV1) else CopyCatUNetV3(cfg)


#: Architectures whose residual blocks start as the identity (SkipInit, De & Smith 2020, "Batch Normalization
#: Biases Residual Blocks Towards the Identity Function in Deep Networks": each block's last convolution starts
#: at zero, as Goyal et al. 2017 zero each block's last batch-norm scale): v3, chosen by the time-to-quality
#: benchmark (docs/studies/time_to_quality.md, "SkipInit and Adam's beta2 0.9": better at lr 2e-3, the same
#: at 1e-3). v1 keeps torch's init.
SKIP_INIT_ARCHITECTURES = ("v3",)


def zero_residual_branches(net: nn.Module) -> nn.Module:
    """Zero the second convolution (weight and bias) of every :class:`ResBlock` of ``net`` in place, so each block
    starts as the identity; returns ``net``. Only the initial weights change: shapes, checkpoints and exported
    files are the same."""
    for block in (m for m in net.modules() if isinstance(m, ResBlock)):
        nn.init.zeros_(block.conv2.weight)
        nn.init.zeros_(block.conv2.bias)
    return net


def build_model(size: str, architecture: str, skip_init: bool | None = None, scale: int = 1,
                channels: ChannelPlan | None = None) -> nn.Module:
    """The network for a model size and architecture name (see :data:`ARCHITECTURES`), initialised; it returns
    frames ``scale`` x the input's width and height (module doc, "Upres") with the channels of the plan
    ``channels`` (None or the RGB default: today's RGB network, the same parameters and draws; module doc,
    "Named channels").

    ``skip_init``: start every residual block as the identity (:func:`zero_residual_branches`); None = the
    architecture's default (:data:`SKIP_INIT_ARCHITECTURES`). The weights torch draws for the other layers are
    the same either way (the blocks are zeroed after they are drawn).

    Raises:
        ValueError: unknown size or architecture (the valid names are listed), or ``scale`` not an int >= 1.
    """
    net = network(model_config(size, architecture, scale, channels))
    if skip_init is None:
        skip_init = architecture in SKIP_INIT_ARCHITECTURES
    if skip_init:
        zero_residual_branches(net)
    return net


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters [count]."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


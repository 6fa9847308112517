"""How a network's tail becomes its output frame: the RGB residual, upres, and named channels.

The networks of :mod:`trainer.learn.model` end in a convolution (the *tail*) whose raw channels, rearranged by
``pixel_shuffle`` to the output's resolution, become the output in one of two ways:

- **Identity mapping** (the RGB default, and any run whose Ground Truth channels are its Input channels):
  ``output = input + raw`` at scale 1, or :class:`SubPixelUpscale` ``bilinear(input, s) + raw`` at upres. The
  tail starts at zero, so an untrained network returns its input (bilinearly upscaled at ``s`` > 1).
- **Named channels** (:class:`ChannelOutput`, a :class:`trainer.core.channels.ChannelPlan` whose targets differ
  from its inputs: a matte, colour + alpha, ...): output channel j is

  * ``base[residual[j]] + raw_j`` when ``residual[j] >= 0`` (a *correction* of the Input channel of the same
    name; ``base`` is the Input, bilinearly upscaled at ``s`` > 1);
  * ``sigmoid(raw_j)`` when ``bounded[j]`` (a *matte*: 0..1, trained with the matte loss, ``trainer.learn.loss``);
  * ``raw_j`` otherwise (a new channel predicted as it is).

  The tail still starts at zero, so an untrained network returns its Input in corrected channels, 0 in plain
  new ones and **sigmoid(0) = 0.5 everywhere in a matte** (maximum uncertainty: the first binary cross-entropy is
  log 2 per pixel and its gradient points each pixel towards its Ground Truth); the ``unet`` trunk's matte rows
  keep a random draw instead (near 0.5: :func:`tail_and_output`). The tail's bias is not set to
  the logit of a prior coverage: the network is built before any data is read, and a zero tail keeps every
  other weight torch draws the same as the colour network of the same shapes.

Operators (all in libtorch 1.12, ``trainer.export.compat``, and standard ONNX): slicing, ``add``, ``sigmoid`` (on
a float32 cast, ``aten::to``, a no-op in the float32 exports: under bf16 autocast a matte keeps its precision near
0 and 1), ``cat``, ``pixel_shuffle`` and, at upres, ``upsample_bilinear2d`` (ONNX ``Resize``). Sub-pixel layout:
Shi et al. 2016 ("Real-Time Single Image and Video Super-Resolution Using an Efficient Sub-Pixel Convolutional Neural
Network", ESPCN, CVPR 2016, arXiv:1609.05158).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, List

import torch
import torch.nn.functional as F
from torch import nn

from trainer.core.channels import ChannelPlan

#: :class:`ChannelOutput`'s per-channel roles (its forward spells them as the literals 0 and 1).
CORRECT, BOUNDED, PLAIN = 0, 1, 2


def bilinear(x: torch.Tensor, scale: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, C, scale H, scale W) bilinear upsampling (``align_corners=False``): what an untrained
    upres network returns (:class:`SubPixelUpscale`), and the trainer's "input unchanged" loss at ``--scale`` > 1
    (``trainer.learn.divergence``); ``x`` itself at scale 1."""
    if scale == 1:
        return x
    return F.interpolate(x, scale_factor=float(scale), mode="bilinear", align_corners=False)


def pad_to_multiple(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """Replicate-pad the bottom and right of ``x`` up to a multiple of ``multiple`` pixels.

    (B, C, H, W) -> (B, C, H', W') with H' = ceil(H / multiple) * multiple (likewise W'); ``x`` itself when
    both are multiples already. The one place every model pads (the exported files' operators depend on it).

    Written as slice copies into one new tensor rather than ``F.pad(mode="replicate")``, so the exported
    TorchScript has no ``aten::pad``: libtorch 1.10 lacks it ("Unknown builtin op: aten::pad",
    pytorch/pytorch#90301). One pass over the frame, like F.pad (benchmarks/studies/bench_pad.py); the output equals
    ``F.pad(x, [0, pw, 0, ph], mode="replicate")`` exactly, gradients to float rounding (tests/trainer/learn/test_model.py).
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


def check_scale(scale: int) -> None:
    """Raises ValueError: ``scale`` is not an int >= 1."""
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale={scale!r} must be a whole number >= 1 (1: same size; 2 or 4: upres)")


class SubPixelUpscale(nn.Module):
    """The upres output (module doc): ``bilinear(x, scale) + pixel_shuffle(residual, shuffle)``, cropped.

    x (B, C, H, W) and residual (B, C shuffle^2, H'/k, W'/k), where H' >= H and W' >= W are the padded size and
    k = shuffle / scale the features' downsampling (the stem) -> (B, C, scale H, scale W). The interpolation is
    ``F.interpolate(mode="bilinear", align_corners=False)``: ``aten::upsample_bilinear2d`` in TorchScript (in
    libtorch 1.12's operators, ``trainer.export.compat``) and ``Resize`` (linear, half_pixel) in ONNX. Sub-pixel
    layout: Shi et al. 2016 (ESPCN).
    """

    def __init__(self, scale: int, shuffle: int) -> None:
        super().__init__()
        self.scale = scale  # output size over input size [1]
        self.shuffle = shuffle  # pixel_shuffle factor: scale times the features' downsampling [1]

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2], x.shape[-1]
        base = bilinear(x, self.scale)  # (B, C, sH, sW)
        detail = F.pixel_shuffle(residual, self.shuffle)  # (B, C k^2 s^2, H'/k, W'/k) -> (B, C, sH', sW')
        return base + detail[..., :self.scale * h, :self.scale * w]


class ChannelOutput(nn.Module):
    """The output of a network with named channels (module doc, "Named channels").

    x (B, Cin, H, W) and raw (B, Cout shuffle^2, H'/k, W'/k) (H' >= H, W' >= W the padded size, k = shuffle /
    scale the features' downsampling) -> (B, Cout, scale H, scale W): each output channel the correction of its
    Input channel, a sigmoid (0..1) or the raw value. ``shuffle`` 1: ``raw`` is already at the output's size.
    The roles are Python lists, so TorchScript keeps one loop and ONNX export unrolls it into slices and a Concat.
    """

    def __init__(self, scale: int, shuffle: int, residual: Sequence[int], bounded: Sequence[bool]) -> None:
        super().__init__()
        self.scale = scale  # output size over input size [1]
        self.shuffle = shuffle  # pixel_shuffle factor (1: none) [1]
        self.sources: List[int] = [max(int(r), 0) for r in residual]  # Input channel each correction adds to
        self.kinds: List[int] = [CORRECT if r >= 0 else BOUNDED if b else PLAIN for r, b in zip(residual, bounded)]
        self.needs_base = any(k == CORRECT for k in self.kinds)  # no bilinear Input for a pure matte network

    def forward(self, x: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2], x.shape[-1]
        if self.shuffle > 1:
            raw = F.pixel_shuffle(raw, self.shuffle)  # (B, Cout k^2 s^2, H'/k, W'/k) -> (B, Cout, sH', sW')
        raw = raw[..., :self.scale * h, :self.scale * w]  # -> (B, Cout, sH, sW)
        base = bilinear(x, self.scale) if self.needs_base else x  # (B, Cin, sH, sW) when any channel corrects
        outs: List[torch.Tensor] = []
        for j in range(len(self.kinds)):
            kind = self.kinds[j]
            channel = raw[:, j:j + 1]  # (B, 1, sH, sW)
            if kind == 0:  # CORRECT (TorchScript reads no module constants)
                source = self.sources[j]
                outs.append(base[:, source:source + 1] + channel)
            elif kind == 1:  # BOUNDED; float32, so bf16 autocast keeps a matte's precision near 0 and 1
                outs.append(torch.sigmoid(channel.float()))
            else:
                outs.append(channel)
        return torch.cat(outs, dim=1)  # (B, Cout, sH, sW)


@dataclass(frozen=True, kw_only=True)
class ChannelFields:
    """The channel and scale fields every network config shares (``trainer.learn.model.ModelConfigV1``,
    ``ModelConfigV3``, ``trainer.learn.unet.UNetConfig`` subclass it; keyword-only, after each network's own fields).

    Attributes:
        channels: Input channels Cin (RGB: 3) [channels].
        scale: output size over input size in both dimensions (1: same size; 2, 4: upres) [1].
        out_channels: output channels Cout; 0 = ``channels`` [channels].
        residual: per output channel, the Input channel it corrects, or -1 for a new channel; () = the identity
            mapping (output channel j corrects Input channel j; Cout = Cin) (``trainer.learn.model``, "Named
            channels").
        bounded: per output channel, True for a sigmoid (0..1, a matte); () = none.
    """

    channels: int = 3
    scale: int = 1
    out_channels: int = 0
    residual: tuple[int, ...] = ()
    bounded: tuple[bool, ...] = ()


def channel_fields(plan: ChannelPlan | None) -> dict[str, Any]:
    """The channel fields of a network config for ``plan`` (``trainer.learn.model``): ``{}`` for None and the RGB
    default (today's network exactly); ``{"channels": C}`` when the targets are the inputs (identity mapping of C
    channels); else ``channels`` (Cin), ``out_channels`` (Cout), ``residual`` and ``bounded`` (the plan's
    ``matte``)."""
    if plan is None or plan.is_default:
        return {}
    if plan.targets == plan.inputs:
        return {"channels": len(plan.inputs)}
    return {"channels": len(plan.inputs), "out_channels": len(plan.targets), "residual": tuple(plan.residual),
            "bounded": tuple(plan.matte)}


def check_channel_fields(channels: int, out_channels: int, residual: Sequence[int], bounded: Sequence[bool]) -> int:
    """The output channel count Cout of a network config's channel fields (``out_channels`` 0: ``channels``).

    Raises:
        ValueError: a count below 1; ``residual`` or ``bounded`` not one entry per output channel; a residual
            index outside the Input's channels; or an identity mapping (``residual`` empty) with Cout != Cin.
    """
    cout = out_channels or channels
    if channels < 1 or cout < 1:
        raise ValueError(f"channels={channels}, out_channels={out_channels}: a network needs >= 1 channel each way")
    if not residual:
        if cout != channels or bounded:
            raise ValueError(f"out_channels={out_channels} with channels={channels} needs residual (one entry per "
                             "output channel: the Input channel it corrects, or -1); build it from a ChannelPlan")
        return cout
    if len(residual) != cout or (bounded and len(bounded) != cout):
        raise ValueError(f"residual {tuple(residual)} and bounded {tuple(bounded)} need one entry per output "
                         f"channel ({cout})")
    bad = [r for r in residual if not -1 <= r < channels]
    if bad:
        raise ValueError(f"residual {tuple(residual)} names Input channels {bad} of a {channels}-channel Input; "
                         "each entry is an Input channel index 0..channels-1, or -1 for a new channel")
    return cout


def zero_tail(width: int, channels: int, drawn: Sequence[int] = ()) -> nn.Conv2d:
    """A network's tail: a 3x3 convolution ``(B, width, h, w) -> (B, channels, h, w)`` whose weight and bias start at
    zero, so that an untrained network returns its Input (module doc), except the weight rows (output channels) in
    ``drawn``, which keep torch's default draw (the draw happens for every row either way, so every other weight
    of the network is the same)."""
    conv = nn.Conv2d(width, channels, 3, padding=1)
    with torch.no_grad():
        keep = torch.zeros(channels, dtype=torch.bool)
        keep[list(drawn)] = True
        conv.weight[~keep] = 0.0
    nn.init.zeros_(conv.bias)
    return conv


class Output(nn.Module):
    """A network's output from its tail's raw channels (module doc): named channels (:class:`ChannelOutput`), upres
    (:class:`SubPixelUpscale`) or the identity mapping's ``x + raw`` at scale 1.

    x (B, Cin, H, W) and raw (B, Cout (stem scale)^2, H'/stem, W'/stem) (H' >= H, W' >= W the padded size; ``stem``
    the features' downsampling, 1 for full-resolution networks) -> (B, Cout, scale H, scale W). No parameters: a
    network's state dict is the same with or without it.
    """

    __constants__ = ["stem"]  # TorchScript folds it: a network without a stem exports no pixel_shuffle for it

    def __init__(self, scale: int, stem: int, residual: Sequence[int], bounded: Sequence[bool]) -> None:
        super().__init__()
        self.stem = stem  # the features' downsampling before the tail [1]
        self.named = output_head(scale, stem * scale, residual, bounded)  # None: identity mapping
        self.upscale = None if self.named is not None else upscale_head(scale, stem * scale)  # None at scale 1

    def forward(self, x: torch.Tensor, raw: torch.Tensor) -> torch.Tensor:
        if self.named is not None:
            return self.named(x, raw)  # one pixel_shuffle by stem x scale -> (B, Cout, sH, sW)
        if self.upscale is not None:
            return self.upscale(x, raw)  # -> (B, C, sH, sW)
        h, w = x.shape[-2], x.shape[-1]
        if self.stem > 1:
            raw = F.pixel_shuffle(raw, self.stem)  # (B, C stem^2, H'/stem, W'/stem) -> (B, C, H', W')
        return x + raw[..., :h, :w]


def tail_and_output(width: int, out_channels: int, scale: int, stem: int, residual: Sequence[int],
                    bounded: Sequence[bool], drawn_mattes: bool = False) -> tuple[nn.Conv2d, Output]:
    """The zero-started tail (``width`` -> ``out_channels (stem scale)^2`` sub-pixel channels) and the
    :class:`Output` that turns its raw channels into the frame: the end every network of
    :mod:`trainer.learn.model` shares.

    ``drawn_mattes``: a matte channel's tail rows (channel j's ``(stem scale)^2`` sub-pixel rows, j (stem scale)^2
    onwards, ``pixel_shuffle``'s order) keep torch's default draw instead of zero, so the untrained matte is near 0.5
    rather than exactly 0.5. For a trunk that ends in a ReLU (``trainer.learn.unet``): a zero row's first Adam steps
    move every weight by about the lr, all one way (77% of the crops are background), the trunk can then raise the
    matte's logit only by pushing features to the ReLU's 0, where they pass no gradient back, and 2 of 6 seeds locked
    the inside of the face at sigmoid(the tail's bias), 0.81 (docs/studies/matte_network.md, "The stuck face").
    """
    k = (stem * scale) ** 2
    drawn = [j * k + i for j, b in enumerate(bounded) if b and drawn_mattes for i in range(k)]
    return zero_tail(width, out_channels * k, drawn), Output(scale, stem, residual, bounded)


def upscale_head(scale: int, shuffle: int) -> SubPixelUpscale | None:
    """The upres output of an identity-mapping network of ``scale`` (None for 1: the networks' own
    ``x + residual`` path)."""
    return SubPixelUpscale(scale, shuffle) if scale > 1 else None


def output_head(scale: int, shuffle: int, residual: Sequence[int], bounded: Sequence[bool]) -> ChannelOutput | None:
    """The :class:`ChannelOutput` of a network with named channels, or None for an identity mapping
    (``residual`` empty: the networks' own ``x + raw`` / :class:`SubPixelUpscale` path)."""
    if not residual:
        return None
    return ChannelOutput(scale, shuffle, residual, tuple(bounded) or (False,) * len(residual))

"""The training loss per crop, for any channel plan (``--target-channels``, ``--matte-loss``).

Every channel a network outputs gets its own mean over the crop, and the crop's loss is the mean of those, each
channel weighing the same (a matte weighs as much as each colour channel of a colour+alpha run):

- a correction or plain channel (``trainer.core.channels.ChannelPlan``): L1, the mean absolute error. L1 is the
  usual choice for image restoration (Zhao et al., "Loss Functions for Image Restoration with Neural Networks",
  IEEE Transactions on Computational Imaging 3(1), 2017): robust to outliers in the Ground Truth, sharper than
  L2, and scale-independent enough for scene-linear EXR values.
- a matte channel (0..1 from the network's sigmoid, ``trainer.learn.heads``): ``--matte-loss bce+l1`` is the
  per-pixel binary cross-entropy, the standard loss of per-pixel foreground/background segmentation with
  a sigmoid output (as in U-Net, Ronneberger et al., "U-Net: Convolutional Networks for Biomedical Image
  Segmentation", MICCAI 2015, arXiv:1505.04597, and HED, Xie & Tu, "Holistically-Nested Edge Detection", ICCV
  2015, arXiv:1504.06375), plus L1, which weighs the soft edge's in-between values linearly; ``bce+l1+iou`` adds
  the soft Jaccard loss ``1 - (sum p t + 1) / (sum p + sum t - sum p t + 1)`` over each crop (Rahman & Wang,
  "Optimizing Intersection-Over-Union in Deep Neural Networks for Image Segmentation", ISVC 2016; the +1 keeps an
  empty crop's loss defined and pushes its matte towards 0), the differentiable form of the IoU a matte is judged
  by, and is the default (``trainer.core.config.MATTE_LOSSES``: on a matte from 12 keyframes it measured IoU 0.9432
  against ``bce+l1``'s 0.9417, mean of 3 seeds, docs/studies/matte_network.md); ``l1`` is L1 alone.
  Cross-entropy is taken on probabilities clamped to [1e-6, 1 - 1e-6] (so log never sees 0; at most
  -log(1e-6) = 13.8 per pixel) against the Ground Truth clamped to 0..1 (a matte outside 0..1 cannot be
  reached), always in float32, also under bf16/fp16 autocast (torch refuses ``binary_cross_entropy`` under
  CUDA autocast; it is written out here). The matte's L1 uses the same clamped Ground Truth.

The RGB default (``plan.is_default``) is exactly :func:`trainer.data.crops.per_crop_l1`, the trainer's loss
before channels could be named.
"""

from __future__ import annotations

import torch

from trainer.core.channels import ChannelPlan
from trainer.core.config import MATTE_LOSSES
from trainer.data.crops import per_crop_l1

#: Probabilities are clamped to [EPS, 1 - EPS] before the log of the cross-entropy.
EPS = 1e-6


def per_crop_loss(out: torch.Tensor, target: torch.Tensor, plan: ChannelPlan,
                  matte_loss: str = "bce+l1") -> torch.Tensor:  # the trainer passes --matte-loss
    """The loss of each crop (module doc): (b, Cout, h, w) ``out`` (any float dtype: autocast may give bf16 or
    fp16) and (b, Cout, h, w) float32 ``target``, channels in ``plan.targets`` order -> (b,) float32.

    Raises:
        ValueError: ``matte_loss`` is not one of :data:`trainer.core.config.MATTE_LOSSES`, or the shapes differ
            from each other or from the plan's channel count (names both).
    """
    if matte_loss not in MATTE_LOSSES:
        raise ValueError(f"matte_loss={matte_loss!r} is not one of {', '.join(MATTE_LOSSES)} (--matte-loss)")
    if out.shape != target.shape or out.dim() != 4 or out.shape[1] != len(plan.targets):
        raise ValueError(f"loss: output {tuple(out.shape)} and Ground Truth {tuple(target.shape)} must both be "
                         f"(b, {len(plan.targets)}, h, w) for target channels {', '.join(plan.targets)}")
    if plan.is_default:
        return per_crop_l1(out, target)
    with torch.autocast(device_type=out.device.type, enabled=False):
        return _per_channel(out.float(), target.float(), plan.matte, matte_loss).mean(dim=1)


def _per_channel(out: torch.Tensor, target: torch.Tensor, matte: tuple[bool, ...], matte_loss: str) -> torch.Tensor:
    """(b, C, h, w) float32 pair -> (b, C) float32: each channel's loss (L1, or the matte loss on mattes)."""
    mattes = [i for i, m in enumerate(matte) if m]
    if not mattes:
        return (out - target).abs().mean(dim=(2, 3))
    truth = target.clone()
    truth[:, mattes] = target[:, mattes].clamp(0.0, 1.0)
    loss = (out - truth).abs().mean(dim=(2, 3))  # (b, C) L1 of every channel
    if matte_loss.startswith("bce+l1"):
        p = out[:, mattes].clamp(EPS, 1.0 - EPS)
        t = truth[:, mattes]
        bce = -(t * torch.log(p) + (1.0 - t) * torch.log1p(-p))  # (b, M, h, w) [nats]
        extra = torch.zeros_like(loss)
        extra[:, mattes] = bce.mean(dim=(2, 3))
        if matte_loss == "bce+l1+iou":
            extra[:, mattes] += soft_jaccard(out[:, mattes], t)
        loss = loss + extra
    return loss


def soft_jaccard(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """(b, M, h, w) float32 mattes ``p`` (the network's, 0..1) and ``t`` (Ground Truth, 0..1) -> (b, M) float32 soft
    Jaccard loss ``1 - (sum p t + 1) / (sum p + sum t - sum p t + 1)`` per crop and channel, 0..1 (module doc;
    Rahman & Wang, ISVC 2016). Sums over the crop's pixels; the +1 keeps an empty crop defined."""
    inter = (p * t).sum(dim=(2, 3))
    union = p.sum(dim=(2, 3)) + t.sum(dim=(2, 3)) - inter
    return 1.0 - (inter + 1.0) / (union + 1.0)

"""Mattes from 12 keyframes: cuetrain's matte model against a plain U-Net and two baselines, in one run.

Data: ``cuetrain demo --task matte``'s (``trainer.demo``): the 120 carphone frames, each with the carphone man's
semantic matte (``trainer.demo.person_matte``, the carphone shot of ``lib/matte_set.py``); every 10th frame (1, 11,
..., 111) is a keyframe the networks train
on, and every other frame is held out.

Variants, each trained for ``--steps`` steps on the same crops (``trainer.data.crops.CropSampler``, RGB in, the
matte out) in this process, one after the other:

- ``cuetrain-unet-adam-iou``: what the trainer trains for a matte by default (``--architecture auto``,
  ``--optimizer auto``, ``--matte-loss bce+l1+iou``): ``build_model("small", "unet", channels=RGB -> A)``
  (``trainer.learn.unet``: a plain U-Net trunk of 16/32/64 channels under cuetrain's zero-started tail and sigmoid
  head), Adam lr 1e-3, betas (0.9, 0.999), the matte loss ``bce+l1+iou``, 50 warmup updates then cosine to lr/10,
  EMA 0.999 evaluated; ``cuetrain-unet-adam``: the same with ``bce+l1``;
- ``cuetrain``: ``build_model("small", "v3", channels=RGB -> A)`` (a sigmoid matte channel, ``trainer.learn.model``)
  with the demo's recipe (Muon for the hidden convolutions, Adam betas (0.9, 0.9), lr 2e-3, 50 warmup updates then
  cosine to lr/10, EMA 0.999 evaluated) and the matte loss ``bce+l1`` (``trainer.learn.loss``);
- ``cuetrain-aug``: the same with ``--augment 0.5`` (a random rotation, zoom and flip of both sides and a grade of
  the Input, ``trainer.data.augment``; Foundry trained CopyCat's initial weights at 0.5);
- ``cuetrain-l1``: the same as ``cuetrain`` with the matte loss ``l1``;
- ``cuetrain-adam``: the same network and loss with Adam, lr 1e-3, betas (0.9, 0.999) (the trainer's matte default
  before ``unet``);
- ``cuetrain-v1-adam``: ``cuetrain-adam`` with the v1 network (``--architecture v1``: concatenated skips, as U-Nets);
- ``cuetrain-adam-iou``: ``cuetrain-adam`` with the matte loss ``bce+l1+iou`` (a soft Jaccard term);
- any other combination of the suffixes :func:`build` reads (e.g. ``cuetrain-adam-2e-3-iou``,
  ``cuetrain-v1-adam-iou``, ``cuetrain-adam-aug``);
- ``unet``: a plain small U-Net (:class:`PlainUNet`: three levels of two 3x3 convolutions, 16/32/64 channels, max
  pooling down, bilinear upsampling and concatenated skips up, a sigmoid), BCE + L1 on the matte, Adam lr 1e-3,
  the same schedule and EMA.

Baselines: the mean keyframe matte, and holding the nearest keyframe's matte.

Printed: held-out IoU at 0.5 and mean absolute error (``trainer.data.matte_scores``) per variant and baseline:
with ``--seeds 0,1,2`` each variant trains once per seed (weights and crops), and the table shows the mean and each
seed's IoU (the spread between seeds is about as large as the differences between variants: compare means).

Run (under the heavy lock on a shared host; ~2 min per variant and seed on 2 quiet cores):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_recipe.py matte [--steps 3000] [--variants ...] \
        [--seeds 0,1,2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
import os
from pathlib import Path

import common
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trainer.core.channels import RGB, ChannelPlan
from trainer.data.crops import CropSampler
from trainer.data.matte_scores import matte_scores, nearest_keyframe
from trainer.data.sources import FramesInMemory
from trainer.demo import MATTE_KEYFRAME_EVERY, _decode, _matte_frames, clip_path
from trainer.learn.ema import WeightEMA
from trainer.learn.loss import per_crop_loss
from trainer.learn.heads import channel_fields
from trainer.learn.model import build_model, count_parameters
from trainer.learn.unet import PlainUNet as PlainUNetTrunk
from trainer.learn.unet import UNetConfig
from trainer.learn.optim import MuonAdam
from trainer.learn.precision import resolve_precision
from trainer.learn.schedule import lr_at

PLAN = ChannelPlan(RGB, ("A",))
VARIANTS = ("cuetrain-unet-adam-iou", "cuetrain-adam", "unet")


class PlainUNet(nn.Module):
    """A plain small U-Net (Ronneberger et al. 2015, reduced): (B, 3, H, W) -> (B, 1, H, W) matte in 0..1, H and W
    multiples of 4. Levels of two 3x3 convolutions with ``act`` (ReLU by default) at w, 2w and 4w channels (16, 32,
    64 by default); 2x2 max pooling down; bilinear upsampling and concatenated skips up; a 1x1 convolution and a
    sigmoid (on a float32 cast with ``float32_sigmoid``, as cuetrain's head; else in autocast's dtype)."""

    def __init__(self, w: int = 16, float32_sigmoid: bool = False, act: type[nn.Module] = nn.ReLU) -> None:
        super().__init__()
        self.float32_sigmoid = float32_sigmoid

        def block(i: int, o: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), act(), nn.Conv2d(o, o, 3, padding=1), act())

        self.d1, self.d2, self.mid = block(3, w), block(w, 2 * w), block(2 * w, 4 * w)
        self.u2, self.u1 = block(6 * w, 2 * w), block(3 * w, w)
        self.out = nn.Conv2d(w, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s1 = self.d1(x)
        s2 = self.d2(F.max_pool2d(s1, 2))
        y = self.mid(F.max_pool2d(s2, 2))
        y = self.u2(torch.cat([F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False), s2], 1))
        y = self.u1(torch.cat([F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False), s1], 1))
        raw = self.out(y)
        return torch.sigmoid(raw.float() if self.float32_sigmoid else raw)


def load() -> tuple[list, list]:
    """(keyframe pairs, held-out pairs): (Input (H, W, 3), matte (H, W, 1)) float32 0..1."""
    frames = _matte_frames(_decode(clip_path("carphone_pristine.mp4")))
    pairs = [(np.ascontiguousarray(f[..., :3]), np.ascontiguousarray(f[..., 3:])) for f in frames]
    keys = [p for i, p in enumerate(pairs) if i % MATTE_KEYFRAME_EVERY == 0]
    return keys, [p for i, p in enumerate(pairs) if i % MATTE_KEYFRAME_EVERY != 0]


def build(name: str) -> tuple[nn.Module, object, str]:
    """(network, optimizer, matte loss) of a variant: ``unet`` (``unetN``: N channels at the top level), or
    ``cuetrain`` with any of the suffixes ``-v1`` (the v1 network), ``-unet`` (the ``unet`` network,
    ``trainer.learn.unet``), ``-adam`` (Adam, betas (0.9, 0.999), lr 1e-3; else the demo's Muon recipe at 2e-3),
    ``-2e-3`` (Adam at lr 2e-3), ``-iou`` (matte loss ``bce+l1+iou``), ``-l1`` (``l1``), ``-aug``
    (``--augment 0.5``, :func:`train`) and ``-nograde`` (with ``-aug``: no random grade, ``--augment-grade off``)."""
    if name.startswith("unet"):  # unet: the plain U-Net; unetN: N channels at the top level; -f32: float32 sigmoid
        base = name.split("-")[0]
        net = PlainUNet(int(base[4:] or 16), "-f32" in name).to(memory_format=torch.channels_last)
        return net, torch.optim.Adam(net.parameters(), lr=1e-3), "bce+l1"
    arch = "v1" if "-v1" in name else "unet" if "-unet" in name else "v3"
    net = build_model("small", arch, channels=PLAN).to(memory_format=torch.channels_last)
    for token in name.split("-"):  # -unetW1xW2x...: a unet of these widths, e.g. -unet12x24x48x96
        if token.startswith("unet") and "x" in token:
            widths = tuple(int(w) for w in token[4:].split("x"))
            net = PlainUNetTrunk(replace(UNetConfig(widths), **channel_fields(PLAN))).to(memory_format=torch.channels_last)
    loss = "bce+l1+iou" if "-iou" in name else "l1" if name.endswith("-l1") else "bce+l1"
    if "-adam" in name:  # the trainer's defaults for a matte: Adam, the small size's lr 1e-3, betas (0.9, 0.999)
        return net, torch.optim.Adam(net.parameters(), lr=2e-3 if "-2e-3" in name else 1e-3), loss
    return net, MuonAdam(net, 2e-3, (0.9, 0.9)), loss


@torch.no_grad()
def predict(net: nn.Module, frames: list[np.ndarray]) -> list[np.ndarray]:
    """The network's matte of each full frame: (H, W, 3) float32 0..1 -> (H, W) float32 (padded to a multiple of 4
    by replication, cropped back), in eval mode (train mode restored after)."""
    net.eval()
    out = []
    for inp in frames:
        h, w = inp.shape[:2]
        x = torch.from_numpy(inp).permute(2, 0, 1)[None]
        x = F.pad(x, [0, -w % 4, 0, -h % 4], mode="replicate")
        out.append(net(x)[0, 0, :h, :w].float().numpy())
    net.train()
    return out


def scores(net: nn.Module, held: list) -> tuple[float, float]:
    """Mean held-out (IoU at 0.5, MAE) of the network's fp32 matte (:func:`predict`)."""
    preds = predict(net, [inp for inp, _ in held])
    out = [matte_scores(p, matte[..., 0]) for p, (_, matte) in zip(preds, held)]
    return float(np.mean([o[0] for o in out])), float(np.mean([o[1] for o in out]))


def train(name: str, keys: list, held: list, steps: int, precision: str, seed: int = 0) -> dict:
    """Train a variant from ``seed`` (weights and crops); its held-out scores and training seconds."""
    torch.manual_seed(seed)
    net, opt, loss = build(name)
    sampler = CropSampler(FramesInMemory(keys), 64, 8, seed=seed, memory_format=torch.channels_last,
                          augment=0.5 if "-aug" in name else 0.0,
                          grade_sides="none" if "-nograde" in name else "input")
    peak = opt.param_groups[0]["lr"]
    ema = WeightEMA(net, 0.999)

    def matte_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # (B,) per crop
        return per_crop_loss(out.float(), target, PLAN, loss)

    secs = common.train_loop(net, opt, sampler, steps, matte_loss, lambda step: lr_at(step, steps, peak, 50, "cosine"),
                             resolve_precision(precision, torch.device("cpu")).autocast, [ema])
    iou, mae = scores(ema.module, held)
    print(f"  {name} seed {seed}: IoU {iou:.4f}  MAE {mae:.4f}  ({secs:.0f} s, {count_parameters(net):,} parameters)",
          flush=True)
    return {"iou": iou, "mae": mae, "train_s": secs, "params": count_parameters(net)}


def baselines(keys: list, held: list) -> dict:
    """The mean keyframe matte and the nearest keyframe's matte, scored on the held-out frames."""
    key_frames = [i for i in range(len(keys) + len(held)) if i % MATTE_KEYFRAME_EVERY == 0]
    held_frames = [i for i in range(len(keys) + len(held)) if i % MATTE_KEYFRAME_EVERY != 0]
    mean = np.mean([m[..., 0] for _, m in keys], axis=0)

    def nearest(i: int) -> np.ndarray:
        return keys[key_frames.index(nearest_keyframe(key_frames, i))][1][..., 0]

    out = {}
    for name, pick in (("mean keyframe", lambda i: mean), ("nearest keyframe", nearest)):
        s = [matte_scores(pick(i), m[..., 0]) for i, (_, m) in zip(held_frames, held)]
        out[name] = {"iou": float(np.mean([a for a, _ in s])), "mae": float(np.mean([b for _, b in s]))}
    return out


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """Parse ``argv`` (the arguments after the task's name) and run; ``prog`` names the command in --help."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seeds", default="0", help="seeds of weights and crops, e.g. 0,1,2: each variant trains once "
                    "per seed; the table shows the mean and each seed's IoU")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    keys, held = load()
    print(f"bench_recipe matte: {len(keys)} keyframes, {len(held)} held out, {a.steps} steps, training "
          f"{resolve_precision(a.precision, torch.device('cpu')).name}, load {os.getloadavg()[0]:.2f}", flush=True)
    seeds = [int(x) for x in a.seeds.split(",")]
    results = baselines(keys, held)
    for name in a.variants.split(","):
        runs = [train(name, keys, held, a.steps, a.precision, seed) for seed in seeds]
        results[name] = {"iou": float(np.mean([r["iou"] for r in runs])), "mae": float(np.mean([r["mae"] for r in runs])),
                         "seeds": dict(zip(seeds, runs))}
        if a.json:  # after every variant: a long run survives an interruption
            tmp = a.json.with_name(a.json.name + ".tmp")
            tmp.write_text(json.dumps({"steps": a.steps, "seeds": seeds, "results": results}, indent=1))
            tmp.replace(a.json)
    print("\n| variant | IoU at 0.5 (mean) | MAE (mean) | IoU per seed |\n|---|---|---|---|")
    for name, r in results.items():
        per = ", ".join(f"{x['iou']:.4f}" for x in r.get("seeds", {}).values())
        print(f"| {name} | {r['iou']:.4f} | {r['mae']:.4f} | {per} |")


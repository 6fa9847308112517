"""Upres x2 (``--scale 4``: x4): cuetrain's network against bicubic and a plain ESPCN, trained side by side in one
run.

Two clips of real footage, every 6th frame held out (as ``cuetrain demo`` holds out):

- ``carphone``: ``carphone_pristine.mp4`` (144x176) is the Ground Truth; the Input is it reduced by
  ``trainer.demo.bicubic_resize`` (Pillow's antialiased bicubic: the degradation of the super-resolution benchmarks),
  then rounded to 8 bits, as the demo's PNGs are (``cuetrain demo --task upscale``'s data).
- ``bikes``: the first 120 frames of ``bikes.mp4`` halved (2x2 mean, as bench_time_to_quality's second clip) are the
  Ground Truth; the Input is reduced the same way.
- ``bunny`` (kept out of recipe decisions, only with ``--clips``): the first 120 frames of ``bigbuckbunny.mp4`` at a
  quarter size (4x4 mean), reduced the same way.

Networks, each trained for the same steps on the same crops (``trainer.data.crops.CropSampler``, seeded by
``--seed``: Input crops of ``--crop`` px, Ground Truth crops ``--scale`` times that), in this process, one after the
other:

- ``cuetrain``: ``trainer.learn.model.build_model("small", "v3", scale=2)`` (or 4) with the demo's recipe (Muon for the
  hidden convolutions and Adam with betas (0.9, 0.9) for the rest, lr 2e-3, 50 warmup updates then cosine to the
  trainer's upres floor (:func:`default_floor`), EMA 0.999 of the weights evaluated), L1 loss: what
  ``cuetrain demo --task upscale`` trains.
- ``cuetrain-flX``: the same, with the cosine ending at X of the peak lr (``--lr-floor X``).
- ``espcn``: ``baselines.build_espcn(2)`` (Shi et al. 2016, over a bilinear upsample), Adam (lr 1e-3,
  betas (0.9, 0.999), Kingma & Ba's), the same warmup and EMA and loss, the cosine to Adam's floor (a tenth).

Printed per clip: held-out PSNR of the bicubic upscale, of each network's fp32 output and its gain over bicubic,
and the median ms of fp32 inference per 2K output frame (1024x540 in, 2048x1080 out) with ``--threads`` threads.

Run (under the heavy lock on a shared host; ~6 min at the defaults on 2 cores):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_recipe.py upscale [--steps 3000] [--clips carphone,bikes]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import common
import numpy as np
import torch

from trainer.core.config import TrainConfig
from trainer.data.crops import CropSampler, per_crop_l1
from trainer.data.sources import FramesInMemory
from trainer.demo import HOLDOUT_EVERY, _decode, bicubic_resize, clip_path
from trainer.export.infer import psnr
from trainer.learn.ema import WeightEMA
from lib.baselines import build_espcn
from trainer.learn.model import build_model, count_parameters
from trainer.learn.optim import MuonAdam
from trainer.learn.precision import resolve_precision
from trainer.learn.schedule import lr_at

SCALE = 2  #: the default --scale
CLIPS = ("carphone", "bikes")
#: A third clip kept out of recipe decisions (``--clips bunny``): the first 120 frames of ``bigbuckbunny.mp4``, a
#: quarter size (4x4 mean, 320x180) as the Ground Truth.
HELD_OUT_CLIP = "bunny"
#: cuetrain-adam: the same network with Adam, lr 1e-3, (0.9, 0.999); cuetrain-flX (any X): the cosine ends at X of the
#: peak lr (``--lr-floor``) instead of a tenth.
NETWORKS = ("cuetrain", "espcn", "cuetrain-adam", "cuetrain-flX")


def _reduce(frames: np.ndarray, scale: int = SCALE) -> np.ndarray:
    """(T, H, W, 3) float32 0..1 -> (T, H/scale, W/scale, 3) float32 through Pillow's bicubic, rounded to 8 bits."""
    t, h, w, _ = frames.shape
    small = np.stack([bicubic_resize(f, w // scale, h // scale) for f in frames])
    return np.round(small * 255.0).astype(np.float32) / 255.0


def load_clip(name: str, scale: int = SCALE) -> tuple[list, list]:
    """(train pairs, held-out pairs) of (Input (h, w, 3), Ground Truth (scale*h, scale*w, 3)) float32 0..1."""
    if name == "carphone":
        targets = _decode(clip_path("carphone_pristine.mp4")).astype(np.float32) / 255.0
    elif name in ("bikes", HELD_OUT_CLIP):
        f = 2 if name == "bikes" else 4  # halved, or a quarter
        frames = _decode(clip_path("bikes.mp4" if name == "bikes" else "bigbuckbunny.mp4"))[:120]
        frames = frames.astype(np.float32) / 255.0
        t, h, w, _ = frames.shape
        h, w = h // (scale * f) * scale * f, w // (scale * f) * scale * f  # Ground Truth sides divisible by scale
        targets = frames[:, :h, :w].reshape(t, h // f, f, w // f, f, 3).mean(axis=(2, 4))
    else:
        raise SystemExit(f"unknown clip {name!r}; choose from {', '.join(CLIPS)} or {HELD_OUT_CLIP}")
    inputs = _reduce(targets, scale)
    pairs = [(np.ascontiguousarray(i), np.ascontiguousarray(g)) for i, g in zip(inputs, targets)]
    held = [p for n, p in enumerate(pairs, 1) if n % HOLDOUT_EVERY == 0]
    return [p for n, p in enumerate(pairs, 1) if n % HOLDOUT_EVERY != 0], held


def bicubic_psnr(held: list) -> float:
    """Mean held-out PSNR [dB] of the bicubic upscale of each Input."""
    return float(np.mean([psnr(bicubic_resize(i, g.shape[1], g.shape[0]), g) for i, g in held]))


@torch.no_grad()
def heldout_psnr(net: torch.nn.Module, held: list) -> float:
    """Mean held-out PSNR [dB] of the network's fp32 output."""
    net.eval()
    out = [net(torch.from_numpy(i).permute(2, 0, 1)[None])[0].permute(1, 2, 0).numpy() for i, _ in held]
    net.train()
    return float(np.mean([psnr(o, g) for o, (_, g) in zip(out, held)]))


def build(name: str, scale: int = SCALE) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The network and optimizer of ``name`` (module doc)."""
    if name.startswith("cuetrain"):
        net = build_model("small", "v3", scale=scale).to(memory_format=torch.channels_last)
        if name == "cuetrain-adam":
            return net, torch.optim.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.999))
        return net, MuonAdam(net, 2e-3, (0.9, 0.9))
    net = build_espcn(scale).to(memory_format=torch.channels_last)
    return net, torch.optim.Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.999))


def default_floor(name: str, scale: int = SCALE) -> float:
    """Where network ``name``'s cosine ends [fraction of the peak lr]: X for ``cuetrain-flX``, else the trainer's at
    ``scale`` (``TrainConfig.cosine_floor``: Muon's upres floor for ``cuetrain``, Adam's for ``cuetrain-adam`` and
    ``espcn``)."""
    if "-fl" in name:
        return float(name.split("-fl")[1])
    optimizer = "muon" if name.startswith("cuetrain") and name != "cuetrain-adam" else "adam"
    return TrainConfig("in", "gt", "run", scale=scale, optimizer=optimizer).cosine_floor


def train(name: str, sampler: CropSampler, held: list, steps: int, precision: str,
          seed: int = 0, scale: int = SCALE) -> tuple[float, float]:
    """Train ``name`` for ``steps`` from ``seed``'s weights; returns (held-out PSNR of its EMA [dB], training
    seconds)."""
    torch.manual_seed(seed)
    net, opt = build(name, scale)
    peak = opt.param_groups[0]["lr"]
    floor = default_floor(name, scale)
    ema = WeightEMA(net, 0.999)

    def progress(done: int, clock: float) -> None:
        print(f"    {name} step {done}/{steps}  {clock:.0f} s", flush=True)

    def lr(step: int) -> float:
        return lr_at(step, steps, peak, 50, "cosine", floor)

    secs = common.train_loop(net, opt, sampler, steps, per_crop_l1, lr,
                             resolve_precision(precision, torch.device("cpu")).autocast, [ema], progress,
                             max(1, steps // 4))
    return heldout_psnr(ema.module, held), secs


@torch.no_grad()
def ms_per_2k(name: str, repeats: int = 5, scale: int = SCALE) -> float:
    """Median ms of fp32 inference from 1024x540 to one 2048x1080 output frame."""
    net = build(name, scale)[0].eval()
    x = torch.rand(1, 3, 1080 // scale, 2048 // scale)
    net(x)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        net(x)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """Parse ``argv`` (the arguments after the task's name) and run; ``prog`` names the command in --help."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=3000, help="training steps of each network (default 3000)")
    ap.add_argument("--batch", type=int, default=8, help="crops per step (default 8)")
    ap.add_argument("--crop", type=int, default=32, help="Input crop side [px] (default 32: 64 px Ground Truth)")
    ap.add_argument("--clips", default=",".join(CLIPS))
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--scale", type=int, choices=(2, 4), default=SCALE, help="upres factor (default 2)")
    ap.add_argument("--seed", type=int, default=0, help="the networks' initial weights and the crops (default 0)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--networks", default="cuetrain,espcn",
                    help=f"from {', '.join(NETWORKS)}; the table compares the first with the second")
    a = ap.parse_args(argv)
    nets = tuple(a.networks.split(","))
    torch.set_num_threads(a.threads)
    prec = resolve_precision(a.precision, torch.device("cpu")).name
    print(f"bench_recipe upscale: x{a.scale}, {a.steps} steps, batch {a.batch}, Input crop {a.crop}, training {prec}, "
          f"{a.threads} threads, load {os.getloadavg()[0]:.2f}", flush=True)
    ms = {n: ms_per_2k(n, scale=a.scale) for n in nets}
    params = {n: count_parameters(build(n, a.scale)[0]) for n in nets}
    results: dict = {"steps": a.steps, "scale": a.scale, "seed": a.seed, "precision": prec, "ms_per_2k": ms,
                     "params": params, "clips": {}}
    for clip in a.clips.split(","):
        train_pairs, held = load_clip(clip, a.scale)
        sampler = CropSampler(FramesInMemory(train_pairs), a.crop, a.batch, seed=a.seed,
                              memory_format=torch.channels_last)
        base = bicubic_psnr(held)
        h, w = held[0][0].shape[:2]
        print(f"{clip}: {len(train_pairs)} training pairs, {len(held)} held out, {w}x{h} -> "
              f"{w * a.scale}x{h * a.scale}, "
              f"bicubic {base:.2f} dB", flush=True)
        res = {"bicubic_psnr": base}
        for n in nets:
            score, secs = train(n, sampler, held, a.steps, a.precision, a.seed, a.scale)
            res[n] = {"psnr": score, "gain_over_bicubic": score - base, "train_s": secs}
        results["clips"][clip] = res
    if a.json:
        tmp = a.json.with_name(a.json.name + ".tmp")
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(a.json)
    first, other = nets[0], nets[1] if len(nets) > 1 else nets[0]
    print(f"\n| clip | bicubic | {' | '.join(nets)} | {first} - {other} |\n|---|---|{'---|' * len(nets)}---|")
    for clip, r in results["clips"].items():
        cells = " | ".join(f"{r[n]['psnr']:.2f} dB ({r[n]['gain_over_bicubic']:+.2f})" for n in nets)
        print(f"| {clip} | {r['bicubic_psnr']:.2f} dB | {cells} | {r[first]['psnr'] - r[other]['psnr']:+.2f} dB |")
    print("\n" + ", ".join(f"{n}: {params[n]:,} parameters, {ms[n]:.0f} ms per 2K output frame" for n in nets)
          + f" (fp32, {a.threads} threads; ratio {ms[first] / ms[other]:.2f}x)")

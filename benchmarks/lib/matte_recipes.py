"""Matte recipes on the matte evaluation set (``lib/matte_set.py``), at the farm's run length, with seeds.

Every variant trains on one shot's 12 keyframes through ``common.train_loop`` (the trainer's crops,
``trainer.data.crops.CropSampler``; batch 8 crops, the trainer's global batch) and is scored on the 108 held-out
frames with ``trainer.data.matte_scores`` (IoU at 0.5, MAE, edge MAE within 3 px of the edge, flicker). The two
baselines (the mean keyframe matte, holding the nearest keyframe's) are scored beside them.

A variant is named ``BASE[-TOKEN...]``:

- ``cuetrain``: the trainer's matte network at the small size, ``build_model("small", "unet", RGB -> A)``
  (``trainer.learn.unet``: 16/32/64 channels, ReLU, a random-started sigmoid head) with the trainer's matte defaults:
  Adam lr 1e-3, EMA 0.999 (with the trainer's warm-up), matte loss ``bce+l1+iou``;
- ``plain``: an independent plain U-Net (``lib.matte.PlainUNet``: 3 levels, top width 24, GELU, concatenated skips,
  a float32 sigmoid) with Adam lr 2e-3, no EMA, BCE + L1: the recipe the issue's independent network used;
- tokens: ``wN`` (top width N, doubling per level), ``relu``/``gelu`` (``plain`` only), ``muon`` (Muon for the hidden
  convolutions, ``trainer.learn.optim.MuonAdam``, betas (0.9, 0.9)), ``lrX`` (peak lr, e.g. ``lr0.002``), ``emaX``
  (EMA decay, ``ema0`` = the last weights), ``iou`` / ``bce`` / ``l1`` (matte loss ``bce+l1+iou`` / ``bce+l1`` /
  ``l1``), ``cropN`` (crop side), ``bN`` (batch), ``augP`` (``--augment P``), ``wuN`` (warmup updates), ``kN``
  (train on every N-th frame from 0 as keyframes, scored on the same held-out frames: denser keyframes), ``sN``
  (train N steps, whatever ``--steps``), ``flX`` (the cosine ends at X of the peak lr, ``--lr-floor``; 0.1 by
  default, the trainer's for mattes), ``ftX`` (with ``from``: the fine-tune's peak lr), ``fromSHOT`` (a head start:
  start from the EMA weights of the same recipe trained :data:`SOURCE_STEPS` on SHOT's keyframes, as ``--init-from``
  does, with a fresh optimizer and EMA).

The lr follows the trainer's schedule (``trainer.learn.schedule.lr_at``: ``wuN`` warmup updates from lr/10, 50 by
default, then cosine to lr/10, or to ``flX``).

Run (under the heavy lock on a shared host; ~30-60 s per variant, shot and seed on 2 quiet cores):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_recipe.py matte-set --steps 1000 \\
        --variants cuetrain,plain --seeds 0,1 [--shots carphone,astronaut,street] [--json out.json]
The held-out shot (``matte_set.HELD_OUT_SHOT``) is left out unless ``--shots`` names it.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import common
import numpy as np
import torch
from torch import nn

from lib import matte_set
from lib.matte import PlainUNet
from lib.matte import predict as matte_predict
from trainer.core.channels import RGB, ChannelPlan
from trainer.data.crops import CropSampler
from trainer.data.matte_scores import nearest_keyframe, score_sequence
from trainer.data.sources import FramesInMemory
from trainer.learn.ema import WeightEMA
from trainer.learn.heads import channel_fields
from trainer.learn.loss import per_crop_loss
from trainer.learn.optim import MuonAdam
from trainer.learn.precision import resolve_precision
from trainer.learn.schedule import lr_at
from trainer.learn.unet import PlainUNet as UNetTrunk
from trainer.learn.unet import UNetConfig
from trainer.record.rundir import atomic_write_json

PLAN = ChannelPlan(RGB, ("A",))
DECISION_SHOTS = tuple(s for s in matte_set.SHOTS if s != matte_set.HELD_OUT_SHOT)


@dataclass(frozen=True)
class Recipe:
    """A variant's recipe (module doc): network, optimizer, lr [1], EMA decay [1] (0: none), matte loss, crop side
    [pixels], batch [crops], augmentation probability [1], warmup [updates], keyframe spacing [frames], the shot whose
    model it starts from ("" = random weights), its own step count [steps] (0 = ``--steps``) and a fine-tune's peak
    lr [1] (0 = ``lr``), and where the cosine ends, a fraction of the peak lr [1]."""

    base: str
    width: int
    act: str
    optimizer: str
    lr: float
    ema: float
    loss: str
    crop: int = 64
    batch: int = 8
    augment: float = 0.0
    warmup: int = 50
    key_every: int = matte_set.KEY_EVERY
    init_from: str = ""
    steps: int = 0
    ft_lr: float = 0.0
    floor: float = 0.1


def parse(name: str) -> Recipe:
    """The :class:`Recipe` of a variant name; raises ValueError naming an unknown base or token."""
    base, *tokens = name.split("-")
    if base == "cuetrain":
        r = Recipe("cuetrain", 16, "relu", "adam", 1e-3, 0.999, "bce+l1+iou")
    elif base == "plain":
        r = Recipe("plain", 24, "gelu", "adam", 2e-3, 0.0, "bce+l1")
    else:
        raise ValueError(f"variant {name!r}: base {base!r} is not cuetrain or plain")
    losses = {"iou": "bce+l1+iou", "bce": "bce+l1", "l1": "l1"}
    for t in tokens:
        if t in ("relu", "gelu"):
            r = replace(r, act=t)
        elif t in ("muon", "adam"):
            r = replace(r, optimizer=t)
        elif t in losses:
            r = replace(r, loss=losses[t])
        elif t.startswith("from"):
            r = replace(r, init_from=t[4:])
        else:
            prefixes = ("lr", "ema", "crop", "aug", "wu", "w", "b", "k", "s", "ft", "fl")
            key = next((k for k in prefixes if t.startswith(k)), None)
            field = {"lr": "lr", "ema": "ema", "crop": "crop", "aug": "augment", "wu": "warmup", "w": "width",
                     "b": "batch", "k": "key_every", "s": "steps",
                     "ft": "ft_lr", "fl": "floor"}.get(key or "")
            if field is None:
                raise ValueError(f"variant {name!r}: unknown token {t!r} (module doc lists them)")
            kind = type(getattr(r, field))
            r = replace(r, **{field: kind(float(t[len(key):]))})
    return r


def build(r: Recipe) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The network (channels_last) and optimizer of a recipe."""
    if r.base == "plain":
        net: nn.Module = PlainUNet(r.width, True, nn.GELU if r.act == "gelu" else nn.ReLU)
    else:
        net = UNetTrunk(UNetConfig((r.width, 2 * r.width, 4 * r.width), **channel_fields(PLAN)))
    net = net.to(memory_format=torch.channels_last)
    if r.optimizer == "muon":
        return net, MuonAdam(net, r.lr, (0.9, 0.9))
    return net, torch.optim.Adam(net.parameters(), lr=r.lr)


def predict(net: nn.Module, shot: matte_set.Shot, frames: list[int]) -> dict[int, np.ndarray]:
    """{frame: (H, W) float32 matte} of the network on ``shot``'s full frames (``lib.matte.predict``)."""
    return dict(zip(frames, matte_predict(net, [shot.rgb[i] for i in frames])))


#: Steps the source model of a ``fromSHOT`` variant trains on SHOT (the farm's default run length).
SOURCE_STEPS = 1000
_SOURCES: dict[tuple, dict] = {}


def _fit(r: Recipe, shot: matte_set.Shot, steps: int, precision: str, seed: int,
         init: dict | None = None) -> tuple[nn.Module, float]:
    """Train recipe ``r`` on ``shot``'s keyframes from ``seed`` (crops; weights too unless ``init``, a state dict to
    start from, as ``--init-from`` starts from a model's EMA weights, with a fresh optimizer and EMA); returns the
    network to evaluate (the EMA's, or the last weights) and the training seconds."""
    torch.manual_seed(seed)
    net, opt = build(r)
    if init is not None:
        net.load_state_dict(init)
    pairs = [(shot.rgb[i], shot.matte[i][..., None]) for i in range(0, len(shot.rgb), r.key_every)]
    sampler = CropSampler(FramesInMemory(pairs), r.crop, r.batch, seed=seed, memory_format=torch.channels_last,
                          augment=r.augment, grade_sides="input")
    ema = WeightEMA(net, r.ema) if r.ema > 0 else None

    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return per_crop_loss(out.float(), target, PLAN, r.loss)

    def lr(s: int) -> float:
        return lr_at(s, steps, r.lr, r.warmup, "cosine", r.floor)

    secs = common.train_loop(net, opt, sampler, steps, loss, lr,
                             resolve_precision(precision, torch.device("cpu")).autocast, [ema] if ema else [])
    return (ema.module if ema else net), secs


def _source(name: str, r: Recipe, precision: str, seed: int) -> dict:
    """The weights of variant ``name`` without its fine-tuning tokens (``from``, ``s``, ``ft``, ``wu``: the source is
    trained as a run of its own would be) trained :data:`SOURCE_STEPS` on ``r.init_from`` from ``seed``, once per
    process."""
    base = parse("-".join(t for t in name.split("-") if not t.startswith(("from", "s", "ft", "wu"))))
    key = (base, r.init_from, precision, seed)
    if key not in _SOURCES:
        net, _ = _fit(base, matte_set.load(r.init_from), SOURCE_STEPS, precision, seed)
        _SOURCES[key] = {k: v.detach().clone() for k, v in net.state_dict().items()}
    return _SOURCES[key]


def train(name: str, shot: matte_set.Shot, steps: int, precision: str, seed: int) -> dict:
    """Train variant ``name`` on ``shot``'s keyframes from ``seed`` (weights and crops; ``fromSHOT``: from SHOT's
    model); its held-out :class:`MatteScores` fields and training seconds."""
    r = parse(name)
    init = _source(name, r, precision, seed) if r.init_from else None
    net, secs = _fit(replace(r, lr=r.ft_lr) if r.ft_lr else r, shot, r.steps or steps, precision, seed, init)
    keys = set(range(0, len(shot.rgb), r.key_every))
    held = [i for i in shot.held if i not in keys]
    s = score_sequence(predict(net, shot, held), {i: shot.matte[i] for i in held})
    print(f"  {shot.name:9s} {name:32s} seed {seed}: IoU {s.iou:.4f}  edge {s.edge_mae:.4f}  MAE {s.mae:.4f}  "
          f"flicker {s.flicker:.4f}  ({secs:.0f} s)", flush=True)
    return {**s.__dict__, "train_s": secs}


def baselines(shot: matte_set.Shot) -> dict[str, dict]:
    """The mean keyframe matte and the nearest keyframe's matte, scored on the held-out frames."""
    truth = {i: shot.matte[i] for i in shot.held}
    mean = np.mean([shot.matte[k] for k in shot.keys], axis=0)
    nearest = {i: shot.matte[nearest_keyframe(shot.keys, i)] for i in shot.held}
    return {"mean keyframe": score_sequence({i: mean for i in shot.held}, truth).__dict__,
            "nearest keyframe": score_sequence(nearest, truth).__dict__}


def _mean(runs: list[dict], keys: tuple[str, ...] = ("iou", "edge_mae", "mae", "flicker", "train_s")) -> dict:
    return {k: float(np.mean([r[k] for r in runs])) for k in keys}


def _trainer(a: argparse.Namespace, shots: list[str], seeds: list[int]) -> None:
    """``--trainer``: every shot and seed through ``cuetrain local`` (``lib/matte_trainer.py``); a table of the
    model's mean over seeds and the baselines, and each shot's bar (the nearest keyframe's IoU plus half its distance
    to 1.0)."""
    from lib import matte_trainer

    print(f"bench_recipe matte-set --trainer: shots {', '.join(shots)}; {a.steps} steps; seeds {seeds}; "
          f"extra {a.extra!r}; load {os.getloadavg()[0]:.2f}", flush=True)
    results = matte_trainer.run(shots, a.steps, seeds, a.extra, a.work)
    if a.json:
        atomic_write_json(a.json, {"steps": a.steps, "seeds": seeds, "extra": a.extra, "results": results})
    print("\n| shot | what | IoU | edge MAE | MAE | flicker | bar (IoU) |\n|---|---|---|---|---|---|---|")
    for name, res in results.items():
        model = _mean(list(res["model"].values()), ("iou", "edge_mae", "mae", "flicker"))
        bar = res["nearest keyframe"]["iou"] + (1 - res["nearest keyframe"]["iou"]) / 2
        for what, r in (("cuetrain local", model), ("nearest keyframe", res["nearest keyframe"]),
                        ("mean keyframe", res["mean keyframe"])):
            print(f"| {name} | {what} | {r['iou']:.4f} | {r['edge_mae']:.4f} | {r['mae']:.4f} | {r['flicker']:.4f} | "
                  f"{bar:.4f} |")


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """Parse ``argv`` and run every variant on every shot and seed; print per-shot and mean tables."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=1000, help="steps per run (default 1000, the farm's)")
    ap.add_argument("--variants", default="cuetrain,plain")
    ap.add_argument("--shots", help=f"default {','.join(DECISION_SHOTS)}; with --mixed, carphone")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the results here (after every variant)")
    ap.add_argument("--trainer", action="store_true", help="train each shot and seed with the real trainer instead "
                    "(cuetrain local --world-size 2 at the farm's defaults, lib/matte_trainer.py)")
    ap.add_argument("--mixed", action="store_true", help="mixed targets instead: R,G,B,A through cuetrain local, "
                    "on --shots (default carphone), per --architectures (lib/matte_trainer.py mixed)")
    ap.add_argument("--architectures", default="auto,v3,unet", help="with --mixed: the --architecture values")
    ap.add_argument("--extra", default="", help="with --trainer or --mixed: more trainer arguments, e.g. "
                    "\"--lr 2e-3\"")
    ap.add_argument("--work", type=Path, default=Path("/tmp/cuetrain-matte-set"), help="with --trainer: where the "
                    "shots' frames and the runs go")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    seeds = [int(x) for x in a.seeds.split(",")]
    shots = a.shots.split(",") if a.shots else ["carphone"] if a.mixed else list(DECISION_SHOTS)
    if a.mixed:
        from lib import matte_trainer

        result = matte_trainer.mixed(a.steps, seeds, a.work, tuple(a.architectures.split(",")), tuple(shots),
                                     a.extra)
        if a.json:
            atomic_write_json(a.json, {"steps": a.steps, "seeds": seeds, "extra": a.extra, "mixed": result})
        return
    if a.trainer:
        _trainer(a, shots, seeds)
        return
    print(f"bench_recipe matte-set: shots {', '.join(shots)}; {a.steps} steps; seeds {seeds}; training "
          f"{resolve_precision(a.precision, torch.device('cpu')).name}; load {os.getloadavg()[0]:.2f}", flush=True)
    results: dict[str, dict] = {}
    started = time.time()
    for shot_name in shots:
        shot = matte_set.load(shot_name)
        res = results.setdefault(shot_name, baselines(shot))
        for name in a.variants.split(","):
            runs = [train(name, shot, a.steps, a.precision, s) for s in seeds]
            res[name] = {**_mean(runs), "seeds": dict(zip(seeds, runs))}
            if a.json:
                atomic_write_json(a.json, {"steps": a.steps, "seeds": seeds, "results": results})
    print(f"\n{a.steps} steps, mean of seeds {seeds} ({time.time() - started:.0f} s)")
    print("| shot | variant | IoU | edge MAE | MAE | flicker |\n|---|---|---|---|---|---|")
    for shot_name, res in results.items():
        for name, r in res.items():
            print(f"| {shot_name} | {name} | {r['iou']:.4f} | {r['edge_mae']:.4f} | {r['mae']:.4f} | {r['flicker']:.4f} |")
    names = [n for n in next(iter(results.values()))]
    print("\n| variant | mean IoU | mean edge MAE | shots won on IoU vs plain |\n|---|---|---|---|")
    for n in names:
        won = sum(res[n]["iou"] > res["plain"]["iou"] for res in results.values()) if "plain" in names else 0
        print(f"| {n} | {np.mean([res[n]['iou'] for res in results.values()]):.4f} | "
              f"{np.mean([res[n]['edge_mae'] for res in results.values()]):.4f} | {won}/{len(results)} |")

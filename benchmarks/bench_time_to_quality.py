"""Time to quality: held-out PSNR against training wall time, every recipe side by side in one invocation.

An artist waits for a model that is good enough, not for images/s. This benchmark trains each recipe of
:data:`RECIPES` on two clips, one after the other in this process, and evaluates the held-out frames
(every 6th frame, as ``cuetrain demo`` holds out) at intervals. Evaluation time is excluded from the
training clock. The output is a table per clip (stdout, and ``--out``'s ``.md`` and ``.json``) and a plot
(``--out``'s ``.png``: PSNR gain against seconds, one curve per recipe, one panel per clip). ``--out`` defaults to
``docs/studies/time_to_quality_latest``; the study that records the results is docs/studies/time_to_quality.md.

Recipes:
- ``v1``: the recipe as it landed at c47904a, frozen: ``--architecture v1 --model-size small``, Adam,
  L1 loss, batch 8, crop 64, peak lr 2e-3, 50 warmup updates then cosine to lr/10 (``trainer.learn.schedule.lr_at``),
  3000 steps (``trainer.demo.DEMO_TRAIN_ARGS``). Every other figure is a ratio against it.
- ``v3z-ema-mu-f3``: the default recipe (``cuetrain demo``'s) since issue 47's floor study: ``v3z-ema-mu`` with the
  cosine ending at 0.3 of the peak lr instead of a tenth (``--lr-floor``, docs/studies/lr_floor.md).
- ``v3z-ema-mu``: the default recipe from stop 37 to issue 47's floor study: ``v3z-ema-b9`` with Muon (Jordan et
  al. 2024) updating every convolution but the first and last (``--optimizer muon``, ``trainer.learn.optim``);
  ``v3z-ema-b89`` (Adam's first-moment decay 0.8, ``--adam-beta1 0.8``) beside it.
- ``v3z-ema-b9``: the default recipe from stop 35 to 36: ``v3-ema`` with every residual block starting as the
  identity (SkipInit, the v3 network's init now) and Adam's second-moment decay 0.9 (NAFNet's).
- ``v3-ema``: the default recipe from 2026-11-26 to stop 35 (``--architecture v3``, ``--ema-decay 0.999``; Adam
  fused as the trainer's since stop 33), with ``v3`` (no EMA) and ``v3-1cycle-ema`` beside it.
- the candidates listed in issue 18 (PixelUnshuffle stem = ``v2``, Charbonnier loss, one-cycle schedule,
  EMA of the weights for evaluation/export, larger crops with fewer steps).

Clips: ``carphone`` and ``bikes-blur-noise`` (``benchmarks/lib/clips.py``), every 6th frame held out.

Every recipe trains in the same loop: one process, ``torch.set_num_threads(--threads)``, crops from
``trainer.data.crops.CropSampler`` (the trainer's crops and flips), the trainer's precision (``--precision auto``
resolves to bf16 on CPUs with AVX512-BF16, fp32 elsewhere; evaluation is always fp32, as export is).
It is not the DDP trainer; the per-step overhead outside forward/backward is the same for all recipes
(``Recipe.fused`` aside).

Printed per clip and recipe (ratios against v1, measured in the same run): final held-out gain, seconds to
reach v1's final gain (linear interpolation between evaluations) and its ratio to v1's seconds, the gain at
v1's full training time, ms per full 2048x1080 frame (fp32 inference, median of 3) and the parameter count.

Needs matplotlib for the plot (``pip install -e '.[bench]'``). Run (under the heavy lock on a shared host; ~20 min at --scale 0.5 on 2 cores in bf16):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_time_to_quality.py [--scale 0.5]
        [--recipes v1,v2,...] [--clips carphone,bikes-blur-noise] [--precision auto] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import common  # noqa: F401  (puts the checkout on sys.path)
import numpy as np
import torch

from trainer.data.crops import CropSampler, per_crop_l1
from trainer.learn.ema import EMA_WARMUP, WeightEMA
from trainer.export.infer import psnr
from lib.baselines import build_model, count_parameters  # the product's networks and v2
from lib.clips import CLIPS, input_psnr, load_clip
from trainer.learn.optim import MuonAdam
from trainer.learn.precision import resolve_precision
from trainer.learn.schedule import lr_at

DOCS = common.ROOT / "docs" / "studies"


@dataclass(frozen=True)
class Recipe:
    """One training recipe.

    Attributes:
        architecture, size: the network (``trainer.learn.model.build_model``).
        steps: training steps at --scale 1 [steps].
        batch: crops per step [crops]; crop: crop side [pixels].
        lr: peak Adam learning rate [1]; warmup: warmup updates at --scale 1 (cosine only) [updates].
        schedule: ``cosine`` (v1: ``trainer.learn.schedule.lr_at``) or ``onecycle`` (Smith & Topin 2019: 30% linear
            rise from lr/25, cosine fall to lr/1e4).
        loss: ``l1`` (v1), ``charbonnier`` (sqrt(d^2 + 1e-6), Charbonnier et al. 1994; as in NAFNet's tables),
            ``mse`` or ``psnr`` (10 log10 of each crop's MSE + 1e-8: NAFNet's PSNRLoss, Chen et al. 2022).
        ema: decay of the exponential moving average of the weights used for evaluation, 0 = none [1].
        ema_warmup: k of the EMA's warm-up decay (1 + n) / (k + n) (``trainer.learn.ema.WeightEMA``) [1].
        fused: Adam's fused implementation (the trainer's since stop 33) instead of torch's default foreach
            one: the same update, ~2% less time a step on a 2-core CPU (benchmarks/studies/bench_adam.py).
        beta2: Adam's second-moment decay [1]: 0.999 (Kingma & Ba; the trainer's default, v1 and every recipe
            before stop 35) or 0.9 (NAFNet's; ``cuetrain demo``'s ``--adam-beta2`` since stop 35).
        beta1: Adam's first-moment decay [1]: 0.9 (Kingma & Ba; the trainer's) unless a screen names another.
        optimizer: ``adam`` or ``muon``: the trainer's ``--optimizer`` (``trainer.learn.optim.MuonAdam``: Muon for the
            hidden convolutions, Adam with these betas for the rest, one lr; Adam fused with it).
        skip_init: every residual block starts as the identity (``trainer.learn.model.zero_residual_branches``; the v3
            network's init since stop 35); False = torch's init, as every recipe before stop 35 trained.
        floor: where ``cosine`` ends, as a fraction of ``lr`` (the trainer's ``--lr-floor``) [1]: 0.1 for every
            recipe before issue 47's floor study.
    """

    architecture: str
    size: str
    steps: int
    batch: int = 8
    crop: int = 64
    lr: float = 2e-3
    warmup: int = 50
    schedule: str = "cosine"
    loss: str = "l1"
    ema: float = 0.0
    ema_warmup: float = EMA_WARMUP
    fused: bool = False
    beta2: float = 0.999
    skip_init: bool = False
    beta1: float = 0.9
    optimizer: str = "adam"
    floor: float = 0.1


RECIPES: dict[str, Recipe] = {
    "v1": Recipe("v1", "small", 3000),  # frozen: the recipe at c47904a (demo defaults)
    "v2": Recipe("v2", "small", 3000),  # the PixelUnshuffle stem alone, v1's schedule
    "v2-charb-ema": Recipe("v2", "small", 3000, loss="charbonnier", ema=0.999),
    # lr 3e-3 diverged at --scale 0.3 (held out 23.9 -> 4.4 dB after 30% of the run, bf16): one-cycle at v1's peak
    "v2-1cycle-ema": Recipe("v2", "small", 3000, schedule="onecycle", ema=0.999),
    "v1-crop96": Recipe("v1", "small", 1350, crop=96),  # ~same pixels as v1: 2.25x the crop area, 0.45x steps
    # v1's model with the schedule and EMA that won on carphone: inference cost stays v1's exactly
    "v1-1cycle-ema": Recipe("v1", "small", 3000, schedule="onecycle", ema=0.999),
    # v3: v2's blocks with v1's full-resolution first level (trainer.learn.model); v1's schedule, with and without EMA
    "v3": Recipe("v3", "small", 3000),
    "v3-ema": Recipe("v3", "small", 3000, ema=0.999, fused=True),  # the trainer's defaults until stop 35
    # cuetrain demo's recipe from stop 35 to 36: v3-ema with SkipInit (v3's init now) and Adam's beta2 0.9 (NAFNet's)
    "v3z-ema-b9": Recipe("v3", "small", 3000, ema=0.999, fused=True, beta2=0.9, skip_init=True),
    # v3z-ema-b9 with Adam's first-moment decay 0.8 (``--adam-beta1 0.8``)
    "v3z-ema-b89": Recipe("v3", "small", 3000, ema=0.999, fused=True, beta1=0.8, beta2=0.9, skip_init=True),
    # cuetrain demo's recipe since stop 37: v3z-ema-b9 with Muon for the hidden convolutions (``--optimizer muon``)
    "v3z-ema-mu": Recipe("v3", "small", 3000, ema=0.999, fused=True, beta2=0.9, skip_init=True, optimizer="muon"),
    # cuetrain demo's recipe since issue 47's floor study: v3z-ema-mu with the cosine ending at 0.3 (``--lr-floor``)
    "v3z-ema-mu-f3": Recipe("v3", "small", 3000, ema=0.999, fused=True, beta2=0.9, skip_init=True, optimizer="muon",
                            floor=0.3),
    "v3-1cycle-ema": Recipe("v3", "small", 3000, schedule="onecycle", ema=0.999),
}


def lr_for(r: Recipe, update: int, total: int, warmup: int) -> float:
    """Learning rate of update ``update`` of ``total`` under recipe ``r``'s schedule."""
    return lr_at(update, total, r.lr, warmup, r.schedule, r.floor)  # the trainer's schedules (--lr-schedule)


def per_crop_loss(r: Recipe, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B, 3, h, w) float32 pair -> (B,) loss per crop: the trainer's L1 (``trainer.data.crops.per_crop_l1``),
    Charbonnier, MSE or PSNR (``Recipe.loss``)."""
    d = out - target
    if r.loss == "charbonnier":
        return torch.sqrt(d * d + 1e-6).mean(dim=(1, 2, 3))
    if r.loss in ("mse", "psnr"):
        mse = (d * d).mean(dim=(1, 2, 3))
        return mse if r.loss == "mse" else (10.0 / math.log(10.0)) * torch.log(mse + 1e-8)
    return per_crop_l1(out, target)


@torch.no_grad()
def heldout_psnr(net: torch.nn.Module, held: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """Mean PSNR [dB] of the network's fp32 output (on its device) on the held-out frames against their targets."""
    net.eval()
    values = []
    device = next(net.parameters()).device
    for inp, tgt in held:
        out = net(torch.from_numpy(inp).permute(2, 0, 1)[None].to(device))[0].permute(1, 2, 0).cpu().numpy()
        values.append(psnr(out, tgt))
    net.train()
    return float(np.mean(values))


def train_recipe(r: Recipe, train: list, held: list, scale: float, evals: int, precision: str, seed: int = 0,
                 device: torch.device = torch.device("cpu")) -> list[tuple[float, int, float]]:
    """Train ``r`` on ``train`` and return its curve: [(training seconds, step, held-out PSNR dB)], step 0 first
    (``seed`` and ``device`` as :func:`train_averages`)."""
    return train_averages(r, train, held, scale, evals, precision, seed=seed, device=device)[0]


def train_averages(r: Recipe, train: list, held: list, scale: float, evals: int, precision: str,
                   warmups: Sequence[float] = (), seed: int = 0, device: torch.device = torch.device("cpu"),
                   build: Callable[..., torch.nn.Module] = build_model, adam: type = torch.optim.Adam,
                   sampler: type = CropSampler) -> list[list[tuple[float, int, float]]]:
    """Train ``r`` once and return one curve per EMA of its weights, one EMA per warm-up constant in ``warmups``
    (default ``r.ema_warmup``): the averages differ, the training does not. With ``r.ema`` 0, one curve: the
    network's own. The clock counts one EMA update a step, as the trainer keeps one (``common.train_loop``). ``seed``
    draws the initial weights and the crops (0: the figures in docs/studies/time_to_quality.md); ``device`` trains
    there (a GPU's clock is synchronised each step). ``build`` (``build_model``'s signature), ``adam`` (Adam's class,
    when ``r.optimizer`` is adam) and ``sampler`` (``CropSampler``'s class) let a screen swap in its own network,
    optimizer step or crops (``lib/variants.py``); the defaults are the trainer's."""
    torch.manual_seed(seed)
    net = build(r.size, r.architecture, r.skip_init).to(device, memory_format=torch.channels_last)
    emas = [WeightEMA(net, r.ema, k) for k in warmups or [r.ema_warmup]] if r.ema else []  # the trainer's EMA
    evaluated = [e.module for e in emas] or [net]
    if r.optimizer == "muon":
        opt = MuonAdam(net, r.lr, (r.beta1, r.beta2))
    else:
        opt = adam(net.parameters(), lr=r.lr, betas=(r.beta1, r.beta2), fused=r.fused)
    steps, warmup = max(1, round(r.steps * scale)), round(r.warmup * scale)
    crops = sampler(train, r.crop, r.batch, seed=seed, device=device, memory_format=torch.channels_last)
    start = heldout_psnr(net, held)
    curves = [[(0.0, 0, start)] for _ in evaluated]

    def evaluate(done: int, clock: float) -> None:
        for curve, model in zip(curves, evaluated):
            curve.append((clock, done, heldout_psnr(model, held)))
        print(f"    step {done}/{steps}  {clock:6.1f} s  " + "  ".join(f"{c[-1][2]:.2f} dB" for c in curves), flush=True)

    common.train_loop(net, opt, crops, steps, lambda out, target: per_crop_loss(r, out.float(), target.float()),
                      lambda step: lr_for(r, step, steps, warmup), resolve_precision(precision, device).autocast,
                      emas, evaluate, max(1, steps // evals), cuda=device.type == "cuda")
    return curves


def infer_ms(r: Recipe, repeats: int = 3) -> float:
    """Median ms of fp32 inference on one 2048x1080 frame (as artists run export in Nuke)."""
    net = build_model(r.size, r.architecture).eval()
    x = torch.rand(1, 3, 1080, 2048)
    times = []
    with torch.no_grad():
        net(x)  # warm-up
        for _ in range(repeats):
            t0 = time.perf_counter()
            net(x)
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def time_to(curve: list[tuple[float, int, float]], target: float) -> float | None:
    """Training seconds at which ``curve`` first reaches ``target`` dB (linear between evaluations), or None."""
    for (t0, _, p0), (t1, _, p1) in zip(curve, curve[1:]):
        if p1 >= target:
            return t0 + (t1 - t0) * ((target - p0) / (p1 - p0) if p1 > p0 else 1.0)
    return None


def value_at(curve: list[tuple[float, int, float]], seconds: float) -> float:
    """Held-out PSNR [dB] of the last evaluation at or before ``seconds``."""
    return [p for t, _, p in curve if t <= seconds + 1e-9][-1]


def clip_table(clip: str, base: float, curves: dict[str, list], ms: dict[str, float], params: dict[str, int]) -> list[str]:
    """Markdown rows of one clip: every recipe against v1 (``base`` = the held-out Input PSNR [dB])."""
    v1 = curves["v1"]
    v1_time, v1_final = v1[-1][0], v1[-1][2]
    rows = [f"\n### {clip}: held-out Input {base:.2f} dB; v1 ends at {v1_final - base:+.2f} dB in {v1_time:.0f} s\n",
            "| recipe | params | steps | train s | final gain | s to v1's final gain | vs v1 time | gain at v1's time "
            "| vs v1 | ms / 2048x1080 frame | vs v1 |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, c in curves.items():
        reach = time_to(c, v1_final)
        at = value_at(c, v1_time)
        rows.append(f"| {name} | {params[name]:,} | {c[-1][1]} | {c[-1][0]:.0f} | {c[-1][2] - base:+.2f} dB | "
                    f"{'not reached' if reach is None else f'{reach:.0f}'} | "
                    f"{'-' if reach is None else f'{reach / v1_time:.2f}x'} | {at - base:+.2f} dB | "
                    f"{at - value_at(v1, v1_time):+.2f} dB | {ms[name]:.0f} | {ms[name] / ms['v1']:.2f}x |")
    return rows


def plot(results: dict, path: Path) -> None:
    """PSNR gain against training seconds, one curve per recipe, one panel per clip, into ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.2), squeeze=False)
    for ax, (clip, res) in zip(axes[0], results.items()):
        for name, c in res["curves"].items():
            ax.plot([t for t, _, _ in c], [p - res["input_psnr"] for _, _, p in c], marker=".", label=name)
        ax.axhline(res["curves"]["v1"][-1][2] - res["input_psnr"], color="grey", lw=0.8, ls="--")
        ax.set(title=f"{clip} (held out, {res['precision']})", xlabel="training seconds", ylabel="PSNR gain [dB]")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".png", delete=False) as tmp:
        fig.savefig(tmp.name, dpi=110)
    os.replace(tmp.name, path)


def write_docs(results: dict, header: list[str], out: Path) -> None:
    """``out``.{md,json,png} (atomic: temp file + rename); the plot needs matplotlib (the
    ``bench`` extra of pyproject.toml)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# Time to quality (benchmarks/bench_time_to_quality.py)", "", *header]
    for clip, res in results.items():
        lines += clip_table(clip, res["input_psnr"], res["curves"], res["ms"], res["params"])
    saved = json.dumps({"header": header, "results": results}, indent=1)
    for suffix, text in ((".md", "\n".join(lines) + "\n"), (".json", saved)):
        tmp = out.with_suffix(suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, out.with_suffix(suffix))
    plot(results, out.with_suffix(".png"))
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipes", default=",".join(RECIPES), help=f"from {', '.join(RECIPES)} (v1 always runs)")
    ap.add_argument("--clips", default=",".join(CLIPS))
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of every recipe's steps (and warmup)")
    ap.add_argument("--evals", type=int, default=12, help="held-out evaluations per run")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=DOCS / "time_to_quality_latest",
                    help="path without suffix for the .md, .json and .png "
                    "(default docs/studies/time_to_quality_latest)")
    ap.add_argument("--from-json", type=Path, help="rewrite the table and plot from a saved JSON; no training")
    a = ap.parse_args()
    if a.from_json:
        saved = json.loads(a.from_json.read_text())
        write_docs(saved["results"], saved["header"], a.out)
        return
    names = ["v1", *[n for n in a.recipes.split(",") if n != "v1"]]
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        raise SystemExit(f"unknown recipe(s) {unknown}; choose from {', '.join(RECIPES)}")
    torch.set_num_threads(a.threads)
    prec = resolve_precision(a.precision, torch.device("cpu")).name
    header = [f"Command: `.venv/bin/python benchmarks/bench_time_to_quality.py --scale {a.scale} --recipes "
              f"{','.join(names)} --clips {a.clips} --precision {a.precision} --threads {a.threads}`, "
              f"training precision {prec}, {a.threads} threads, {os.cpu_count()} CPUs, load average at start "
              f"{os.getloadavg()[0]:.2f}. Inference ms are fp32.", "",
              "Recipes: " + "; ".join(f"`{n}` {asdict(RECIPES[n])}" for n in names) + "."]
    ms = {n: infer_ms(RECIPES[n]) for n in names}
    params = {n: count_parameters(build_model(RECIPES[n].size, RECIPES[n].architecture)) for n in names}
    results = {}
    for clip in a.clips.split(","):
        train, held = load_clip(clip)
        base = input_psnr(held)
        print(f"{clip}: {len(train)} training frames, {len(held)} held out, Input {base:.2f} dB", flush=True)
        curves = {}
        for n in names:
            print(f"  {n}", flush=True)
            curves[n] = train_recipe(RECIPES[n], train, held, a.scale, a.evals, a.precision)
        results[clip] = {"input_psnr": base, "precision": prec, "curves": curves, "ms": ms, "params": params}
    header.append(f"Load average at end {os.getloadavg()[0]:.2f}.")
    write_docs(results, header, a.out)


if __name__ == "__main__":
    main()

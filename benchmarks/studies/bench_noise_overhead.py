"""Per-step overhead of measuring the gradient noise scale while training (issue 18, item 3: at most 2%).

Runs the real trainer with its defaults and with ``--noise-interval 0`` (the noise scale off in any gang: no
split step, no squared norms, no observing DDP communication hook; ``trainer.learn.noise_scale.NoiseSampling``),
interleaved (off, on, off, on, ...) so a noisy neighbour slows both alike: ``cuetrain train`` for 1 rank,
``cuetrain local --world-size N`` for N > 1 (one thread per rank, ``common.run_cuetrain_metrics``).

What each run gives is its **mean** time per step over the 25-step log windows after the first two (warm-up):
one rank at ``--sync-interval 1`` splits one update in ``--noise-interval`` (50) into two halves, so a median
of windows would either drop that step or count it in every other window; the mean amortises it as a long
run does. Printed per gang: each variant's median over the repeats, and the median of the per-repeat ratios
on / off - 1 (the overhead; the issue's target is <= 2%).

Run (under the heavy lock on a shared host; a loaded machine gives meaningless ratios):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/studies/bench_noise_overhead.py [--worlds 1,2]
        [--batch 8] [--crop 64] [--steps 300] [--repeats 5] [--data DIR]
On a GPU host the trainer picks CUDA itself; ``--data`` takes a folder ``trainer.demo.extract`` wrote.

A one-off study (result in docs/studies/noise_scale.md, "Overhead per step"). ``bench_gpu_step.py`` (also here) times
``--noise-interval`` on against off too, among a GPU step's other extras: for the overhead figure use this
one; for where a GPU step goes, that one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common and its kin
from common import demo_data, run_cuetrain_metrics, window_step_times  # noqa: E402

VARIANTS = {"noise scale off (--noise-interval 0)": ["--noise-interval", "0"], "defaults": []}


def mean_step_s(data: tuple[Path, Path], world: int, a: argparse.Namespace, extra: list[str]) -> float:
    """Mean seconds per step of one run's log windows after the first two [s]."""
    rows = run_cuetrain_metrics(data, world, a.batch, a.steps, ["--crop-size", str(a.crop), "--model-size", a.size,
                                                                 *extra])
    windows = window_step_times(rows, skip=2)
    if not windows:
        raise SystemExit(f"--steps {a.steps} gives too few 25-step log windows; use at least 100")
    return statistics.fmean(windows)


def overhead(data: tuple[Path, Path], world: int, a: argparse.Namespace) -> float:
    """Print one gang's figures; returns the median per-repeat overhead on / off - 1 [fraction]."""
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for rep in range(a.repeats):
        for name, extra in VARIANTS.items():
            times[name].append(mean_step_s(data, world, a, extra))
            print(f"  {world} rank(s), repeat {rep + 1}: {name:<38} {times[name][-1] * 1e3:8.2f} ms/step", flush=True)
    off, on = times.values()
    ratios = [with_noise / without - 1 for without, with_noise in zip(off, on)]
    print(f"{world} rank(s): off {statistics.median(off) * 1e3:.2f} ms/step, defaults "
          f"{statistics.median(on) * 1e3:.2f} ms/step (medians of {a.repeats}); overhead per repeat "
          + ", ".join(f"{r:+.1%}" for r in ratios) + f"; median {statistics.median(ratios):+.1%}", flush=True)
    return statistics.median(ratios)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", default="1,2", help="comma-separated world sizes [ranks] (default 1,2)")
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=8, help="global batch [crops] (default 8: the demo's)")
    ap.add_argument("--crop", type=int, default=64, help="crop side [pixels]")
    ap.add_argument("--steps", type=int, default=300, help="steps per run (default 300: 10 timed windows)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--data", type=Path, help="a demo folder trainer.demo.extract wrote (default: extract one)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = demo_data(a.data or Path(tmp) / "data")
        print(f"{a.size} model, global batch {a.batch}, crop {a.crop}, {a.steps} steps, {a.repeats} repeats",
              flush=True)
        results = {int(w): overhead(data, int(w), a) for w in a.worlds.split(",")}
    print("overhead of the noise scale (median of paired ratios): "
          + ", ".join(f"{w} rank(s) {r:+.1%}" for w, r in results.items()))


if __name__ == "__main__":
    main()

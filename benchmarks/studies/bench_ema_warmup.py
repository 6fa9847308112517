"""The EMA's warm-up constant, measured on one training trajectory: held-out PSNR of several averages of it.

``trainer.learn.ema.WeightEMA`` decays by ``min(decay, (1 + n) / (k + n))`` after ``n`` updates (TensorFlow's
``ExponentialMovingAverage`` with ``num_updates`` has k = 10), so until the cap it averages about the last
``n / (k - 1)`` updates. The EMA does not change training, so one run of the default recipe (v3-ema of
``bench_time_to_quality.py``, through its ``train_averages``) keeps one average per ``k`` and evaluates each
on the held-out frames at the same steps: the differences are the averages alone, with no seed or clock noise
between them. ``v1`` trains
beside it for the time ratios (seconds to v1's final gain / v1's seconds; evaluation is off the clock).

Run (heavy: under the lock on a shared host; ~8 min at --scale 1 on 2 cores in bf16):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/studies/bench_ema_warmup.py [--ks 10,20,40] [--scale 1.0]
        [--clips carphone,bikes-blur-noise] [--json out.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common and its kin
import common  # noqa: E402,F401  (puts the checkout on sys.path)
import torch  # noqa: E402

import bench_time_to_quality as ttq  # noqa: E402
from lib import clips  # noqa: E402
from trainer.record.rundir import atomic_write_json  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ks", default="10,20,40", help="warm-up constants k, comma-separated")
    ap.add_argument("--clips", default=",".join(clips.CLIPS))
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the recipes' steps")
    ap.add_argument("--evals", type=int, default=12, help="held-out evaluations per run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the curves here")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ks = [float(k) for k in a.ks.split(",")]
    results = {}
    for clip in a.clips.split(","):
        train, held = clips.load_clip(clip)
        base = clips.input_psnr(held)
        v1 = ttq.train_recipe(ttq.RECIPES["v1"], train, held, a.scale, a.evals, "auto")
        averages = ttq.train_averages(ttq.RECIPES["v3-ema"], train, held, a.scale, a.evals, "auto", ks)
        curves = {"v1": v1, **{f"k={k:g}": curve for k, curve in zip(ks, averages)}}
        results[clip] = {"input_psnr": base, "curves": curves}
        target, seconds = v1[-1][2], v1[-1][0]
        print(f"{clip}: v1 +{target - base:.2f} dB in {seconds:.0f} s")
        for name, curve in curves.items():
            reached = ttq.time_to(curve, target)
            ratio = f"{reached / seconds:.2f}x" if reached is not None else "not reached"
            print(f"  {name:6s} final {curve[-1][2] - base:+.2f} dB, to v1's final gain {ratio}, "
                  f"at v1's time {ttq.value_at(curve, seconds) - base:+.2f} dB", flush=True)
    if a.json:
        atomic_write_json(a.json, results)


if __name__ == "__main__":
    main()

"""``--time-budget`` against a step count: does a run planned over wall-clock time lose quality?

``cuetrain local --time-budget B`` (2 ranks, the demo's data and recipe, ``trainer.demo``) trains until its budget
ends; then a run of exactly as many steps as the budget run reached (``--steps N``, the cosine planned over N from
the start) trains the same data. Both are timed as whole commands and scored on the demo's held-out frames. Printed
per repeat: the budget, the command's seconds (limit: the budget plus the export), the steps reached and both
held-out gains with their ratio (target >= 0.95).

``--stop-when-flat DB`` instead compares a ``--stop-when-flat`` run against the full step run (``--steps``): the
steps and seconds it saved and the dB it cost.

Run (under the heavy lock on a shared host; ~3 min at the defaults):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_recipe.py time-budget [--budget 60s] [--repeats 1]
    .venv/bin/python benchmarks/bench_recipe.py time-budget --stop-when-flat 0.05 [--steps 3000] [--clips carphone,bikes]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  (puts the checkout on sys.path)

from trainer.demo import DEMO_TRAIN_ARGS, DemoData, extract, holdout_psnr, train_demo

#: ``--steps`` of the budget run: a cap the budget ends first [steps].
CAP = 1_000_000


def timed_run(run_dir: Path, data: DemoData, steps: int, extra: list[str]) -> dict:
    """Train 2 local ranks with the demo's recipe plus ``extra``; returns seconds, final step and held-out gain."""
    t0 = time.monotonic()
    code = train_demo(run_dir, data, 2, steps, [*DEMO_TRAIN_ARGS, *extra], progress=False)
    seconds = time.monotonic() - t0
    if code != 0:
        raise SystemExit(f"{run_dir}: training failed with exit code {code}; see {run_dir / 'logs'}")
    record = json.loads((run_dir / "run.json").read_text())
    before, after = holdout_psnr(run_dir, data)
    return {"seconds": seconds, "steps": record["final_step"], "gain": after - before, "budget": record.get("budget")}


def bikes_data(folder: Path) -> DemoData:
    """The ``bikes-blur-noise`` clip (``lib/clips.py``) written as the demo's folders (every 6th frame held out)."""
    from lib import clips
    from trainer.data.images import write_image

    train, held = clips.load_clip("bikes-blur-noise")
    dirs = DemoData(folder / "train/input", folder / "train/target", folder / "holdout/input",
                    folder / "holdout/target")
    for d in (dirs.train_input, dirs.train_target, dirs.holdout_input, dirs.holdout_target):
        d.mkdir(parents=True, exist_ok=True)
    for pairs, (di, dt) in ((train, (dirs.train_input, dirs.train_target)),
                            (held, (dirs.holdout_input, dirs.holdout_target))):
        for n, (i, t) in enumerate(pairs, 1):
            write_image(di / f"f.{n:04d}.png", i)
            write_image(dt / f"f.{n:04d}.png", t)
    return dirs


def budget_rows(tmp: Path, data: DemoData, budget: str, repeats: int) -> None:
    ratios = []
    for r in range(repeats):
        b = timed_run(tmp / f"budget{r}", data, CAP, ["--time-budget", budget])
        s = timed_run(tmp / f"steps{r}", data, b["steps"], [])
        ratios.append(b["gain"] / s["gain"])
        print(f"| {budget} | {b['seconds']:.1f} s | {b['steps']} | {b['gain']:+.2f} dB | {s['seconds']:.1f} s | "
              f"{s['gain']:+.2f} dB | {ratios[-1]:.3f} |", flush=True)
    print(f"median gain ratio {statistics.median(ratios):.3f} over {repeats} repeat(s)")


def flat_row(tmp: Path, clip: str, data: DemoData, steps: int, db: float, window: int) -> None:
    full = timed_run(tmp / f"{clip}-full", data, steps, [])
    flat = timed_run(tmp / f"{clip}-flat", data, steps, ["--stop-when-flat", str(db), "--flat-window", str(window)])
    print(f"| {clip} | {steps} steps, {full['seconds']:.0f} s, {full['gain']:+.2f} dB | {flat['steps']} steps, "
          f"{flat['seconds']:.0f} s, {flat['gain']:+.2f} dB | {1 - flat['seconds'] / full['seconds']:.0%} | "
          f"{flat['gain'] - full['gain']:+.2f} dB |", flush=True)


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """Parse ``argv`` (the arguments after the task's name) and run; ``prog`` names the command in --help."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", default="60s")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--stop-when-flat", type=float, default=0.0, metavar="DB")
    ap.add_argument("--flat-window", type=int, default=500)
    ap.add_argument("--steps", type=int, default=3000, help="the full run's steps for --stop-when-flat")
    ap.add_argument("--clips", default="carphone", help="carphone and/or bikes (--stop-when-flat)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-budget-") as tmp:
        tmp = Path(tmp)
        if a.stop_when_flat <= 0:
            print("| budget | command | steps reached | gain | same steps: command | gain | ratio |\n"
                  "|---|---|---|---|---|---|---|", flush=True)
            budget_rows(tmp, extract(tmp / "data"), a.budget, a.repeats)
            return
        print(f"| clip | full run | --stop-when-flat {a.stop_when_flat} (window {a.flat_window}) | time saved | "
              "cost |\n|---|---|---|---|---|", flush=True)
        for clip in a.clips.split(","):
            data = extract(tmp / "data") if clip == "carphone" else bikes_data(tmp / "bikes")
            flat_row(tmp, clip, data, a.steps, a.stop_when_flat, a.flat_window)

"""Muon against Adam per second: held-out gain after the same wall-clock budget, on the CPU this runs on.

    .venv/bin/python benchmarks/studies/bench_optimizer_per_second.py [--budget 60s] [--tasks repair,upscale,matte]
        [--repeats 1] [--out rows.json]

Each run is the demo's (``trainer.demo``: the carphone clip, 2 local ranks, the farm's recipe) with
``--optimizer adam`` or ``--optimizer muon`` (pair k at ``--seed k``) and ``--time-budget`` of ``--budget`` from the start of the run, so the
optimizer that trains faster on this hardware gets more steps in the same seconds. Pairs run back to back (adam,
muon, adam, muon, ...) so a noisy neighbour slows both alike. Scored as the demo scores: held-out PSNR gain over the
Input (repair), over a bicubic x2 (upscale), IoU at 0.5 and MAE from 12 keyframes (matte). Printed and written
(``--out``) per run: task, optimizer, steps reached, seconds, score; and the CPU's flags
(``benchmarks/bench_trainer.py``'s :func:`cpu_description`). Run it as an AVX2-only CPU with the environment
``bench_trainer.py --cpu avx2`` sets (its AVX2_ENV, and tests/cpu_bf16 on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import common  # noqa: E402,F401  (puts the checkout on sys.path)
from bench_trainer import cpu_description  # noqa: E402

from trainer.core.budget import parse_time_budget  # noqa: E402
from trainer.demo import extract, holdout_matte, holdout_psnr, task_train_args, train_demo  # noqa: E402


def one_run(root: Path, task: str, optimizer: str, seconds: float, index: int) -> dict:
    """Train the ``task`` demo with ``optimizer`` for ``seconds`` of wall clock; returns its row."""
    data = extract(root / f"data-{task}", task)
    run_dir = root / f"{task}-{optimizer}-{index}"
    args = [*task_train_args(task), "--optimizer", optimizer, "--seed", str(index)]
    if task == "matte":
        args += ["--preview", str(data.holdout_input)]
    t0 = time.monotonic()
    deadline = datetime.fromtimestamp(time.time() + seconds, timezone.utc).isoformat(timespec="seconds")
    code = train_demo(run_dir, data, 2, 1_000_000, [*args, "--time-budget", deadline], progress=False)
    took = time.monotonic() - t0
    if code != 0:
        raise SystemExit(f"{run_dir}: training failed with exit code {code}; see {run_dir / 'logs'}")
    steps = json.loads((run_dir / "model.json").read_text())["step"]
    row = {"task": task, "optimizer": optimizer, "seed": index, "steps": steps, "seconds": round(took, 1)}
    if task == "matte":
        iou, mae = holdout_matte(run_dir, data)["model"]
        row.update(iou=round(iou, 4), mae=round(mae, 4))
    else:
        before, after = holdout_psnr(run_dir, data, task)
        row["gain_db"] = round(after - before, 3)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", default="60s", help="wall-clock budget of each run (default 60s)")
    ap.add_argument("--tasks", default="repair,upscale,matte", help="demo tasks, comma-separated")
    ap.add_argument("--repeats", type=int, default=1, help="adam/muon pairs per task, seeds 0, 1, ... (default 1)")
    ap.add_argument("--first-seed", type=int, default=0, help="the first pair's --seed (default 0)")
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    a = ap.parse_args()
    seconds = float(parse_time_budget(a.budget).seconds or 0)
    where = cpu_description()
    print(where, flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in a.tasks.split(","):
            for r in range(a.first_seed, a.first_seed + a.repeats):
                for optimizer in ("adam", "muon"):
                    rows.append(one_run(Path(tmp), task, optimizer, seconds, r))
                    print(json.dumps(rows[-1]), flush=True)
    if a.out:
        a.out.write_text(json.dumps({"cpu": where, "budget": a.budget, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()

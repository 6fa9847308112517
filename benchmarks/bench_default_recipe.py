"""Muon against Adam over global batch, model size, run length and clip: which optimizer the farm default picks.

Two recipes, each trained in this process on the same crops from the same seed (``bench_time_to_quality``'s loop:
the trainer's crops, precision, schedule code and EMA 0.999, the EMA evaluated):

- ``adam``: Adam, betas (0.9, 0.999), the model size's lr (``trainer.core.config.DEFAULT_LR``: small 1e-3,
  medium 5e-4, large 1e-4): the farm's training before this benchmark chose;
- ``muon``: ``torch.optim.Muon`` for every hidden convolution, Adam betas (0.9, 0.9) for the rest
  (``trainer.learn.optim.MuonAdam``), at twice the size's Adam lr (small 2e-3: ``cuetrain demo``'s recipe).

A global batch of ``8 x N`` crops is what ``--batch-size 8 --sync-interval N`` trains on any world size: one update
every N steps on the gradient averaged over ``8 x N`` crops, at the peak lr ``lr x sqrt(N)`` (``--lr-scaling
sqrt``, ``trainer.learn.schedule.effective_lr``), 50 warmup updates and ``ceil(steps / N)`` updates in all
(``trainer.learn.train``). This benchmark trains exactly that: ``ceil(steps / N)`` updates of ``8 x N`` crops, so a
run of S steps costs the same compute at every batch.

Clips: ``carphone`` (H.264 artefacts) and ``bikes-blur-noise`` (blur + noise), ``bench_time_to_quality.load_clip``;
every 6th frame held out. Printed: the held-out gain [dB] of each recipe and the difference muon - adam, per clip,
size, batch and run length, and the median training ms per step. Results are appended to ``--json`` as each run ends
(a long grid survives an interruption; ``--from-json`` prints the table again).

Run (under the heavy lock on a shared host; the small grid takes ~25 min on 2 cores in bf16):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_default_recipe.py \\
        [--sizes small,medium,large] [--batches 8,32,128] [--steps 400,1000,3000] [--clips carphone,bikes-blur-noise]
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import common  # noqa: F401  (puts the checkout on sys.path)
import torch

import bench_time_to_quality as ttq
from trainer.core.config import DEFAULT_LR

RECIPES = ("adam", "muon")
#: The muon recipe's lr relative to the size's Adam lr: small 2e-3 is ``cuetrain demo``'s measured lr.
MUON_LR_FACTOR = 2.0


def recipe(name: str, size: str, batch_mult: int, steps: int) -> ttq.Recipe:
    """The ``name`` recipe for ``size`` at a global batch of ``8 x batch_mult`` crops over ``steps`` steps of 8."""
    lr = DEFAULT_LR[size] * (MUON_LR_FACTOR if name == "muon" else 1.0) * math.sqrt(batch_mult)
    updates = math.ceil(steps / batch_mult)
    return ttq.Recipe("v3", size, updates, batch=8 * batch_mult, lr=lr, ema=0.999, fused=True,
                      beta2=0.9 if name == "muon" else 0.999, skip_init=True, optimizer=name)


def table(rows: list[dict]) -> str:
    """Markdown: one line per (clip, size, batch, steps) with both recipes' gains and muon - adam."""
    cells: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        cells.setdefault((r["clip"], r["size"], r["batch"], r["steps"]), {})[r["recipe"]] = r
    out = ["| clip | size | global batch | steps | adam gain | muon gain | muon - adam | ms/step adam | ms/step muon |",
           "|---|---|---|---|---|---|---|---|---|"]
    for key in sorted(cells, key=lambda k: (k[0], ("small", "medium", "large").index(k[1]), k[2], k[3])):
        c = cells[key]
        a, m = c.get("adam"), c.get("muon")
        diff = f"{m['gain'] - a['gain']:+.2f} dB" if a and m else "-"
        gains = [f"{x['gain']:+.2f} dB" if x else "-" for x in (a, m)]
        ms = [f"{x['ms_per_step']:.0f}" if x else "-" for x in (a, m)]
        out.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {gains[0]} | {gains[1]} | {diff} | {ms[0]} | {ms[1]} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", default=",".join(ttq.CLIPS))
    ap.add_argument("--sizes", default="small")
    ap.add_argument("--batches", default="8,32,128", help="global batches [crops], multiples of 8")
    ap.add_argument("--steps", default="400,1000,3000", help="run lengths [steps of 8 crops]")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=Path("default_recipe.json"))
    ap.add_argument("--from-json", type=Path, help="print the table of a saved JSON; no training")
    a = ap.parse_args()
    if a.from_json:
        print(table(json.loads(a.from_json.read_text())["rows"]))
        return
    torch.set_num_threads(a.threads)
    saved = json.loads(a.json.read_text()) if a.json.exists() else {"rows": []}
    done = {(r["clip"], r["size"], r["batch"], r["steps"], r["recipe"]) for r in saved["rows"]}
    print(f"{os.cpu_count()} CPUs, {a.threads} threads, load {os.getloadavg()[0]:.2f}", flush=True)
    for clip in a.clips.split(","):
        train, held = ttq.load_clip(clip)
        base = ttq.input_psnr(held)
        for size in a.sizes.split(","):
            for steps in (int(s) for s in a.steps.split(",")):
                for batch in (int(b) for b in a.batches.split(",")):
                    for name in RECIPES:
                        if (clip, size, batch, steps, name) in done:
                            continue
                        r = recipe(name, size, batch // 8, steps)
                        print(f"{clip} {size} batch {batch} {steps} steps {name}: {r.steps} updates, lr {r.lr:.2e}",
                              flush=True)
                        curve = ttq.train_recipe(r, train, held, 1.0, 1, a.precision)
                        seconds, _, final = curve[-1]
                        saved["rows"].append({"clip": clip, "size": size, "batch": batch, "steps": steps,
                                              "recipe": name, "gain": final - base, "input_psnr": base,
                                              "seconds": seconds, "ms_per_step": 1000 * seconds / steps})
                        ttq.write_json(a.json, saved)
    print(table(saved["rows"]))


if __name__ == "__main__":
    main()

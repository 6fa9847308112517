"""The fixed cost of a run: everything of ``cuetrain local`` / ``cuetrain demo`` that is not training steps.

A tiny run (2 ranks, ``--steps 20`` on the carphone clip, ``trainer.demo.extract``) is split into phases by the run's
own records, against the wall clock of this process:

==========================  ==========================================================================================
phase                       from -> to
==========================  ==========================================================================================
supervisor start            launch of ``python -m cuetrain.cli`` -> ``logs/local.log`` "starting N ranks"
rank start (imports)        "starting N ranks" -> the slowest rank's first log line (``logs/rank_N.log``)
gang formation              that line -> rank 0's "gang of N formed"
data phase                  -> rank 0's "data phase:" line
model + optimizer           -> rank 0's "rank 0/N: model ..." line (the training loop starts right after it)
first step                  ``metrics.jsonl`` row 1 ``wall_s`` (``local`` runs log every step)
training steps              the other steps: the last row's ``wall_s`` minus the first step
model.pt + .nk export       -> ``model_nuke.nk``'s mtime (final checkpoint, contact sheet, TorchScript, Nuke script)
ONNX + model.json (rank 0)  -> ``run.json``'s mtime (rank 0's last write: ``succeeded``)
exit                        ``local``: -> the command's exit
demo: three phases          -> the first held-out output frame's mtime (ranks exit, torch import, model load),
                            -> the last one's (inference), -> the command's exit (PSNR)
==========================  ==========================================================================================

Also printed: the total wall time, the fixed cost (total minus the training steps after the first), when
``model.onnx`` was on disk (seconds after the command exited: > 0 when it is written in the background; the benchmark
waits for it). ``--importtime``
adds ``python -X importtime`` figures of the supervisor's and a rank's imports.

Two checkouts are compared side by side, runs interleaved A B A B (``--repeats`` each; medians): this one (A) and
``--other PATH`` or ``--compare-ref GIT_REF`` (a ``git worktree`` of that commit under /tmp, B). Each checkout runs
with its own folder first on ``PYTHONPATH`` and as the working directory, so the ranks import its ``trainer``.
Every run gets a fresh ``CUETRAIN_SCRATCH`` (the host copy of the shot is made every time, as on a new host).

Run (on a shared host, under the heavy lock):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_fixed_cost.py --compare-ref HEAD \\
        [--mode demo|local|both] [--repeats 3] [--steps 20] [--importtime]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Train arguments of a ``local`` run: the demo's recipe (``trainer.demo.DEMO_TRAIN_ARGS``), logging every step.
LOCAL_ARGS = ["--batch-size", "8", "--crop-size", "64", "--model-size", "small", "--lr", "2e-3", "--optimizer", "muon",
              "--adam-beta2", "0.9", "--checkpoint-interval", "500", "--contact-sheet-interval", "250",
              "--log-interval", "1"]
PHASES = ("supervisor start", "rank start (imports)", "gang formation", "data phase", "model + optimizer",
          "first step", "training steps", "model.pt + .nk export", "ONNX + model.json (rank 0)", "exit",
          "demo: ranks' end -> 1st held-out frame", "demo: held-out frames (1st -> last)", "demo: last frame -> exit",
          "total wall", "fixed cost (total - steps 2..N)", "model.onnx on disk after exit")
_STAMP = re.compile(r"^(?:\[rank \d+\] )?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def stamp(line: str) -> float | None:
    """Seconds since the epoch of a log line's ``logging`` timestamp (local time, ms), or None."""
    found = _STAMP.match(line)
    if not found:
        return None
    return datetime.strptime(found[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def first_stamp(path: Path, pattern: str = "") -> float | None:
    """The timestamp of the first log line of ``path`` that contains ``pattern`` (any line when empty)."""
    if not path.is_file():
        return None
    for line in path.read_text(errors="replace").splitlines():
        t = stamp(line)
        if t is not None and pattern in line:
            return t
    return None


def mtime(path: Path) -> float | None:
    """``path``'s modification time [s since the epoch], or None when it does not exist."""
    return path.stat().st_mtime if path.exists() else None


def wait_onnx(run: Path, timeout_s: float = 300.0) -> float | None:
    """Wait until ``model.json`` lists ``model.onnx`` (a background export finished) or nothing is pending any more;
    returns ``model.onnx``'s mtime, None when it was not written."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            meta = json.loads((run / "model.json").read_text())
        except (OSError, ValueError):
            meta = {}
        if "model.onnx" in meta.get("exports", {}) or not meta.get("exports_pending"):
            break
        time.sleep(0.2)
    return mtime(run / "model.onnx")


def command(mode: str, data: Path, run: Path, steps: int) -> list[str]:
    """The measured command line (its Python is this interpreter)."""
    if mode == "demo":
        return [sys.executable, "-m", "cuetrain.cli", "demo", "--run-dir", str(run), "--steps", str(steps)]
    return [sys.executable, "-m", "cuetrain.cli", "local", "--world-size", "2", "--input", str(data / "train" / "input"),
            "--target", str(data / "train" / "target"), "--run-dir", str(run), "--steps", str(steps), *LOCAL_ARGS]


def run_once(checkout: Path, mode: str, data: Path, steps: int, work: Path) -> dict[str, float | None]:
    """One run of ``mode`` with ``checkout``'s code; returns the phases [s] (module doc)."""
    run = work / "run"
    if mode == "demo":  # the demo extracts into RUN/data unless the frames are there: link them in
        shutil.copytree(data, run / "data", copy_function=os.link)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(checkout), os.environ.get("PYTHONPATH")) if p),
           "CUETRAIN_SCRATCH": str(work / "scratch"), "CUETRAIN_EXPORT_ONNX": "1"}
    t0 = time.time()
    done = subprocess.run(command(mode, data, run, steps), cwd=checkout, env=env, capture_output=True, text=True)
    t_exit = time.time()
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    onnx_at = wait_onnx(run)
    said = [line for line in done.stdout.splitlines() if "PSNR" in line]  # the demo's result, to compare
    if said:
        print(f"  {checkout.name}: {said[0]}", flush=True)
    return phases(run, t0, t_exit, onnx_at)


def phases(run: Path, t0: float, t_exit: float, onnx_at: float | None) -> dict[str, float | None]:
    """The phases of a finished run in ``run`` (module doc) from its logs, metrics and files."""
    logs = run / "logs"
    spawn = first_stamp(logs / "local.log", "starting")
    ups = [first_stamp(p) for p in sorted(logs.glob("rank_*.log"))]
    up = max(t for t in ups if t is not None)
    gang = first_stamp(logs / "rank_0.log", "gang of")
    data = first_stamp(logs / "rank_0.log", "data phase:")
    loop = first_stamp(logs / "rank_0.log", "trainer.learn.train: rank 0/")  # "rank 0/N: model small (...)"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    first = rows[0]["wall_s"] if rows[0]["step"] == 1 else None
    train_end = loop + rows[-1]["wall_s"]
    nk, finished = mtime(run / "model_nuke.nk"), mtime(run / "run.json")
    steps = rows[-1]["wall_s"] - (first or 0.0)
    return {"supervisor start": spawn - t0, "rank start (imports)": up - spawn, "gang formation": gang - up,
            "data phase": data - gang, "model + optimizer": loop - data, "first step": first,
            "training steps": steps, "model.pt + .nk export": nk - train_end,
            "ONNX + model.json (rank 0)": finished - nk, **_after(run, finished, t_exit),
            "total wall": t_exit - t0, "fixed cost (total - steps 2..N)": t_exit - t0 - steps,
            "model.onnx on disk after exit": None if onnx_at is None else onnx_at - t_exit}


def _after(run: Path, finished: float, t_exit: float) -> dict[str, float]:
    """The phases after rank 0's last write: ``exit`` for ``local``; the demo's three (its held-out frames' mtimes:
    the ranks' exit, torch's import and the model's load; inference; the PSNR) for ``demo``."""
    folder = run / "holdout_output"
    held = sorted(p.stat().st_mtime for p in folder.glob("*")) if folder.is_dir() else []
    if not held:
        return {"exit": t_exit - finished}
    return {"demo: ranks' end -> 1st held-out frame": held[0] - finished,
            "demo: held-out frames (1st -> last)": held[-1] - held[0], "demo: last frame -> exit": t_exit - held[-1]}


def importtime(checkout: Path, code: str) -> dict[str, float]:
    """``python -X importtime -c code`` in ``checkout``: total import seconds and the seconds of a few heavy
    packages (0 when not imported)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=checkout, env=env,
                          capture_output=True, text=True, check=True)
    cumulative: dict[str, int] = {}
    total = 0
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].rstrip()
        if not name.startswith("  "):  # a top-level import of the program
            total += int(parts[1])
        cumulative.setdefault(name.strip(), int(parts[1]))
    watched = ("torch", "numpy", "OpenImageIO", "torch.onnx", "onnx", "onnxscript", "torchvision", "trainer.demo")
    return {"all": total / 1e6, **{name: cumulative.get(name, 0) / 1e6 for name in watched}}


SUPERVISOR_IMPORTS = "import cuetrain.cli, trainer.cli, trainer.agent.launch; trainer.cli._parser()"
RANK_IMPORTS = "import trainer.__main__, trainer.cli, trainer.learn.train; trainer.cli._parser()"


def importtimes(checkouts: dict[str, Path], repeats: int) -> None:
    """Print the median import seconds of the supervisor's and a rank's modules in each checkout (interleaved)."""
    for what, code in (("supervisor (cuetrain local)", SUPERVISOR_IMPORTS), ("rank (python -m trainer)", RANK_IMPORTS)):
        got: dict[str, list[dict[str, float]]] = {label: [] for label in checkouts}
        for _ in range(repeats):
            for label, checkout in checkouts.items():
                try:
                    got[label].append(importtime(checkout, code))
                except subprocess.CalledProcessError:  # an older checkout without one of the names
                    got[label].append(importtime(checkout, code.split(";")[0]))
        keys = list(next(iter(got.values()))[0])
        print(f"\nimports of a {what} [s, median of {repeats}, python -X importtime]")
        print(f"| {'module':<14} | " + " | ".join(f"{label:>8}" for label in checkouts) + " |")
        for key in keys:
            cells = [statistics.median(r[key] for r in got[label]) for label in checkouts]
            print(f"| {key:<14} | " + " | ".join(f"{c:8.2f}" for c in cells) + " |")


def table(results: dict[str, list[dict[str, float | None]]], mode: str, repeats: int) -> str:
    """Markdown: one row per phase, the median of each checkout and the ratio B / A (old / new)."""
    labels = list(results)
    out = [f"\n`cuetrain {mode}`, 2 ranks: median seconds of {repeats} runs, interleaved",
           f"| phase | {' | '.join(labels)} | {labels[1]}/{labels[0]} |" if len(labels) > 1 else f"| phase | {labels[0]} |",
           "|---|" + "---|" * (len(labels) + (len(labels) > 1))]
    for phase in PHASES:
        cells = []
        for label in labels:
            values = [r[phase] for r in results[label] if r.get(phase) is not None]
            cells.append(statistics.median(values) if values else None)
        if all(c is None for c in cells):
            continue
        text = [f"{c:.2f}" if c is not None else "-" for c in cells]
        if len(cells) > 1:
            ratio = cells[1] / cells[0] if cells[0] and cells[1] is not None and cells[0] > 0.05 else None
            text.append(f"{ratio:.2f}x" if ratio is not None else "")
        out.append(f"| {phase} | " + " | ".join(text) + " |")
    return "\n".join(out)


def other_checkout(args: argparse.Namespace) -> Path | None:
    """``--other``, or a ``git worktree`` of ``--compare-ref`` (made once, reused), or None."""
    if args.other:
        return Path(args.other).resolve()
    if not args.compare_ref:
        return None
    sha = subprocess.run(["git", "rev-parse", args.compare_ref], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"cuetrain-fc-{sha[:10]}"
    if not path.is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), sha], cwd=ROOT, check=True,
                       capture_output=True)
    return path


def demo_data(folder: Path) -> Path:
    """The carphone frames extracted once into ``folder`` (``trainer.demo.extract``, this checkout's)."""
    if not (folder / "holdout" / "target").is_dir():
        subprocess.run([sys.executable, "-c", f"from pathlib import Path; from trainer.demo import extract; "
                        f"extract(Path({str(folder)!r}))"], cwd=ROOT, check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    return folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--other", help="a second checkout to compare (B)")
    p.add_argument("--compare-ref", help="compare with this git ref (a worktree under /tmp, B)")
    p.add_argument("--mode", choices=("demo", "local", "both"), default="both")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--data", default=str(Path(tempfile.gettempdir()) / "cuetrain-fc-data"),
                   help="where the carphone frames are extracted (kept between runs)")
    p.add_argument("--importtime", action="store_true", help="also time the supervisor's and a rank's imports")
    p.add_argument("--json", help="append every run's phases to this JSON-lines file")
    args = p.parse_args(argv)
    checkouts = {"new (A)": ROOT}
    other = other_checkout(args)
    if other is not None:
        checkouts = {"new (A)": ROOT, "old (B)": other}
    data = demo_data(Path(args.data))
    if args.importtime:
        importtimes(checkouts, args.repeats)
    for mode in (("local", "demo") if args.mode == "both" else (args.mode,)):
        results: dict[str, list[dict[str, float | None]]] = {label: [] for label in checkouts}
        for repeat in range(args.repeats):
            for label, checkout in checkouts.items():
                with tempfile.TemporaryDirectory(prefix="cuetrain-fc-") as work:
                    row = run_once(checkout, mode, data, args.steps, Path(work))
                results[label].append(row)
                print(f"{mode} {label} run {repeat + 1}: total {row['total wall']:.1f} s, fixed "
                      f"{row['fixed cost (total - steps 2..N)']:.1f} s", flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps({"mode": mode, "checkout": label, "repeat": repeat, **row}) + "\n")
        print(table(results, mode, args.repeats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

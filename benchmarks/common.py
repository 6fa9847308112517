"""Shared pieces of the benchmarks: data, timed cuetrain runs, a bare DDP loop, medians, and the one in-process
training loop (:func:`train_loop`) that every benchmark training a network in its own process steps through.

Every figure is measured side by side in one run and reported as a median over repeats, with
runs of the compared variants interleaved (A B A B ...) so a noisy neighbour hits both alike.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer.core.ports import free_port  # noqa: E402


def child_pythonpath() -> str:
    """PYTHONPATH for a benchmark's child process: the checkout first, then the caller's own entries (e.g.
    packages installed with ``pip --target`` on a GPU host)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def demo_data(folder: Path) -> tuple[Path, Path]:
    """The carphone training sequences (real footage), extracted once into ``folder``."""
    from trainer.demo import extract

    d = extract(folder)
    return d.train_input, d.train_target


def read_rows(run_dir: Path) -> list[dict]:
    """The metrics.jsonl rows of a run directory."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def images_per_s(rows: list[dict], batch: int, skip: int = 1) -> float:
    """Throughput of a finished run from its metrics.jsonl rows (wall clock), ignoring the first ``skip`` rows."""
    rows = rows[skip:] if len(rows) > skip + 1 else rows
    first, last = rows[0], rows[-1]
    return (last["step"] - first["step"]) * batch / (last["wall_s"] - first["wall_s"])


def run_cuetrain(data: tuple[Path, Path], world: int, batch: int, steps: int, extra: list[str] | None = None,
                 env: dict[str, str] | None = None) -> float:
    """images/s of ``cuetrain local`` (world > 1) or ``cuetrain train`` (world == 1), one thread per rank."""
    return images_per_s(run_cuetrain_metrics(data, world, batch, steps, extra, env), batch)


def run_bare(world: int, batch: int, steps: int, model_size: str = "small", crop: int = 64, precision: str = "fp32",
             memory_format: str = "contiguous", device: str = "cpu", compile: bool = False, tuned: bool = True) -> float:
    """images/s of a bare DDP loop (same model, same per-rank batch, pre-made tensors, no outputs);
    ``precision``/``memory_format`` as cuetrain's flags (default: the fp32, NCHW loop); ``tuned``: with the trainer's
    glibc allocator tuning (``trainer.core.allocator``), else glibc's defaults, as a plain loop runs."""
    port = free_port()
    extra = [precision, memory_format, device] + (["compile"] if compile else []) + ([] if tuned else ["untuned"])
    procs = [subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "lib" / "bare_ddp.py"), str(rank), str(world),
                               str(port), str(batch), str(steps), model_size, str(crop), *extra],
                              env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": child_pythonpath()},
                              stdout=subprocess.PIPE, text=True) for rank in range(world)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"bare DDP loop failed: {outs}")
    return float(outs[0].strip().splitlines()[-1])


def interleaved(variants: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run each variant ``repeats`` times, interleaved; returns all measurements per variant."""
    out: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            t = time.perf_counter()
            out[name].append(fn())
            print(f"  {name}: {out[name][-1]:.1f} ({time.perf_counter() - t:.0f} s)", flush=True)
    return out


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def run_cuetrain_metrics(data: tuple[Path, Path], world: int, batch: int, steps: int,
                         extra: list[str] | None = None, env: dict[str, str] | None = None) -> list[dict]:
    """metrics.jsonl rows of a ``run_cuetrain``-style run (``extra`` flags override its defaults)."""
    with tempfile.TemporaryDirectory() as tmp:
        args = ["--input", str(data[0]), "--target", str(data[1]), "--run-dir", tmp, "--steps", str(steps),
                "--batch-size", str(batch), "--crop-size", "64", "--log-interval", "25", *(extra or [])]
        cmd = ["local", "--world-size", str(world), *args] if world > 1 else ["train", *args]
        full = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": child_pythonpath(), **(env or {})}
        subprocess.run([sys.executable, "-m", "trainer.cli", *cmd], env=full, check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return read_rows(Path(tmp))


def window_step_times(rows: list[dict], skip: int = 1) -> list[float]:
    """Seconds per step in each log window of metrics ``rows`` (the first ``skip`` windows dropped: warm-up)."""
    pairs = list(zip(rows, rows[1:]))[skip:]
    return [(b["wall_s"] - a["wall_s"]) / (b["step"] - a["step"]) for a, b in pairs]


def make_free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def train_loop(net: Any, opt: Any, sampler: Any, steps: int, loss: Callable[[Any, Any], Any],
               lr: Callable[[int], float], autocast: Callable[[], ContextManager], emas: Sequence[Any] = (),
               evaluate: Callable[[int, float], None] | None = None, every: int = 0, cuda: bool = False) -> float:
    """Train ``net`` for ``steps`` steps, as every in-process benchmark does; returns the training seconds.

    Each step: ``sampler.batch(step)`` (a ``trainer.data.crops.CropBatch``: input (B, C, h, w), target (B, C', H, W)),
    the forward pass under ``autocast()`` (e.g. ``trainer.learn.precision.Precision.autocast``), ``loss(output,
    target)`` -> (B,) per-crop losses whose mean is backpropagated, every parameter group's lr set to ``lr(step)``,
    ``opt.step()``, the gradients freed, then each EMA of ``emas`` (``trainer.learn.ema.WeightEMA``) updated.

    The clock counts the steps and one EMA update per step (as the trainer keeps one, however many averages a study
    keeps), not evaluation: ``evaluate(steps_done, seconds)`` runs every ``every`` steps and after the last one
    (``every`` 0: never). ``cuda``: synchronise the GPU before each reading of the clock.
    """
    if cuda:
        import torch

        sync: Callable[[], None] = torch.cuda.synchronize
    else:
        def sync() -> None:
            return None
    clock = 0.0
    for step in range(steps):
        t0 = time.perf_counter()
        batch = sampler.batch(step)
        with autocast():
            out = net(batch.input)
        loss(out, batch.target).mean().backward()
        for group in opt.param_groups:
            group["lr"] = lr(step)
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t1 = time.perf_counter()
        for ema in emas:
            ema.update(net)
        sync()
        clock += t1 - t0 + (time.perf_counter() - t1) / max(1, len(emas))
        if evaluate is not None and every and ((step + 1) % every == 0 or step + 1 == steps):
            evaluate(step + 1, clock)
    return clock

"""Scaling benchmarks (issue: how many machines), printed as figures and ratios measured in one run.

(c) gradient bytes per step by sync interval and compression, counted through a DDP comm hook
    (``trainer.gang.compression.counting_hook``) in a real 2-rank ``trainer.learn.train`` gang, next to the
    advisor's formula (``sync_payload``);
(d) rank-0 output overhead: median step time (per log window) with a contact sheet and a
    checkpoint every 10 steps, at the defaults (100 / 250), and never; 1 rank, interleaved;
(e) GPU figures on a CUDA machine (probe images/s per model size, NCCL all-reduce bandwidth with
    two or more GPUs); skipped cleanly without one.
Trainer against a bare DDP loop and weak scaling are ``benchmarks/bench_trainer.py``'s (a)-(c).

Run: .venv/bin/python benchmarks/bench_scaling.py [--repeats 3] [--steps 200] [--skip-bytes] [--skip-outputs]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
from pathlib import Path

from common import demo_data, interleaved, make_free_ports, run_cuetrain_metrics, window_step_times

from trainer.gang.compression import POWERSGD_START_ITER, sync_payload

KINDS = ("none", "fp16", "powersgd")
INTERVALS = (1, 2, 4, 8)


# ----------------------------------------------------------------------------------------------
# (c) bytes per step


def _bytes_rank(rank: int, ports: list[int], data: tuple[str, str], tmp: str, queue: "mp.Queue") -> None:
    """One rank: train every (compression, interval) with a counting hook; report the counts."""
    import torch

    from trainer.gang import compression
    from trainer.core.config import TrainConfig
    from trainer.core.envvars import DistEnv
    from trainer.learn.train import train

    torch.set_num_threads(1)
    sys.stdout = open(os.devnull, "w")  # the loop's [Step:N/M] lines; the counts go through the queue
    register = compression.register_hook
    counters: list[compression.CommCounter] = []

    def counted(model, kind):  # what trainer.learn.train._wrap calls, with a counter added
        counters.append(compression.CommCounter())
        return register(model, kind, counters[-1])

    compression.register_hook = counted
    port = iter(ports)
    for kind in KINDS:
        for k in INTERVALS:
            steps = k * (POWERSGD_START_ITER + 6)  # PowerSGD compresses the last 6 syncs
            cfg = TrainConfig(data[0], data[1], f"{tmp}/{kind}-{k}", steps=steps, batch_size=4, crop_size=16,
                              log_interval=steps, contact_sheet_interval=10 ** 6, checkpoint_interval=10 ** 6,
                              grad_compression=kind)
            train(cfg, DistEnv(True, rank, 2, "127.0.0.1", next(port), sync_interval=k))
            c = counters[-1]
            queue.put((rank, kind, k, steps, c.bytes, c.syncs, c.per_sync()[-1], c.calls))


def bytes_section(data: tuple[Path, Path], tmp: Path) -> list[str]:
    from trainer.learn.model import build_model

    ctx = mp.get_context("spawn")
    queue: mp.Queue = ctx.Queue()
    ports = make_free_ports(len(KINDS) * len(INTERVALS))
    procs = [ctx.Process(target=_bytes_rank, args=(r, ports, (str(data[0]), str(data[1])), str(tmp), queue))
             for r in range(2)]
    for p in procs:
        p.start()
    rows = [queue.get(timeout=600) for _ in range(2 * len(KINDS) * len(INTERVALS))]
    for p in procs:
        p.join(timeout=60)
    shapes = [tuple(p.shape) for p in build_model("small", "v1").parameters()]
    got = {(kind, k): (steps, total, syncs, last, calls) for rank, kind, k, steps, total, syncs, last, calls in rows
           if rank == 0}
    base = got[("none", 1)][1] / got[("none", 1)][0]
    out = ["(c) gradient bytes all-reduced per rank, small model, 2 ranks, counted through the comm hook",
           f"  {'compression':<11} {'sync':>4} {'syncs':>6} {'bytes/step':>11} {'vs none@1':>10} "
           f"{'bytes/sync (last)':>18} {'formula':>9} {'steady bytes/step':>18} {'vs none@1':>10}"]
    for kind in KINDS:
        for k in INTERVALS:
            steps, total, syncs, last, _ = got[(kind, k)]
            out.append(f"  {kind:<11} {k:>4} {syncs:>6} {total / steps:>11,.0f} {total / steps / base:>10.3f} "
                       f"{last:>18,} {sync_payload(shapes, kind):>9,} {last / k:>18,.0f} {last / k / base:>10.4f}")
    out.append(f"  (PowerSGD sends plain float32 for its first {POWERSGD_START_ITER} syncs; bytes/step above "
               f"includes them, 'last' is one compressed sync)")
    return out


# ----------------------------------------------------------------------------------------------
# (d) rank-0 outputs


def outputs_section(data: tuple[Path, Path], steps: int, repeats: int) -> list[str]:
    every = ["--log-interval", "10"]
    variants = {
        "never": every + ["--contact-sheet-interval", str(10 ** 6), "--checkpoint-interval", str(10 ** 6)],
        "defaults (100/250)": every,
        "every 10 steps": every + ["--contact-sheet-interval", "10", "--checkpoint-interval", "10"],
    }
    times: dict[str, list[float]] = {name: [] for name in variants}

    def run(name: str) -> float:
        t = window_step_times(run_cuetrain_metrics(data, 1, 8, steps, variants[name]))
        times[name] += t
        return 8 / statistics.median(t)

    interleaved({name: (lambda n=name: run(n)) for name in variants}, repeats)
    never = statistics.median(times["never"])
    out = [f"(d) rank-0 output overhead, 1 rank, small model, batch 8, crop 64, {steps} steps x {repeats}: "
           "median step time over 10-step windows"]
    for name, ts in times.items():
        m = statistics.median(ts)
        out.append(f"  {name:<20} {m * 1e3:7.2f} ms/step  ratio to never {m / never:.3f}")
    return out


# ----------------------------------------------------------------------------------------------
# (e) GPU


def gpu_section(data: tuple[Path, Path], tmp: Path) -> list[str]:
    import torch

    if not torch.cuda.is_available():
        return ["(e) GPU: skipped (no CUDA device)"]
    from trainer.advise.advisor import measure_link, run_probe
    from trainer.advise.budget import ProbeSettings
    from trainer.core.config import TrainConfig

    out = [f"(e) GPU: {torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} device(s)"]
    for size in ("small", "medium", "large"):
        cfg = TrainConfig(str(data[0]), str(data[1]), str(tmp / "gpu"), batch_size=16, crop_size=128, model_size=size)
        probe = run_probe(cfg, [1], ProbeSettings(warmup=5, iters=20, budget_s=600))
        fb = probe.fb_at(16)
        out.append(f"  {size:<6} batch 16, crop 128: {16 / (fb + probe.optimizer_s):8.1f} images/s "
                   f"(data+forward+backward {fb * 1e3:.1f} ms, Adam {probe.optimizer_s * 1e3:.1f} ms)")
    if torch.cuda.device_count() >= 2:
        link = measure_link(None, mb=256)
        out.append(f"  NCCL all-reduce, 2 GPUs: {link.bandwidth_gbps:.1f} Gb/s, {link.latency_s * 1e6:.0f} us per hop")
    else:
        out.append("  NCCL all-reduce: skipped (needs 2 GPUs)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--skip-bytes", action="store_true")
    ap.add_argument("--skip-outputs", action="store_true")
    a = ap.parse_args()
    report: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        data = demo_data(Path(tmp) / "data")
        if not a.skip_bytes:
            report += bytes_section(data, Path(tmp)) + [""]
        if not a.skip_outputs:
            report += outputs_section(data, a.steps, a.repeats) + [""]
        report += gpu_section(data, Path(tmp))
    print("\n".join(report))


if __name__ == "__main__":
    main()

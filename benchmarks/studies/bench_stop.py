"""Cost of the per-step stop vote (trainer.gang.stopvote.GangStop) on 2 gloo ranks over loopback.

    .venv/bin/python benchmarks/studies/bench_stop.py [--steps 2000] [--work-ms 5] [--repeats 3]

Each rank runs a loop of ``steps`` "steps": ``work-ms`` of CPU work (a matmul sized to take about
that long) and an all-reduce of the small model's 169,843 gradients (as DDP does), with and without ``GangStop.poll()`` at the end of each step, interleaved A B B A ..., and
prints the median per-step time of each and the overhead per step in microseconds. The vote is an
asynchronous MAX all-reduce of one int32 on a gloo group, waited for one step later, so its latency
hides behind the step's compute; what remains is the cost of starting and waiting on it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from trainer.core.ports import free_port  # noqa: E402
from trainer.gang.stopvote import GangStop, StopSignal  # noqa: E402


PARAMETERS = 169_843  # --model-size small


def _work(ms: float) -> torch.Tensor:
    """A square matrix whose matmul takes about ``ms`` milliseconds here."""
    n = 64
    while True:
        a = torch.rand(n, n)
        t = time.perf_counter()
        for _ in range(5):
            a @ a
        if (time.perf_counter() - t) / 5 * 1000 >= ms or n >= 2048:
            return a
        n = int(n * 1.25)


def _loop(steps: int, a: torch.Tensor, vote: GangStop | None, inside: list[float]) -> float:
    grads = torch.zeros(PARAMETERS)  # the small model's gradients, all-reduced every step as DDP does
    dist.barrier()
    t = time.perf_counter()
    for _ in range(steps):
        a @ a
        dist.all_reduce(grads)
        if vote is not None:
            t_poll = time.perf_counter()
            vote.poll()
            inside.append(time.perf_counter() - t_poll)
    if vote is not None:
        vote.close()
    dist.barrier()
    return (time.perf_counter() - t) / steps


def _rank(rank: int, port: int, args: argparse.Namespace, out: dict) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    a = _work(args.work_ms)
    plain, voted, inside = [], [], []
    for i in range(args.repeats):  # A B, B A, ...: the order alternates so drift hits both alike
        for variant in (("plain", "voted") if i % 2 == 0 else ("voted", "plain")):
            if variant == "plain":
                plain.append(_loop(args.steps, a, None, inside))
            else:
                voted.append(_loop(args.steps, a, GangStop(StopSignal(), True,
                                                           lambda: dist.new_group(backend="gloo")), inside))
    if rank == 0:
        out["plain"], out["voted"] = statistics.median(plain), statistics.median(voted)
        out["inside"] = statistics.median(inside)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--work-ms", type=float, default=5.0)
    p.add_argument("--repeats", type=int, default=6)
    args = p.parse_args()
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(free_port(), args, out), nprocs=2)
        plain, voted, inside = out["plain"], out["voted"], out["inside"]
    print(f"time inside GangStop.poll(): median {inside * 1e6:.0f} us per step")
    print(f"step without vote {plain * 1e3:.3f} ms, with vote {voted * 1e3:.3f} ms: overhead "
          f"{(voted - plain) * 1e6:.0f} us/step ({(voted / plain - 1) * 100:+.2f}%), medians of {args.repeats}")


if __name__ == "__main__":
    main()

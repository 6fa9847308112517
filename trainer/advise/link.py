"""The link probe behind ``cuetrain advise link``: bandwidth and per-hop latency of the all-reduce.

:func:`measure_link` times a one-float and a large all-reduce between ranks and fits bandwidth
and per-hop latency; as ranks of a ``COPYCAT_*`` gang it measures the network between their
hosts, alone it measures two local processes over loopback.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
from typing import Any

import torch

from trainer.advise.costmodel import Link
from trainer.advise.probe import RESULT, collect, device_now
from trainer.core.envvars import DistEnv
from trainer.core.ports import PortReservation



def fit_link(world_size: int, payload_bytes: int, small_s: float, big_s: float, source: str) -> Link:
    """Bandwidth and per-hop latency from two timed all-reduces (one float, ``payload_bytes``).

    The one-float all-reduce is taken as pure latency; the fit goes exactly through both points of
    :func:`trainer.advise.costmodel.allreduce_seconds`: latency = small / (2 (N-1)),
    bandwidth = 2 (N-1)/N x payload / (big - small).
    """
    hops = 2 * (world_size - 1)
    transfer = max(big_s - small_s, 1e-9)
    return Link(bandwidth_gbps=hops / world_size * payload_bytes * 8 / transfer / 1e9, latency_s=small_s / hops,
                source=source)


def _time_allreduce(env: DistEnv, mb: float, repeats: int, timeout_s: float) -> tuple[float, float]:
    """Median seconds of a 1-float and an ``mb`` MiB float32 all-reduce in the gang of ``env``."""
    import torch.distributed as dist

    from trainer.gang import distributed

    torch.set_num_threads(1)
    rt = distributed.setup(env, timeout_s, timeout_s)  # collective and gang timeouts
    try:
        small, big = torch.zeros(1, device=rt.device), torch.zeros(int(mb * 2 ** 20) // 4, device=rt.device)
        dist.all_reduce(small)
        dist.all_reduce(big)  # warm-up: connections and buffers
        out = []
        for tensor, n in ((small, max(20, 4 * repeats)), (big, repeats)):
            times = []
            for _ in range(n):
                dist.barrier()
                t0 = device_now(rt.device)
                dist.all_reduce(tensor)
                times.append(device_now(rt.device) - t0)
            out.append(statistics.median(times))
        return out[0], out[1]
    finally:
        distributed.teardown(rt)


def _local_link_rank(env: DistEnv, mb: float, repeats: int, timeout_s: float, queue: Any) -> None:
    queue.put((RESULT, env.rank, _time_allreduce(env, mb, repeats, timeout_s)))


def measure_link(env: DistEnv | None = None, mb: float = 16.0, repeats: int = 5, timeout_s: float = 120.0) -> Link:
    """Measure the all-reduce link: in the gang of ``env`` when it is distributed (this process is
    one rank; every rank gets the same answer), else between two local processes over loopback.

    Raises:
        RuntimeError: the rendezvous or a collective failed.
    """
    payload = int(mb * 2 ** 20) // 4 * 4
    if env is not None and env.distributed:
        small, big = _time_allreduce(env, mb, repeats, timeout_s)
        return fit_link(env.world_size, payload, small, big, f"measured: {env.world_size} ranks via {env.main_addr}")
    ctx = mp.get_context("spawn")
    queue: Any = ctx.Queue()
    with PortReservation(0) as reservation:  # rank 0's store binds it; nobody else can meanwhile
        port = reservation.port
        results = collect(ctx, _local_link_rank, [(DistEnv(True, r, 2, "127.0.0.1", port), mb, repeats, timeout_s,
                                                    queue) for r in range(2)], queue, timeout_s, "link probe")
    small, big = results[0]
    return fit_link(2, payload, small, big, "measured: 2 local processes over loopback (not the farm network)")

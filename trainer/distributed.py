"""Process-group setup from a :class:`trainer.envvars.DistEnv` (torch.distributed, TCP rendezvous).

Rank 0 hosts the rendezvous store (``torch.distributed.TCPStore``) on ``COPYCAT_MAIN_PORT``; the
other ranks connect to ``COPYCAT_MAIN_ADDR:COPYCAT_MAIN_PORT`` (torch's ``tcp://`` init method).
Backend: ``nccl`` when CUDA is available, else ``gloo``.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from trainer import gang
from trainer.envvars import DistEnv, EnvError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runtime:
    """Where this rank computes.

    Attributes:
        env: the distributed setting.
        device: torch device for the model and batches.
        backend: ``nccl``, ``gloo`` or ``none`` (not distributed).
        store: the gang's TCPStore (rank 0 hosts it; kept alive for the run), or None.
        heartbeat: this rank's heartbeat thread, or None.
    """

    env: DistEnv
    device: torch.device
    backend: str
    store: Any = field(default=None, repr=False)
    heartbeat: gang.Heartbeat | None = field(default=None, repr=False)


def interface_for(local_addr: str) -> str:
    """Network interface name for ``COPYCAT_LOCAL_ADDR`` (an interface name or one of its IPs).

    Raises:
        EnvError: no interface has that name or address (the available ones are listed).
    """
    import psutil  # well-kept, cross-platform interface table

    table = psutil.net_if_addrs()
    if local_addr in table:
        return local_addr
    for name, addrs in table.items():
        if any(a.address.split("%")[0] == local_addr for a in addrs):
            return name
    found = ", ".join(f"{n} ({', '.join(a.address for a in s if a.family == socket.AF_INET)})" for n, s in table.items())
    raise EnvError(f"COPYCAT_LOCAL_ADDR={local_addr!r} is neither an interface nor an address of this host; "
                   f"use one of: {found}")


def _pick_device(env: DistEnv) -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", env.rank % torch.cuda.device_count())
    return torch.device("cpu")


def setup(env: DistEnv, collective_timeout_s: float, gang_timeout_s: float) -> Runtime:
    """Join the gang described by ``env`` (no-op when not distributed).

    Rank 0 hosts the store on the main port; every rank forms the gang (``trainer.gang.form``:
    rank claim, job-token check, wait up to ``gang_timeout_s``), then the process group is built on
    that store with ``collective_timeout_s`` for collectives. ``COPYCAT_LOCAL_ADDR`` selects the
    interface through ``GLOO_SOCKET_IFNAME`` and ``NCCL_SOCKET_IFNAME`` (the documented knobs of
    gloo and NCCL), set in this process only.

    Raises:
        EnvError: bad local address.
        GangError: the gang could not form (timeout, port in use, duplicate rank, wrong token).
    """
    device = _pick_device(env)
    if not env.distributed:
        log.info("training non-distributed: %s not set", ", ".join(env.missing))
        return Runtime(env, device, "none")
    if env.local_addr:
        ifname = interface_for(env.local_addr)
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
        os.environ["NCCL_SOCKET_IFNAME"] = ifname
        log.info("collective traffic on interface %s (COPYCAT_LOCAL_ADDR=%s)", ifname, env.local_addr)
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    log.info("rank %d/%d joining %s:%d with %s (gang timeout %.0f s)", env.rank, env.world_size, env.main_addr,
             env.main_port, backend, gang_timeout_s)
    store = gang.connect(env, gang_timeout_s, master=env.rank == 0)
    gang.form(env, store, env.token, gang_timeout_s)
    store.set_timeout(timedelta(seconds=collective_timeout_s))
    dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=env.rank,
                            world_size=env.world_size, timeout=timedelta(seconds=collective_timeout_s))
    return Runtime(env, device, backend, store, gang.Heartbeat(env, collective_timeout_s))


def teardown(rt: Runtime | None = None) -> None:
    """Stop the heartbeat and leave the process group if one was joined."""
    if rt is not None and rt.heartbeat is not None:
        rt.heartbeat.stop()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: list[float], rt: Runtime) -> list[float]:
    """Sum ``values`` over all ranks (returned unchanged when not distributed)."""
    if rt.backend == "none":
        return values
    t = torch.tensor(values, dtype=torch.float64, device=rt.device)
    dist.all_reduce(t)
    return t.tolist()

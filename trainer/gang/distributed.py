"""Process-group setup from a :class:`trainer.core.envvars.DistEnv` (torch.distributed, TCP rendezvous).

Rank 0 hosts the rendezvous store (``torch.distributed.TCPStore``) on ``COPYCAT_MAIN_PORT``; the
other ranks connect to ``COPYCAT_MAIN_ADDR:COPYCAT_MAIN_PORT`` (torch's ``tcp://`` init method).
Backend: ``gloo`` on CPU; on CUDA ``nccl`` when every rank has a GPU of its own, else ``gloo`` for the whole
gang (:func:`cuda_backend`: NCCL refuses two ranks on one GPU, "ncclInvalidUsage", measured on an H100 with
``cuetrain local --world-size 2``; gloo all-reduces CUDA tensors through the host, slower but working).

Every phase ends within its timeout with one error line (exit code 3, ``trainer.gang.formation``): reaching
the store and forming the gang (``--gang-timeout-s``), then process-group creation and the first
collective (``--collective-timeout-s``, bounded by :class:`trainer.gang.formation.PhaseGuard`, which also
stops the other ranks when one of them fails there).
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist

from trainer.gang import formation
from trainer.gang.heartbeat import Heartbeat
from trainer.core import netaddr
from trainer.core.envvars import DistEnv, EnvError, NetEnv, read_net_env

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
        collective_timeout_s: ``--collective-timeout-s`` of the default process group [s]; every group made
            for the run (:func:`side_group`) takes it too.
    """

    env: DistEnv
    device: torch.device
    backend: str
    store: Any = field(default=None, repr=False)
    heartbeat: Heartbeat | None = field(default=None, repr=False)
    collective_timeout_s: float = 0.0


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


def gpu_id(device: torch.device) -> str:
    """A name of ``device``'s physical GPU that is the same in every process that sees it: its UUID (as
    ``nvidia-smi -L`` prints it), or ``host:PCI bus id`` where torch gives no UUID. CUDA only."""
    props = torch.cuda.get_device_properties(device)
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
    return f"{socket.gethostname()}:{getattr(props, 'pci_bus_id', device.index)}"


def cuda_backend(gpus: list[str]) -> tuple[str, str]:
    """The gang's backend when rank r computes on GPU ``gpus[r]``: ``("nccl", "")`` when every rank has its own
    GPU, else ``("gloo", why)`` naming the shared GPUs and their ranks. Every rank gets the same ``gpus``
    (:func:`exchange_gpus`), so every rank chooses the same backend."""
    ranks: dict[str, list[int]] = {}
    for rank, gpu in enumerate(gpus):
        ranks.setdefault(gpu, []).append(rank)
    shared = {gpu: rs for gpu, rs in ranks.items() if len(rs) > 1}
    if not shared:
        return "nccl", ""
    where = "; ".join(f"ranks {', '.join(map(str, rs))} on {gpu}" for gpu, rs in shared.items())
    return "gloo", (f"{where}: NCCL needs a GPU per rank, so this gang uses gloo (slower all-reduce through the "
                    f"host); run at most as many ranks per host as it has GPUs for NCCL")


def exchange_gpus(store: Any, env: DistEnv, mine: str, timeout_s: float) -> list[str]:
    """Publish this rank's GPU id in the gang's store and read every rank's (key ``gpu/RANK``); blocks until
    every rank has published, up to ``timeout_s`` [s] (the store raises on timeout)."""
    store.set(f"gpu/{env.rank}", mine)
    store.wait([f"gpu/{r}" for r in range(env.world_size)], timedelta(seconds=timeout_s))
    return [store.get(f"gpu/{r}").decode() for r in range(env.world_size)]


def collective_interface(env: DistEnv, net: NetEnv) -> netaddr.Choice:
    """This rank's interface for gloo/NCCL: ``COPYCAT_LOCAL_ADDR`` when set, else the one that routes to
    the main address (:func:`trainer.core.netaddr.choose_collective`).

    Raises:
        EnvError: ``COPYCAT_LOCAL_ADDR`` is not of this host, or is loopback while the main address is
            reached through another interface (the other hosts could not reach this rank); or no
            route to the main address (the message says what to set).
    """
    try:
        if not env.local_addr:
            return netaddr.choose_collective(env.main_addr, netaddr.interfaces(), netaddr.kernel_route,
                                             net.cuebot_hosts)
        name = interface_for(env.local_addr)
        addrs = netaddr.interfaces().get(name, ())
        addr = env.local_addr if netaddr.is_ip(env.local_addr) else (addrs[0] if addrs else "")
        src = netaddr.kernel_route(env.main_addr)
        if netaddr.is_loopback(addr) and src and not netaddr.is_loopback(src):
            via = netaddr.interface_of(src, netaddr.interfaces())
            raise EnvError(f"COPYCAT_LOCAL_ADDR={env.local_addr} is loopback, but this host reaches the main address "
                           f"{env.main_addr} via {via} ({src}), so the other hosts could not reach this rank; unset "
                           f"COPYCAT_LOCAL_ADDR (cuetrain then uses {via}) or set it to {via}")
        return netaddr.Choice(addr, name, f"COPYCAT_LOCAL_ADDR={env.local_addr}")
    except netaddr.NetAddrError as exc:
        raise EnvError(str(exc)) from None


def _use_interface(choice: netaddr.Choice, net: NetEnv, env: DistEnv) -> str:
    """Set GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME in this process (the documented knobs of gloo and NCCL).
    A value set before cuetrain started is kept unless ``COPYCAT_LOCAL_ADDR`` is set. Returns gloo's interface."""
    for var, preset in (("GLOO_SOCKET_IFNAME", net.gloo_socket_ifname), ("NCCL_SOCKET_IFNAME", net.nccl_socket_ifname)):
        if preset and not env.local_addr:
            log.info("rank %d: keeping %s=%s from the environment (cuetrain would use %s)", env.rank, var, preset,
                     choice.interface)
        else:
            os.environ[var] = choice.interface
    return net.gloo_socket_ifname if net.gloo_socket_ifname and not env.local_addr else choice.interface


def setup(env: DistEnv, collective_timeout_s: float, gang_timeout_s: float,
          on_abort: Callable[[formation.GangError], None] | None = None) -> Runtime:
    """Join the gang described by ``env`` (no-op when not distributed).

    The collective interface is chosen first (:func:`collective_interface`, logged with its reason).
    Rank 0 hosts the store on the main port; every rank forms the gang (``trainer.gang.formation.form``:
    rank claim, job-token check, wait up to ``gang_timeout_s``), then the process group is built on
    that store and a first collective is run, each bounded by ``collective_timeout_s``
    (:class:`trainer.gang.formation.PhaseGuard`; ``on_abort`` is called with the error before a hung phase
    ends the process).

    Raises:
        EnvError: bad local address, or no route to the main address.
        GangError: the gang could not form (timeout, port in use, duplicate rank, wrong token) or the
            process group could not connect (exit code 3).
    """
    device = _pick_device(env)
    if not env.distributed:
        log.info("training non-distributed: %s not set", ", ".join(env.missing))
        return Runtime(env, device, "none")
    net = read_net_env()
    choice = collective_interface(env, net)
    log.info("rank %d: collective interface %s (%s): %s", env.rank, choice.interface, choice.address, choice.reason)
    ifname = _use_interface(choice, net, env)
    addrs = netaddr.interfaces().get(ifname, ()) if ifname != choice.interface else (choice.address,)
    where = f"host {socket.gethostname()}, interface {ifname} {addrs[0] if addrs else '?'}"
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    log.info("rank %d/%d joining %s:%d (gang timeout %.0f s)", env.rank, env.world_size, env.main_addr,
             env.main_port, gang_timeout_s)
    store = formation.connect(env, gang_timeout_s, master=env.rank == 0, where=where)
    formation.form(env, store, env.token, gang_timeout_s, where)
    store.set_timeout(timedelta(seconds=collective_timeout_s))
    guard = formation.PhaseGuard(env, where, collective_timeout_s, on_abort)
    if device.type == "cuda":
        with guard.phase("the GPU check"):  # bounded, and a rank that fails here stops the others, as below
            backend, why = cuda_backend(exchange_gpus(store, env, gpu_id(device), collective_timeout_s))
        if why:
            log.warning("rank %d: %s", env.rank, why)
    log.info("rank %d/%d: process group with %s", env.rank, env.world_size, backend)  # after the GPU check's choice
    with guard.phase("process-group creation"):
        dist.init_process_group(backend, store=dist.PrefixStore("pg", store), rank=env.rank,
                                world_size=env.world_size, timeout=timedelta(seconds=collective_timeout_s))
    with guard.phase("the first collective"):
        dist.all_reduce(torch.zeros(1, device=device))
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # NCCL returns at enqueue; its connections are made when it runs
    guard.close()
    return Runtime(env, device, backend, store, Heartbeat(env, collective_timeout_s), collective_timeout_s)


def side_group(rt: Runtime) -> Any:
    """A gloo process group of every rank (the stop vote's, the shot watch's) with the default group's
    ``--collective-timeout-s``: ``torch.distributed.new_group`` without a timeout takes gloo's default of 30 minutes,
    so a rank stopped (SIGSTOP, a host cut off) during one of its collectives would stall the gang instead of
    ending the attempt. Call it on every rank in the same order (``new_group``'s rule).

    Raises:
        ValueError: ``rt`` is not distributed or has no collective timeout (a Runtime not made by :func:`setup`).
    """
    if rt.backend == "none" or rt.collective_timeout_s <= 0:
        raise ValueError(f"side_group needs a distributed Runtime made by setup() (backend {rt.backend!r}, "
                         f"collective_timeout_s {rt.collective_timeout_s})")
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=rt.collective_timeout_s))


def teardown(rt: Runtime | None = None) -> None:
    """Stop the heartbeat and leave the process group if one was joined."""
    if rt is not None and rt.heartbeat is not None:
        rt.heartbeat.stop()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_array(values: np.ndarray, rt: Runtime) -> np.ndarray:
    """Sum ``values`` (any shape) over all ranks as float64 (returned unchanged when not distributed)."""
    if rt.backend == "none":
        return values
    t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64)).to(rt.device)
    dist.all_reduce(t)
    return t.cpu().numpy()


def all_reduce_sum(values: list[float], rt: Runtime) -> list[float]:
    """Sum ``values`` over all ranks (returned unchanged when not distributed)."""
    return values if rt.backend == "none" else all_reduce_array(np.asarray(values), rt).tolist()

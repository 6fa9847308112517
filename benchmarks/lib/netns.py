"""Two network namespaces joined by a veth pair with a ``tc`` bandwidth limit (Linux, root).

A stand-in for two farm hosts on a slow link: each rank runs in its own namespace
(``ip netns exec``) and all its collective traffic crosses the veth pair, where a token-bucket
filter (``tc qdisc ... tbf``) on both ends caps the rate. Only addresses inside the namespaces
created here are used (10.77.231.1 and 10.77.231.2); everything is deleted on exit. The ranks get
no ``COPYCAT_LOCAL_ADDR``: each picks the interface that routes to the main address by itself
(``trainer.core.netaddr``), as farm frames do.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from common import ROOT, images_per_s, read_rows

# The namespace probe lives with the tests' multi-host bed, its stdlib-only and more careful copy (the
# benchmarks are scripts run from benchmarks/ that import ``common`` as a top-level module, so the tests
# could not import this file without putting benchmarks/ on sys.path); ``common`` has put the repository
# root on sys.path, which is how every benchmark imports trainer too.
from tests.multihost.bed import run_ip, unavailable as _probe

ADDRS = ("10.77.231.1", "10.77.231.2")
PORT = 29731  # inside the namespaces: no other process can hold it
TIMEOUT_S = 600  # per gang run: a hung collective ends the benchmark instead of the machine


@dataclass(frozen=True)
class Pair:
    """The two namespaces (rank r runs in ``names[r]`` with address ``ADDRS[r]``) and the rate cap."""

    names: tuple[str, str]
    rate_mbit: float


def unavailable() -> str | None:
    """None when namespaces, veth and tc can be used here, else the reason they cannot (the bed's probe)."""
    return _probe(tools=("ip", "tc"))


@contextlib.contextmanager
def veth_pair(rate_mbit: float, burst_kb: int = 32, latency_ms: int = 100) -> Iterator[Pair]:
    """Create two namespaces joined by veth, each end shaped to ``rate_mbit``; delete them on exit."""
    tag = secrets.token_hex(3)
    names = (f"ctn-a-{tag}", f"ctn-b-{tag}")
    devs = (f"ctna{tag}", f"ctnb{tag}")
    created: list[str] = []
    try:
        for n in names:
            run_ip("netns", "add", n)
            created.append(n)
        run_ip("link", "add", devs[0], "type", "veth", "peer", "name", devs[1])
        for n, dev, addr in zip(names, devs, ADDRS):
            run_ip("link", "set", dev, "netns", n)
            run_ip("-n", n, "addr", "add", f"{addr}/24", "dev", dev)
            run_ip("-n", n, "link", "set", dev, "up")
            run_ip("-n", n, "link", "set", "lo", "up")
            subprocess.run(["ip", "netns", "exec", n, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                            f"{rate_mbit:g}mbit", "burst", f"{burst_kb}kb", "latency", f"{latency_ms}ms"],
                           check=True, capture_output=True, timeout=30)
        yield Pair(names, rate_mbit)
    finally:
        for n in created:  # deleting a namespace deletes its end of the veth pair, and so the pair
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=30)


def _env(rank: int, world: int, sync: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "COPYCAT_MAIN_ADDR": ADDRS[0],
            "COPYCAT_MAIN_PORT": str(PORT), "COPYCAT_RANK": str(rank), "COPYCAT_WORLD_SIZE": str(world),
            "COPYCAT_SYNC_INTERVAL": str(sync)}


def run_gang(pair: Pair, cli_args: list[str], sync: int = 1) -> list[str]:
    """Run ``python -m trainer.cli ARGS`` as rank 0 in one namespace and rank 1 in the other; returns stdouts."""
    procs = [subprocess.Popen(["ip", "netns", "exec", pair.names[r], sys.executable, "-m", "trainer.cli", *cli_args],
                              env=_env(r, 2, sync), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in range(2)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=TIMEOUT_S)
            if p.returncode:
                raise RuntimeError(f"rank failed in namespace: {err[-2000:]}")
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def run_cuetrain_netns(pair: Pair, data: tuple[Path, Path], batch: int, steps: int, sync: int,
                       extra: list[str] | None = None) -> float:
    """images/s of a 2-rank ``cuetrain train`` gang across the namespaces (same arguments as ``run_cuetrain``)."""
    with tempfile.TemporaryDirectory() as tmp:
        args = ["train", "--input", str(data[0]), "--target", str(data[1]), "--run-dir", tmp, "--steps", str(steps),
                "--batch-size", str(batch), "--crop-size", "64", "--log-interval", "25", *(extra or [])]
        run_gang(pair, args, sync)
        return images_per_s(read_rows(Path(tmp)), batch)


def measure_link_netns(pair: Pair, mb: float = 4.0, repeats: int = 5) -> tuple[float, float]:
    """``cuetrain advise link`` across the namespaces: (bandwidth [Gb/s], per-hop latency [s])."""
    out = run_gang(pair, ["advise", "link", "--link-mb", f"{mb:g}", "--repeats", str(repeats)])[0]
    line = next(x for x in out.splitlines() if x.startswith("use: "))
    words = line.split()
    gbps = float(words[words.index("--bandwidth-gbps") + 1])
    latency_us = float(words[words.index("--latency-us") + 1])
    return gbps, latency_us * 1e-6

"""A multi-host farm on one machine: K network namespaces on a bridge, each a "host" with its own IP.

    with NetnsBed(hosts=3) as bed:          # bridge ctn-brXXXX 10.77.N.1/24, hosts 10.77.N.10..
        bed.run(0, ["python", "-c", "..."])  # runs inside host 0 (its netns, UTS and mount namespaces)
        bed.link_down(2); bed.link_up(2)     # pull host 2's cable and plug it back

Each host is a network namespace ``ctn-XXXX-hI`` holding one end of a veth pair (``eth0``,
10.77.N.(10+I)/24, default route via the bridge); the other end is a port of the bridge
``ctn-brXXXX`` in this (the root) namespace, which has 10.77.N.1, so processes here (the Cuebot
double) reach every host and every host reaches them and the other hosts. Processes started with
:meth:`NetnsBed.command` also get their own UTS and mount namespaces (``unshare --uts --mount``):
the host name is ``ctnhI`` and ``/etc/hosts`` is a bind-mounted file that maps it to 127.0.1.1, as
Debian's installer writes it. That is the trap of issue 9: ``gethostbyname(gethostname())`` is
loopback on every host, so gloo's default address is loopback. There is no DNS (a bind-mounted
``/etc/resolv.conf`` names a server on the host's own loopback, where none listens, so a lookup fails at
once; the machine's own server is not reachable from the bed and made every lookup, e.g. c10d's reverse
lookup of each store client, wait out its timeout, ~10 s): the other hosts' names do not resolve, so a
job only trains if frame 0 publishes an IP (before issue 9 it published its host name, and the other
frames waited for the whole rendezvous timeout).

Only names starting with ``ctn-`` and addresses in 10.77.0.0/16 are created; everything is deleted
on exit (deleting a namespace deletes its veth pair). Needs Linux, root, ``ip`` and ``unshare``;
:func:`unavailable` says why not otherwise.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SUBNET_PREFIX = "10.77"  # this bed's subnet (10.77.0.0/16); one /24 per bed
IFNAME = "eth0"  # the host's interface inside its namespace


#: What each command the probe can ask for is, for the skip message.
_TOOL_NAMES = {"ip": "ip (iproute2)", "unshare": "unshare (util-linux)", "tc": "tc (iproute2)"}


def run_ip(*args: str) -> None:
    """``ip ARGS``, checked (also ``benchmarks/lib/netns.py``'s).

    Raises:
        subprocess.CalledProcessError: ip failed (its stderr is on the exception).
        subprocess.TimeoutExpired: ip took over 30 s.
    """
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def unavailable(tools: tuple[str, ...] = ("ip", "unshare")) -> str | None:
    """None when network namespaces can be made here, else why not (for a skip message).

    The one probe of the tests' bed and the benchmarks' veth pair (``benchmarks/lib/netns.py``): Linux, the
    commands in ``tools`` on PATH (the bed runs ``unshare``, the benchmark ``tc``), root, and a namespace
    actually created and deleted.
    """
    if not os.path.exists("/proc/self/ns/net") or not all(shutil.which(t) for t in tools):
        return f"needs Linux with the {' and '.join(_TOOL_NAMES.get(t, t) for t in tools)} commands"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    name = f"ctn-check-{secrets.token_hex(3)}"
    try:
        run_ip("netns", "add", name)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        return f"'ip netns add' is not permitted here: {(getattr(exc, 'stderr', '') or str(exc)).strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
    return None


def _free_tag_and_subnet() -> tuple[str, int]:
    """A name tag and a subnet N (10.77.N.0/24) that no other bed on this machine uses now.

    Two beds with one subnet would route the bridge address to either bridge. Beds of the same pytest session never
    meet: each pytest-xdist worker draws N from its own slice of 20..219 (``PYTEST_XDIST_WORKER``, gw0, gw1, ...),
    and tests/conftest.py runs the multi-host tests on one worker anyway. Beds of other sessions on the machine
    (another checkout's suite, a benchmark) are avoided by skipping the tags and subnets ``ip`` lists as in use.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    width = 200 // workers
    first = 20 + (int(worker) % workers if worker.isdigit() else 0) * width
    listed = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True, timeout=30).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=30).stdout
    used = {int(n) for n in re.findall(rf"inet {re.escape(SUBNET_PREFIX)}\.(\d+)\.", listed)}
    free = [n for n in range(first, first + width) if n not in used] or list(range(first, first + width))
    while True:
        tag = secrets.token_hex(2)
        if f"ctn-br{tag}" not in links and f"ctn{tag}v" not in links:
            return tag, secrets.choice(free)


@dataclass(frozen=True)
class Host:
    """One host of the bed: namespace, host name, IP and the bridge-side end of its veth pair."""

    netns: str
    name: str
    ip: str
    veth: str


class NetnsBed:
    """K hosts on a bridge (see module doc); a context manager that deletes everything on exit."""

    def __init__(self, hosts: int = 3) -> None:
        tag, self.subnet = _free_tag_and_subnet()
        self.bridge = f"ctn-br{tag}"
        self.gateway = f"{SUBNET_PREFIX}.{self.subnet}.1"
        self.hosts = [Host(f"ctn-{tag}-h{i}", f"ctnh{i}", f"{SUBNET_PREFIX}.{self.subnet}.{10 + i}", f"ctn{tag}v{i}")
                      for i in range(hosts)]
        self.etc = Path(tempfile.mkdtemp(prefix="ctn-etc-"))
        self._netns: list[str] = []
        self._bridge_made = False

    def __enter__(self) -> "NetnsBed":
        try:
            self.create()
        except BaseException:
            self.delete()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.delete()

    def create(self) -> None:
        """Make the bridge, the namespaces, the veth pairs and each host's /etc/hosts."""
        run_ip("link", "add", self.bridge, "type", "bridge")
        self._bridge_made = True
        run_ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        run_ip("link", "set", self.bridge, "up")
        for host in self.hosts:
            run_ip("netns", "add", host.netns)
            self._netns.append(host.netns)
            run_ip("link", "add", host.veth, "type", "veth", "peer", "name", IFNAME, "netns", host.netns)
            run_ip("link", "set", host.veth, "master", self.bridge)
            run_ip("link", "set", host.veth, "up")
            run_ip("-n", host.netns, "addr", "add", f"{host.ip}/24", "dev", IFNAME)
            run_ip("-n", host.netns, "link", "set", IFNAME, "up")
            run_ip("-n", host.netns, "link", "set", "lo", "up")
            run_ip("-n", host.netns, "route", "add", "default", "via", self.gateway)
            path = self.etc / f"hosts.{host.name}"
            path.write_text(f"127.0.0.1\tlocalhost\n127.0.1.1\t{host.name}\n")
            path.chmod(0o644)
        resolv = self.etc / "resolv.conf"  # no DNS server: a lookup fails at once, not after a timeout per try
        resolv.write_text("# cuetrain test bed (tests/multihost/bed.py): no DNS on these hosts\n"
                          "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        resolv.chmod(0o644)
        self.etc.chmod(0o755)

    def delete(self) -> None:
        """Delete the namespaces (and so their veth pairs) and the bridge; never raises."""
        for netns in self._netns:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30)
        self._netns.clear()
        if self._bridge_made:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)
            self._bridge_made = False
        shutil.rmtree(self.etc, ignore_errors=True)

    def command(self, index: int, argv: list[str]) -> list[str]:
        """``argv`` run on host ``index``: its netns, host name and /etc/hosts (execs ``argv``, same pid)."""
        host = self.hosts[index]
        script = (f"hostname {host.name} && mount --bind {self.etc / f'hosts.{host.name}'} /etc/hosts && "
                  f"mount --bind {self.etc / 'resolv.conf'} /etc/resolv.conf && exec \"$@\"")
        return ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--mount", "--propagation", "private",
                "sh", "-c", script, "sh", *argv]

    def run(self, index: int, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on host ``index`` and wait for it."""
        return subprocess.run(self.command(index, argv), capture_output=True, text=True, timeout=timeout)

    def link_down(self, index: int) -> None:
        """Pull host ``index``'s cable: its bridge port goes down (``ip link set VETH down``)."""
        run_ip("link", "set", self.hosts[index].veth, "down")

    def link_up(self, index: int) -> None:
        """Plug host ``index``'s cable back in."""
        run_ip("link", "set", self.hosts[index].veth, "up")

"""Which IP frame 0 publishes and which interface each rank's collectives use, with no hand settings.

Farm hosts often map their own host name to loopback (Debian's installer writes ``127.0.1.1
HOSTNAME`` into ``/etc/hosts``), so neither ``gethostbyname(gethostname())`` nor gloo's default (it
binds the address the host name resolves to) is an address other hosts can reach. The choices
here come from the kernel's routing table instead, asked the portable way: a UDP socket
``connect()``-ed to a destination sends nothing, and its ``getsockname()`` is the source address
the kernel would use for it (the ``src`` of ``ip route get DEST``; Linux ip(7), "connect" on a UDP
socket). The address is mapped to its interface with ``psutil.net_if_addrs()``.

The main address (frame 0's IP, Foundry's ``COPYCAT_MAIN_ADDR``: "the IP that process 0 runs on"),
first rule that applies (:func:`choose_main`):

1. the source address of the route to Cuebot (``CUEBOT_HOSTS``), when known and not loopback:
   the interface the farm itself reaches this host on;
2. else the source address of the default route (a route to 192.0.2.1, TEST-NET-1 of RFC 5737,
   which only a default route covers);
3. else the only non-loopback IPv4 address of the host;
4. else, when the host has no address but loopback, 127.0.0.1: every rank must then be on this
   host. Several candidates and no route to choose by is an error that says what to set.

The collective interface of a rank (``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME``,
:func:`choose_collective`): the interface of the source address of the route to the main
address. On rank 0's host that is the interface holding the main address (the kernel answers
``local ... dev lo src MAIN``; ``src`` is kept, not ``dev``). A main address that is a *host name*
resolving to loopback is the Debian trap: the other hosts resolve it elsewhere (DNS), so the rank
uses the interface :func:`choose_main` would pick. A literal loopback main address (``cuetrain
local``) keeps loopback.

The pure functions take the interface table and the route lookup as arguments (tests inject
them); :func:`interfaces` and :func:`kernel_route` are the real ones. ``COPYCAT_LOCAL_ADDR`` and
``CUETRAIN_MAIN_HOST`` override all of this (trainer.gang.distributed, cue_plugin.node.rendezvous).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

#: name -> IPv4 addresses of the interface.
Interfaces = Mapping[str, Sequence[str]]
#: destination (IP or host name) -> source IPv4 address the kernel routes it from, None when unroutable.
Route = Callable[[str], "str | None"]

DEFAULT_ROUTE_PROBE = "192.0.2.1"  # RFC 5737 TEST-NET-1: only a default route covers it; nothing is sent
LOOPBACK = "127.0.0.1"


class NetAddrError(ValueError):
    """No address or interface can be chosen; the message says why and what to set."""


@dataclass(frozen=True)
class Choice:
    """A chosen address.

    Attributes:
        address: IPv4 address (dotted quad).
        interface: name of the interface holding it ("" when no interface holds it).
        reason: why it was chosen, for the log.
    """

    address: str
    interface: str
    reason: str


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8 (and ::1); False for anything that is not an IP literal."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def interface_of(address: str, table: Interfaces) -> str:
    """The interface holding ``address`` ("lo"-like name for loopback addresses), "" when none does."""
    for name, addrs in table.items():
        if address in addrs:
            return name
    if is_loopback(address):
        return next((n for n, addrs in table.items() if any(is_loopback(a) for a in addrs)), "")
    return ""


def _host_part(entry: str) -> str:
    """``host`` of a ``CUEBOT_HOSTS`` entry ``host[:port]`` (``[v6]:port`` too)."""
    entry = entry.strip()
    if entry.startswith("["):
        return entry[1:].split("]", 1)[0]
    return entry.rsplit(":", 1)[0] if entry.count(":") == 1 else entry


def choose_main(table: Interfaces, route: Route, cuebot_hosts: Sequence[str] = ()) -> Choice:
    """Frame 0's IP, by the rules of the module doc.

    Args:
        table: the host's interfaces (:func:`interfaces`).
        route: source address lookup (:func:`kernel_route`).
        cuebot_hosts: ``CUEBOT_HOSTS`` entries, ``host[:port]``.

    Raises:
        NetAddrError: several non-loopback addresses and neither a route to Cuebot nor a default route.
    """
    for entry in cuebot_hosts:
        host = _host_part(entry)
        src = route(host) if host else None
        if src and not is_loopback(src):
            return Choice(src, interface_of(src, table), f"its interface routes to Cuebot at {host} (CUEBOT_HOSTS)")
    src = route(DEFAULT_ROUTE_PROBE)
    if src and not is_loopback(src):
        return Choice(src, interface_of(src, table), "its interface has the default route")
    candidates = [(n, a) for n, addrs in table.items() for a in addrs if not is_loopback(a)]
    if len(candidates) == 1:
        name, addr = candidates[0]
        return Choice(addr, name, "the only non-loopback interface (no route to Cuebot, no default route)")
    if not candidates:
        return Choice(LOOPBACK, interface_of(LOOPBACK, table), "this host has no interface but loopback, "
                      "so every rank must run on this host")
    listed = ", ".join(f"{n} {a}" for n, a in candidates)
    raise NetAddrError(f"cannot choose frame 0's address among {listed}: no route to Cuebot (CUEBOT_HOSTS) and no "
                       "default route; set CUETRAIN_MAIN_HOST on the layer to the IP the other hosts reach")


def choose_collective(main_addr: str, table: Interfaces, route: Route, cuebot_hosts: Sequence[str] = ()) -> Choice:
    """This rank's collective interface, by the rules of the module doc.

    Args:
        main_addr: ``COPYCAT_MAIN_ADDR`` (IP or host name).
        table, route, cuebot_hosts: as for :func:`choose_main`.

    Raises:
        NetAddrError: the main address cannot be resolved or routed from this host.
    """
    src = route(main_addr)
    if src is None:
        raise NetAddrError(f"this host has no route to the main address COPYCAT_MAIN_ADDR={main_addr} (unknown host "
                           "name or unreachable network); set COPYCAT_MAIN_ADDR to frame 0's IP, or COPYCAT_LOCAL_ADDR "
                           "to the interface that reaches it")
    if is_loopback(src) and not is_loopback(main_addr):
        picked = choose_main(table, route, cuebot_hosts)
        return Choice(picked.address, picked.interface,
                      f"the main address {main_addr} is a name that resolves to loopback here ({src}; /etc/hosts?), "
                      f"which other hosts cannot reach, so this host's farm address is used: {picked.reason}")
    name = interface_of(src, table)
    if not name:
        raise NetAddrError(f"the route to the main address {main_addr} leaves from {src}, which no interface of this "
                           "host holds; set COPYCAT_LOCAL_ADDR to the interface that reaches it")
    return Choice(src, name, f"it routes to the main address {main_addr}")


def interfaces() -> dict[str, tuple[str, ...]]:
    """This host's interfaces and their IPv4 addresses (``psutil.net_if_addrs``)."""
    import psutil  # well-kept, cross-platform interface table

    return {name: tuple(a.address for a in addrs if a.family == socket.AF_INET)
            for name, addrs in psutil.net_if_addrs().items()}


def kernel_route(destination: str) -> str | None:
    """Source IPv4 address the kernel would use towards ``destination`` (IP or host name), None when the
    name does not resolve or no route covers it. Sends nothing (UDP ``connect`` only picks the route)."""
    try:
        ip = socket.getaddrinfo(destination, None, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((ip, 9))  # port 9 (discard); any port works
            return s.getsockname()[0]
    except OSError:
        return None


def describe_route(destination: str) -> str:
    """``"via eth0 (10.0.0.5)"``: how this host reaches ``destination``, for error messages."""
    src = kernel_route(destination)
    if src is None:
        return "with no route from this host (name unknown or network unreachable)"
    try:
        name = interface_of(src, interfaces()) or "?"
    except ImportError:  # psutil missing in this interpreter: a message must not fail for it
        name = "?"
    return f"via {name} ({src}){' = this host itself: loopback' if is_loopback(src) else ''}"

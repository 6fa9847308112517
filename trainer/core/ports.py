"""Rank 0's TCP port: reserved, never "picked free, closed and hoped for".

Rank 0's ``TCPStore`` listens on the main port. A port chosen by binding port 0 and closing the socket
can be taken by any other program (an explicit bind, or an outgoing connection's ephemeral port)
before the store binds it. A :class:`PortReservation` keeps a socket bound with ``SO_REUSEADDR`` but
not listening for as long as the gang runs: other programs cannot bind the port, and the store still
can, because it binds with ``SO_REUSEADDR`` too and Linux allows that while nobody listens (socket(7),
``SO_REUSEADDR``). Used by every path that starts rank 0: a farm frame 0 (``cue_plugin.node.rendezvous``),
``cuetrain local`` (:mod:`trainer.agent.launch`) and the advisor's local link probe.
"""

from __future__ import annotations

import socket

from trainer.core.exitcodes import ExitCode


class PortUnavailable(Exception):
    """The port cannot be reserved (exit code 6, ``ExitCode.PORT_UNAVAILABLE``)."""

    exit_code = int(ExitCode.PORT_UNAVAILABLE)


class PortReservation:
    """A TCP port held for rank 0's store: bound with ``SO_REUSEADDR`` on all interfaces, not listening.

    Args:
        port: the port to hold, 0 to let the OS pick a free one.

    Raises:
        PortUnavailable: the port is in use or not allowed (``error`` names the class raised; a
            subclass may set its own, e.g. ``cue_plugin.node.rendezvous.PortUnavailable``).
    """

    error: type[Exception] = PortUnavailable

    def __init__(self, port: int = 0) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind(("", port))
        except OSError as exc:
            self._sock.close()
            raise self.error(f"cannot reserve TCP port {port or '(any)'} for rank 0: {exc.strerror}; "
                             "another program uses it (the frame's retry tries another port)") from exc
        self.port: int = self._sock.getsockname()[1]

    def close(self) -> None:
        """Release the port (idempotent)."""
        self._sock.close()

    def __enter__(self) -> "PortReservation":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the OS picks it), then released.

    Only for tests and benchmarks whose own process binds the port a moment later and accept the race;
    every product path that starts rank 0 holds a :class:`PortReservation` instead.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])

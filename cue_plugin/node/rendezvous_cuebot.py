"""The ``cuebot`` rendezvous mode: ranks find frame 0 through Cuebot (pycue), no file is written.

See ``cue_plugin.node.rendezvous`` (module doc, "Two modes") for the protocol: frame 0 must be RUNNING;
its host is the host part of ``last_resource``; the port is :func:`cuebot_port` of (job id, frame 0's
``retry_count``), 20000 + crc32 % 10000, below Linux's ephemeral range (32768-60999).
"""

from __future__ import annotations

import os
import socket
import time
import zlib
from dataclasses import dataclass
from typing import Callable

from cue_plugin.node.publication import Publication
from cue_plugin.node.rendezvous import PortReservation, RendezvousError, log

PORT_BASE, PORT_SPAN = 20000, 10000  # ports PORT_BASE .. PORT_BASE + PORT_SPAN - 1


def cuebot_port(job_key: str, retry_count: int) -> int:
    """Deterministic port of frame 0's store in cuebot mode (same on every rank)."""
    return PORT_BASE + zlib.crc32(f"{job_key}:{retry_count}".encode()) % PORT_SPAN



@dataclass(frozen=True)
class FrameInfo:
    """What Cuebot says about one frame: state name, ``last_resource`` and ``retry_count``."""

    state: str
    last_resource: str
    retry_count: int


def pycue_lookup(job: str, layer: str, number: int) -> FrameInfo:
    """Frame ``number`` of ``job``/``layer`` from Cuebot via pycue (imported here, not at module import).

    Raises:
        opencue.exception.CueException, grpc.RpcError: Cuebot unreachable or frame not found.
    """
    import opencue
    from opencue_proto import job_pb2

    frame = opencue.api.findFrame(job, layer, number)
    return FrameInfo(job_pb2.FrameState.Name(frame.data.state), frame.data.last_resource, frame.data.retry_count)


class CuebotSource:
    """``cuebot`` mode: frame 0's host and retry count from Cuebot (see module doc).

    Args:
        job: job name (``CUE_JOB``).
        layer: layer name (``CUE_LAYER``).
        job_key: what the port is derived from (``CUE_JOB_ID``, else the job name).
        lookup: frame lookup (default :func:`pycue_lookup`; tests pass a fake).
    """

    #: a restart of frame 0 inside its frame keeps the attempt (the retry count) and the port
    restarts_reuse_attempt = True

    def __init__(self, job: str, layer: str, job_key: str, lookup: Callable[[str, str, int], FrameInfo] | None = None):
        if not job or not layer:
            raise RendezvousError("the cuebot rendezvous needs CUE_JOB and CUE_LAYER (set by RQD on every frame); "
                                  "run frames through OpenCue or use --rendezvous file")
        self.job, self.layer, self.job_key = job, layer, job_key or job
        self._lookup = lookup or pycue_lookup

    def describe(self) -> str:
        return f"Cuebot frame 0 of {self.job}/{self.layer}"

    def read(self) -> Publication | None:
        try:
            info = self._lookup(self.job, self.layer, 0)
        except Exception as exc:  # noqa: BLE001 - pycue raises CueException/RpcError; keep waiting
            log.debug("Cuebot lookup of frame 0 failed: %s", exc)
            return None
        host = info.last_resource.split("/", 1)[0]
        if info.state != "RUNNING" or not host:
            return None
        return Publication(host, cuebot_port(self.job_key, info.retry_count), f"retry-{info.retry_count}")

    def host(self, host: str | None, token: str | None, generation: int = 0,
             members: tuple[int, ...] = ()) -> tuple[PortReservation, Publication]:
        """Frame 0: look itself up in Cuebot and reserve the port of its retry count.

        Cuebot's frame state carries no generation: this mode always hosts every frame (``members``
        must be empty; elastic gangs need the file rendezvous), and a restart inside the frame (the
        node agent) keeps the retry count, so every generation of one retry uses the same port and
        attempt (:attr:`restarts_reuse_attempt`).

        Raises:
            RendezvousError: Cuebot cannot be asked (message says what to check).
            PortUnavailable: the port is taken (exit code 6; OpenCue's retry picks a new port).
        """
        try:
            info = self._lookup(self.job, self.layer, 0)
        except Exception as exc:  # noqa: BLE001
            raise RendezvousError(f"frame 0 cannot look itself up in Cuebot ({exc}); check CUEBOT_HOSTS on the "
                                  "render node or use --rendezvous file") from exc
        if members:
            raise RendezvousError("the cuebot rendezvous cannot publish gang members; elastic gangs "
                                  "(--min-world-size) need --rendezvous file")
        own = host or info.last_resource.split("/", 1)[0] or socket.gethostname()
        port = cuebot_port(self.job_key, info.retry_count)
        return PortReservation(port), Publication(own, port, f"retry-{info.retry_count}", "", time.time(),
                                                  os.getpid(), "", generation)

    def retract(self, pub: Publication) -> None:
        """Nothing to remove: Cuebot's frame state is the publication."""

"""How the frames of one training job find frame 0 (rank 0) before the trainer starts.

OpenCue starts the frames of a layer one by one, on hosts unknown at submit time, and retries
them one by one; so frame 0 announces its main address ``host:port`` and the other frames look
it up. The trainer then forms the gang itself (``trainer.gang.formation``: rank claims, job-token HMAC, gang
timeout); this module only gets every rank the right ``COPYCAT_MAIN_ADDR``/``COPYCAT_MAIN_PORT``.
The published value and its job-token proof are :mod:`cue_plugin.node.publication`.

The port. Frame 0 reserves it before publishing: a socket bound with ``SO_REUSEADDR`` but not
listening (:class:`PortReservation`), held until its trainer exits. Other programs cannot bind the
port meanwhile (neither an explicit bind nor an outgoing connection's ephemeral port), but the
trainer's ``TCPStore`` can, because it binds with ``SO_REUSEADDR`` too and Linux allows that while
nobody listens. This closes the usual "pick a free port, close it, hope" race; what is left is a
second ``SO_REUSEADDR`` program binding the same port in that window (unlikely; the trainer then
fails with "cannot listen" and the frame is retried).

The host frame 0 publishes (and gives its own trainer) is an IP, never its host name, which on
many farm hosts resolves to loopback (:func:`main_address`, ``trainer.core.netaddr``): the IP of the
interface that routes to Cuebot, else of the default route, else of the only interface;
``CUETRAIN_MAIN_HOST`` overrides.

Two modes (``TrainingJob.rendezvous``):

``file``
    Frame 0 deletes ``RUN_DIR/rendezvous/main.json`` first, reserves a free port (the OS picks),
    then writes ``{host, port, attempt, token, published_at, pid}`` atomically (mode 0640).
    ``attempt`` is ``host:pid:random`` and is new for every run of frame 0 (OpenCue gives frames
    no retry number in their environment); ``token`` is an HMAC of ``attempt:host:port`` under the
    job token, so it proves the publication comes from this job without revealing the token.
``cuebot``
    Nothing is written. Ranks ask Cuebot (pycue ``findFrame(job, "train", 0)``) for frame 0: it
    must be RUNNING; its host is the host part of ``last_resource`` (``host/cores/gpus``: RQD's IP by
    default, rqconstants ``RQD_USE_IP_AS_HOSTNAME``; else a name the farm's DNS must resolve) and the
    port is ``cue_plugin.node.rendezvous_cuebot.cuebot_port`` of (job id, frame 0's ``retry_count``):
    20000 + crc32 % 10000, below Linux's ephemeral range (32768-60999). Frame 0 reserves exactly that port; if it is
    taken, frame 0 fails (exit code 6) and OpenCue's retry moves it to a new port (the retry count
    changed). Render nodes need pycue and ``CUEBOT_HOSTS`` (the submitter passes it on). Keep
    ports 20000-29999 free of long-lived listeners on render nodes.

Stale publications. A publication left by an earlier run of frame 0 (a retry) or by another job
in the same run directory must not be used. A waiting rank hands a publication to its trainer
only when (1) its token proof matches this job's token and (2) the published port accepts a TCP
connection, i.e. rank 0's store is listening there now. A dead attempt's port refuses
connections, and frame 0's next attempt replaces the file (cuebot mode: a new retry count gives a
new port). A time rule ("newer than my own start") would be wrong: a rank that OpenCue starts
late must still join an early frame 0. A fresh publication also refuses connections for the few
seconds until rank 0's trainer listens; the waiting rank just keeps polling. Waiting ranks log
what they wait for every :data:`LOG_EVERY_S` seconds and give up after the rendezvous timeout
(:class:`RendezvousTimeout`, exit code 3).

Stale gangs. OpenCue retries frames one by one, so a retried rank can reach an old frame 0
that is still alive (its trainer needs ~10-15 s to notice a lost rank and exit 4). That gang has
its rank claimed already and refuses the newcomer (trainer exit code 5); the waiting rank then
marks that attempt stale (``stale`` in :func:`wait_for_main`) and waits for a different one.
:func:`superseded` tells a rank whose trainer is running that frame 0 has started again since
(a publication of another attempt): its trainer belongs to a gang that is gone.

Gang failure notice. When frame 0's trainer gives up on an incomplete gang, frame 0 replaces its
publication with a failure notice (:meth:`FileSource.fail`: the same fields plus ``failed``, the
reason, covered by the token proof), in both modes (``RUN_DIR/rendezvous/main.json``; the run
directory is shared in both). A waiting rank that reads a notice of this job stops with
:class:`GangFailed` (exit code 3) and logs the reason; frame 0 then fails the layer in Cuebot.

Shared storage. Waiting ranks re-open the file on every poll, which NFS's close-to-open
consistency makes current; but a client may cache "no such file" for up to its directory
attribute timeout (``acdirmax``, often 30-60 s), so a rank can see frame 0's publication that much
later. The ``cuebot`` mode has no such delay.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Callable, Protocol

from cue_plugin.node.publication import Publication, proof, signed_by
from trainer.core import netaddr
from trainer.core import ports
from trainer.record.rundir import RunDirError, atomic_write_json

log = logging.getLogger(__name__)

POLL_S = 1.0  # seconds between looks at the publication
LOG_EVERY_S = 10.0  # seconds between "waiting for frame 0" lines
CONNECT_TIMEOUT_S = 2.0  # seconds for the TCP probe of a published port


class RendezvousError(RuntimeError):
    """The rendezvous failed; ``exit_code`` is the frame's exit status."""

    exit_code = 3


class RendezvousTimeout(RendezvousError):
    """Frame 0 was not found within the rendezvous timeout (exit code 3)."""


class GangFailed(RendezvousError):
    """Frame 0 gave up on an incomplete gang and published a failure notice (exit code 3)."""


class GangFinished(RendezvousError):
    """The run succeeded while this frame waited to join (exit code 0: nothing is left to do)."""

    exit_code = 0


class PortUnavailable(RendezvousError, ports.PortUnavailable):
    """Frame 0 could not reserve its port (exit code 6); a retry of the frame picks another."""

    exit_code = 6


class PortReservation(ports.PortReservation):
    """:class:`trainer.core.ports.PortReservation` raising this module's :class:`PortUnavailable` (a
    :class:`RendezvousError`, exit code 6), so the frame handles it with every rendezvous failure."""

    error = PortUnavailable


def accepts_connections(host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S) -> bool:
    """True when a TCP connection to ``host:port`` succeeds within ``timeout_s`` seconds (then closed)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def main_address(override: str | None, cuebot_hosts: tuple[str, ...] | list[str] = ()) -> str:
    """The address frame 0 publishes: ``CUETRAIN_MAIN_HOST`` (``override``) when set, else an IP chosen
    from this host's interfaces (:func:`trainer.core.netaddr.choose_main`: route to Cuebot, default route,
    only interface), never the host name (it may resolve to loopback). Logs the choice and why.

    Raises:
        RendezvousError: no address can be chosen (exit code 3; the message says what to set).
    """
    if override:
        log.info("frame 0 publishes %s: CUETRAIN_MAIN_HOST is set", override)
        return override
    try:
        choice = netaddr.choose_main(netaddr.interfaces(), netaddr.kernel_route, tuple(cuebot_hosts))
    except netaddr.NetAddrError as exc:
        raise RendezvousError(str(exc)) from None
    log.info("frame 0 publishes %s (interface %s): %s", choice.address, choice.interface or "?", choice.reason)
    return choice.address


def new_attempt(host: str) -> str:
    """A fresh attempt id for one run of frame 0: ``host:pid:random``."""
    return f"{host}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Source(Protocol):
    """Where frame 0's publication is found (file or Cuebot)."""

    def describe(self) -> str:
        """Where we look, for log lines."""
        ...

    def read(self) -> Publication | None:
        """The current publication, or None when there is none (yet)."""
        ...


class FileSource:
    """``file`` mode: ``RUN_DIR/rendezvous/main.json`` (see module doc).

    Args:
        path: the publication file (``RunPaths.rendezvous``).
    """

    #: every hosting of frame 0 publishes a new attempt
    restarts_reuse_attempt = False

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def describe(self) -> str:
        return str(self.path)

    def read(self) -> Publication | None:
        try:
            with open(self.path, encoding="utf-8") as fh:
                return Publication.from_json(json.load(fh))
        except (OSError, ValueError):
            return None

    def host(self, host: str, token: str | None, generation: int = 0,
             members: tuple[int, ...] = ()) -> tuple[PortReservation, Publication]:
        """Frame 0: remove the old publication, reserve a free port, publish ``host`` (for gang
        ``generation`` of ``members``, see :class:`Publication`).

        Raises:
            PortUnavailable: no port could be reserved.
            RendezvousError: the publication cannot be written (message names the file).
        """
        self.clear()
        reservation = PortReservation(0)
        attempt = new_attempt(host)
        members = tuple(members)
        pub = Publication(host, reservation.port, attempt,
                          proof(token, host, reservation.port, attempt, "", generation, members),
                          time.time(), os.getpid(), "", generation, members)
        try:
            self.path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
            atomic_write_json(self.path, pub.to_json())
        except (OSError, RunDirError) as exc:
            reservation.close()
            raise RendezvousError(f"frame 0 cannot publish its address: {exc}") from exc
        return reservation, pub

    def clear(self) -> None:
        """Frame 0, before it publishes: remove what an earlier attempt or job left.

        Raises:
            RendezvousError: the file cannot be removed (message names it).
        """
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            raise RendezvousError(f"frame 0 cannot remove the old publication {self.path}: {exc.strerror}; "
                                  "check the run directory's permissions") from exc

    def retract(self, pub: Publication) -> None:
        """Remove the publication if it is still ``pub`` (frame 0, after its trainer exited)."""
        if self.read() == pub:
            self.path.unlink(missing_ok=True)

    def fail(self, pub: Publication, reason: str, token: str | None) -> Publication:
        """Frame 0: replace the publication with a failure notice of attempt ``pub.attempt`` (see module doc).

        Raises:
            RendezvousError: the notice cannot be written (message names the file).
        """
        failed = reason or "gang failed"
        notice = dataclasses.replace(pub, failed=failed, token=proof(token, pub.host, pub.port, pub.attempt, failed,
                                                                     pub.generation, pub.members),
                                     published_at=time.time(), pid=os.getpid())
        try:
            self.path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
            atomic_write_json(self.path, notice.to_json())
        except (OSError, RunDirError) as exc:
            raise RendezvousError(f"frame 0 cannot publish its failure notice: {exc}") from exc
        return notice


def notify_bad_setting(notice: FileSource, pub: Publication, message: str, token: str | None) -> None:
    """Frame 0, after its trainer refused its settings (exit code 2: a bad address, path or value that a
    retry cannot fix): publish a failure notice with the trainer's error ``message`` (from its failure
    record, :mod:`trainer.record.rankfailure`; "" when it wrote none), so the waiting ranks stop at once (exit
    code 3) instead of waiting out the rendezvous timeout. Never raises."""
    reason = f"frame 0's trainer refused its settings: {message or 'exit code 2'}"
    try:
        notice.fail(pub, reason, token)
    except RendezvousError as exc:
        log.error("%s; waiting ranks will wait out the rendezvous timeout", exc)
        return
    log.error("published a failure notice for attempt %s: %s", pub.attempt, reason)


def failure_notice(notice: FileSource | None, token: str | None) -> Publication | None:
    """The failure notice of this job in ``notice`` (see module doc), or None."""
    pub = notice.read() if notice is not None else None
    return pub if pub is not None and pub.failed and signed_by(pub, token) else None


def _reject_reason(pub: Publication | None, source: Source, token: str | None,
                   stale: frozenset[str] | set[str]) -> tuple[str, str] | None:
    """Why ``pub`` cannot be used now, as (kind, message); None when it is usable."""
    if pub is None:
        return "none", f"no publication from frame 0 in {source.describe()} yet"
    if isinstance(source, FileSource) and not signed_by(pub, token):
        return (f"token {pub.attempt}", f"publication of attempt {pub.attempt} does not carry this job's token (left "
                "by another job using the same run directory); waiting for this job's frame 0")
    if pub.attempt in stale:
        return (f"stale {pub.attempt}", f"frame 0 attempt {pub.attempt} at {pub.address} is stale (its gang refused "
                "this rank: the rank was claimed there already, by this frame's earlier run); waiting for frame 0's "
                "next attempt")
    if pub.failed:
        return f"failed {pub.attempt}", f"frame 0 attempt {pub.attempt} failed its gang: {pub.failed}"
    if not accepts_connections(pub.host, pub.port):
        age = f", published {time.time() - pub.published_at:.0f} s ago," if pub.published_at else ""
        return (f"closed {pub.attempt}", f"frame 0 attempt {pub.attempt} at {pub.address}{age} does not accept "
                f"connections yet (this host reaches {pub.host} {netaddr.describe_route(pub.host)}): rank 0 still "
                "starting, a stale publication of a dead attempt, or an address this host cannot reach")
    return None


def wait_for_main(source: Source, *, rank: int, token: str | None, timeout_s: float,
                  poll_s: float = POLL_S, stale: frozenset[str] | set[str] = frozenset(),
                  notice: FileSource | None = None,
                  vet: Callable[[Publication | None], tuple[str, str] | None] | None = None) -> Publication:
    """Wait until frame 0's publication is usable (see module doc) and return it.

    Publications of the attempts in ``stale`` are not used. ``notice`` is where frame 0 writes a
    failure notice (``RUN_DIR/rendezvous/main.json``; in file mode the source itself). ``vet`` (the
    node agent's) is asked first about every look: a returned ``(kind, message)`` means "not this
    one, keep waiting"; it may raise a :class:`RendezvousError` to stop waiting. Logs what it
    waits for when that changes and every :data:`LOG_EVERY_S` seconds.

    Raises:
        GangFailed: frame 0 published a failure notice of this job (exit code 3).
        RendezvousTimeout: nothing usable within ``timeout_s`` seconds (exit code 3); the message
            says what was last seen and what to check.
    """
    start = time.monotonic()
    last_kind, last_log = "", start
    if notice is None and isinstance(source, FileSource):
        notice = source
    while True:
        failed = failure_notice(notice, token)
        if failed is not None and failed.attempt not in stale:
            raise GangFailed(f"rank {rank} stops: frame 0 (attempt {failed.attempt}) failed the gang: {failed.failed}")
        pub = source.read()
        rejected = (vet(pub) if vet is not None else None) or _reject_reason(pub, source, token, stale)
        if rejected is None and pub is not None:
            log.info("rank %d: frame 0 (attempt %s) is at %s", rank, pub.attempt, pub.address)
            return pub
        kind, reason = rejected or ("", "")
        now = time.monotonic()
        if now - start >= timeout_s:
            raise RendezvousTimeout(
                f"rank {rank} gave up after {timeout_s:.0f} s (rendezvous timeout): {reason}. Check that frame 0 "
                "runs (its log: RUN_DIR/logs/rank_0.log), that the farm has hosts for all frames, and raise "
                "rendezvous_timeout_s if frames start far apart; if frame 0 runs but cannot be reached at its "
                "address, set CUETRAIN_MAIN_HOST on the layer to an IP of its host that the other hosts reach")
        if kind != last_kind or now - last_log >= LOG_EVERY_S:
            log.info("rank %d waiting for frame 0 (%.0f of %.0f s): %s", rank, now - start, timeout_s, reason)
            last_kind, last_log = kind, now
        time.sleep(min(poll_s, max(0.0, timeout_s - (now - start))))


def superseded(source: Source, current: Publication, token: str | None) -> Publication | None:
    """A publication of another attempt of frame 0 than ``current`` (frame 0 started again), or None.

    Read by a rank while its trainer runs: a newer attempt means the gang of ``current`` is gone.
    A retracted publication (frame 0 finished) is not a newer attempt.
    """
    pub = source.read()
    if pub is None or pub.attempt == current.attempt:
        return None
    if isinstance(source, FileSource) and not signed_by(pub, token):
        return None
    return pub

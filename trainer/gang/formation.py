"""Forming the gang before training, and the errors a gang fails with (``GangError`` and its kinds).

OpenCue has no gang scheduling: frames start when hosts free up and are retried one by one. So
before the process group exists, the ranks meet on rank 0's ``TCPStore`` (on
``COPYCAT_MAIN_ADDR:COPYCAT_MAIN_PORT``) and:

1. claim their rank (``store.add("claim/R", 1)`` must return 1): a second process with the same
   rank, e.g. a stray retry, is refused;
2. prove they belong to the job: rank 0 publishes a random nonce, each rank answers
   ``HMAC-SHA256(token, nonce:rank)`` and rank 0 checks every answer (RFC 2104). The token
   (``CUETRAIN_GANG_TOKEN``) is per job; without one the check is skipped;
3. wait for the whole gang up to the gang timeout, logging every 10 s which ranks are missing.

Then the process group is created and a first collective runs, each bounded by
:class:`PhaseGuard`: gloo and NCCL connect every pair of ranks there, and a rank that cannot reach
a peer (a peer offered a loopback or firewalled address) can leave the others blocked inside C++
far past any timeout. The guard writes the failing rank's reason under ``abort`` on the store, so
the other ranks stop within :data:`GUARD_POLL_S` with the same reason; a phase that is still
blocked at its deadline ends the process (``os._exit``, exit code 3) after one error line.

During training every rank beats on the store (``trainer.gang.heartbeat``), and when a collective fails the
heartbeats name the rank that died (``trainer.gang.heartbeat.explain_failure``).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import re
import secrets
import socket
import sys
import threading
import time
from datetime import timedelta
from typing import Callable, Iterator

import torch.distributed as dist

from trainer.core.envvars import DistEnv
from trainer.core.netaddr import is_loopback
from trainer.core.exitcodes import ExitCode
from trainer.record.runrecord import FailureKind

log = logging.getLogger(__name__)

LOG_EVERY_S = 10.0  # seconds between "waiting for ranks" lines
#: How long rank 0, the store's host, waits for every rank to read a rejecting verdict before it exits [s]: a rank
#: that reads it after the host is gone gets a connection error (exit 1) instead of the rejection (exit 5).
VERDICT_READ_S = 5.0
GUARD_POLL_S = 0.5  # seconds between a PhaseGuard's looks at the store's abort key
PROBE_FIRST_S, PROBE_MAX_S, PROBE_CONNECT_S = 0.01, 0.25, 2.0  # a client's looks for the store: first and longest
# pause between looks, longest look (a host that drops packets instead of refusing them) [s]
ABORT_GRACE_S = 5.0  # seconds rank 0 keeps its store up at most after an abort, until every other rank has read it
ABORT_SEEN_KEY = "abort_seen"  # counter: ranks that read the abort reason (or failed themselves) and now exit
ABORT_KEY = "abort"
FIX = ("set COPYCAT_LOCAL_ADDR on the failing ranks to the interface that reaches the other hosts (every rank logs "
       "its 'collective interface' and why), and allow TCP between the hosts")


class GangError(RuntimeError):
    """The gang could not form or lost a member. ``exit_code`` (trainer.core.exitcodes) tells the farm what happened;
    ``kind`` is recorded in run.json ``failure_kind`` (trainer.record.runrecord)."""

    exit_code = int(ExitCode.GANG)
    kind = FailureKind.NETWORK  # the base: process-group creation or the first collective failed


class PortInUse(GangError):
    """Rank 0 cannot listen on the main port (exit code 3)."""

    kind = FailureKind.PORT_IN_USE


class GangTimeout(GangError):
    """A rank could not reach the main address within the gang timeout (exit code 3)."""

    exit_code = int(ExitCode.GANG)
    kind = FailureKind.MAIN_UNREACHABLE


class GangIncomplete(GangTimeout):
    """Not every rank arrived within the gang timeout (exit code 3); frame 0 fails the whole layer on it."""

    kind = FailureKind.GANG_INCOMPLETE


class PhaseTimeout(GangTimeout):
    """Process-group creation or the first collective did not finish within --collective-timeout-s (exit code 3)."""

    kind = FailureKind.NETWORK


class RankLost(GangError):
    """A rank died or hung during training (exit code 4); the farm's retry restarts the gang."""

    exit_code = int(ExitCode.RANK_LOST)
    kind = FailureKind.RANK_LOST


class GangRejected(GangError):
    """This process may not join: its rank is taken or its job token is wrong (exit code 5)."""

    exit_code = int(ExitCode.REJECTED)
    kind = FailureKind.REJECTED


def _mac(token: str, nonce: str, rank: int) -> str:
    return hmac.new(token.encode(), f"{nonce}:{rank}".encode(), hashlib.sha256).hexdigest()


def connect(env: DistEnv, timeout_s: float, *, master: bool, where: str = "") -> dist.TCPStore:
    """Open the store on the main address (rank 0 hosts it when ``master``); ``where`` (host and
    interface of this rank) goes into error messages. A client first waits for the store to listen
    (:func:`await_listener`), so it connects at once when rank 0 comes up a moment after it.

    Raises:
        GangTimeout: the main address could not be reached within ``timeout_s`` seconds.
        GangError: rank 0 could not bind the port (in use).
    """
    try:
        if not master:
            await_listener(env.main_addr, env.main_port, time.monotonic() + timeout_s)
        return dist.TCPStore(env.main_addr, env.main_port, None, master, timedelta(seconds=timeout_s),
                             wait_for_workers=False)
    except Exception as exc:  # DistNetworkError / RuntimeError / TimeoutError from c10d
        if master:
            raise PortInUse(f"rank 0 cannot listen on COPYCAT_MAIN_PORT={env.main_port}: {exc}; the port is in use "
                            "or not allowed: choose another port (farm frames pick a free one)") from exc
        raise GangTimeout(f"rank {env.rank}{f' ({where})' if where else ''} could not reach the main address "
                          f"{env.main_addr}:{env.main_port} within {timeout_s:.0f} s ({str(exc).splitlines()[0][:200]}); "
                          "is frame/rank 0 running? If it is, its address is not reachable from here: set "
                          "CUETRAIN_MAIN_HOST (farm) or COPYCAT_MAIN_ADDR to an IP of rank 0's host that this host "
                          "reaches, and allow TCP to that port") from exc


def await_listener(addr: str, port: int, deadline: float) -> None:
    """Return once ``addr:port`` accepts a TCP connection (closed at once; the store drops it), looking every
    :data:`PROBE_FIRST_S` s at first, then less often. Why: c10d's client retries a refused connection only after
    ~0.35 s (torch 2.13: a store up 0.05 s after its client started was reached after 0.40 s), and a local gang's
    ranks start together. A name that does not resolve returns at once (the store's own error says so).

    Raises:
        TimeoutError: nothing listened by ``deadline`` (``time.monotonic()``); names the last connection error.
    """
    delay, last = PROBE_FIRST_S, "no attempt"
    while (left := deadline - time.monotonic()) > 0:
        try:
            with socket.create_connection((addr, port), timeout=min(PROBE_CONNECT_S, left)):
                return
        except socket.gaierror:
            return
        except OSError as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
        delay = min(2 * delay, PROBE_MAX_S)
    raise TimeoutError(f"nothing listened on {addr}:{port} ({last})")


def _wait_keys(store: dist.TCPStore, keys: list[str], deadline: float, what: str, where: str = "") -> None:
    while True:
        missing = [k for k in keys if not store.check([k])]
        if not missing:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise GangIncomplete(f"gang incomplete: {what} {', '.join(k.rsplit('/', 1)[-1] for k in missing)} did not "
                                 "join within the gang timeout; failing the whole gang instead of holding GPUs idle"
                                 f"{f' ({where}; a rank that cannot reach it says so in its log)' if where else ''}")
        log.info("waiting for %s %s (%.0f s of the gang timeout left)", what,
                 ", ".join(k.rsplit("/", 1)[-1] for k in missing), left)
        try:
            store.wait(missing, timedelta(seconds=min(LOG_EVERY_S, max(left, 0.1))))
        except Exception:  # c10d raises on wait timeout; loop to log and re-check
            pass


def form(env: DistEnv, store: dist.TCPStore, token: str | None, gang_timeout_s: float, where: str = "") -> None:
    """Claim the rank, check the job token and wait for the whole gang (see module doc); ``where`` (this
    rank's host and interface) goes into the gang-timeout message.

    Raises:
        GangRejected: rank already claimed, or a token mismatch (names the rank).
        GangIncomplete: not everybody arrived within ``gang_timeout_s`` seconds.
    """
    deadline = time.monotonic() + gang_timeout_s
    if store.add(f"claim/{env.rank}", 1) != 1:
        raise GangRejected(f"rank {env.rank} already joined the gang at {env.main_addr}:{env.main_port}; this process "
                           "is a duplicate (a stale retry?) and exits without joining")
    if env.rank == 0:
        store.set("nonce", secrets.token_hex(16))
    _wait_keys(store, ["nonce"], deadline, "rank")
    nonce = store.get("nonce").decode()
    store.set(f"mac/{env.rank}", _mac(token, nonce, env.rank) if token else "-")
    if env.rank == 0:
        ranks = [f"mac/{r}" for r in range(env.world_size)]
        _wait_keys(store, ranks, deadline, "ranks", f"main address {env.main_addr}:{env.main_port}, {where}")
        bad = [r for r in range(env.world_size)
               if token and not hmac.compare_digest(store.get(f"mac/{r}").decode(), _mac(token, nonce, r))]
        store.set("verdict", "ok" if not bad else f"rejected ranks {bad}")
    _wait_keys(store, ["verdict"], deadline, "rank")
    verdict = store.get("verdict").decode()
    if verdict != "ok":
        _all_read_verdict(store, env)
        raise GangRejected(f"job token check failed ({verdict}): a process from another job or attempt tried to join "
                           "the gang; nobody trains with it")
    log.info("gang of %d formed (rank %d)", env.world_size, env.rank)


def _all_read_verdict(store: dist.TCPStore, env: DistEnv) -> None:
    """Count this rank's reading of a rejecting verdict; rank 0 (the store's host) then waits up to
    :data:`VERDICT_READ_S` for every rank's, so none asks a store that is gone. Never raises: the rejection is what
    every rank reports."""
    with contextlib.suppress(Exception):  # c10d raises on a store that went away: the rejection still stands
        read = store.add("verdict_read", 1)
        until = time.monotonic() + VERDICT_READ_S
        while env.rank == 0 and read < env.world_size and time.monotonic() < until:
            time.sleep(0.05)
            read = store.add("verdict_read", 0)


#: Errors of the collective backend that are not about the network: NCCL's result codes for a misuse, an
#: argument or CUDA (``ncclResult_t`` in NCCL's nccl.h), and CUDA's own. Setting COPYCAT_LOCAL_ADDR cannot help.
NOT_NETWORK = re.compile(r"ncclInvalidUsage|ncclInvalidArgument|ncclUnhandledCudaError|CUDA error|CUDA out of memory")


class BackendError(GangError):
    """gloo/NCCL refused a phase for a reason that is not the network (:data:`NOT_NETWORK`; exit code 3)."""

    kind = FailureKind.ERROR


def connect_failure(rank: int, where: str, phase: str, exc: BaseException) -> GangError:
    """One clear error for a failed ``phase`` (gloo/NCCL could not connect), naming the peer address the
    backend reported (``remote=[IP]:PORT``) and the fix; a :class:`BackendError` without the network fix when
    the backend's text names a cause that is not the network (:data:`NOT_NETWORK`)."""
    text = " ".join(str(exc).split())
    if NOT_NETWORK.search(text):
        return BackendError(f"rank {rank} ({where}): {phase} failed: {type(exc).__name__}: {text[:300]} (the "
                            "collective backend's own error, not a network one: this rank's log has the whole text)")
    found = re.search(r"remote=\[([^\]]+)\]:(\d+)", text)
    if found and is_loopback(found[1]):
        why = (f"a peer offered the loopback address {found[1]}:{found[2]} for its collectives, which this host cannot "
               "reach (its collective interface is loopback: a host name mapped to 127.x in /etc/hosts, or "
               "COPYCAT_LOCAL_ADDR=lo)")
    elif found:
        why = f"cannot connect to a peer's collective address {found[1]}:{found[2]} (firewall or wrong interface)"
    else:
        why = f"{type(exc).__name__}: {text[:200]}"
    return GangError(f"rank {rank} ({where}): {phase} failed: {why}; {FIX}")


class PhaseGuard:
    """Bounds the phases that can block inside gloo/NCCL (see module doc) and stops every rank when one fails.

    Args:
        env: the distributed setting.
        where: host and interface of this rank, for messages.
        timeout_s: deadline of each phase [s] (``--collective-timeout-s``).
        on_abort: called with the error before a blocked phase ends the process (rank 0 records it in
            ``run.json``), or None.

    Raises:
        GangTimeout: the guard's own store connection cannot be opened within ``timeout_s``.
    """

    def __init__(self, env: DistEnv, where: str, timeout_s: float,
                 on_abort: Callable[[GangError], None] | None = None) -> None:
        self._env, self._where, self._timeout_s, self._on_abort = env, where, timeout_s, on_abort
        self._store = connect(env, timeout_s, master=False, where=where)  # own client: the main thread's may block

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Run the body as phase ``name``; a failure in it becomes :func:`connect_failure` (and tells the others).

        Raises:
            GangError: the body raised (exit code 3).
        """
        done = threading.Event()
        watcher = threading.Thread(target=self._watch, args=(name, done), name="gang-phase-guard", daemon=True)
        watcher.start()
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - gloo/NCCL raise RuntimeError/DistError subclasses
            done.set()
            watcher.join()
            err = connect_failure(self._env.rank, self._where, name, exc)
            self._tell_peers(str(err))
            raise err from None
        done.set()
        watcher.join()

    def close(self) -> None:
        """Nothing is watched any more (the store client is dropped)."""
        self._store = None

    def _tell_peers(self, reason: str) -> None:
        """Write the abort reason; rank 0 (it hosts the store) then keeps the store up until every other rank
        has read it or failed itself (``ABORT_SEEN_KEY``), at most :data:`ABORT_GRACE_S` seconds, so under load
        no rank reports a lost store in place of the reason (a fixed 2 s grace lost that race)."""
        with contextlib.suppress(Exception):  # the store may be gone already
            self._store.set(ABORT_KEY, reason)
        self._known()

    def _known(self) -> None:
        """This rank knows the gang aborts: a rank > 0 counts itself in ``ABORT_SEEN_KEY``; rank 0 (it hosts the
        store) waits until every other rank has, at most :data:`ABORT_GRACE_S` seconds, before it may exit."""
        if self._env.rank != 0:
            self._seen()
            return
        deadline = time.monotonic() + ABORT_GRACE_S
        while time.monotonic() < deadline:
            try:
                if self._store.add(ABORT_SEEN_KEY, 0) >= self._env.world_size - 1:
                    return
            except Exception:  # noqa: BLE001 - rank 0's own client lost the store: nobody can read it any more
                return
            time.sleep(0.05)

    def _seen(self) -> None:
        """Count this rank among those that know the gang aborts (rank 0 waits for them before it exits)."""
        with contextlib.suppress(Exception):
            self._store.add(ABORT_SEEN_KEY, 1)

    def _watch(self, name: str, done: threading.Event) -> None:
        deadline = time.monotonic() + self._timeout_s
        rank, env = self._env.rank, self._env
        while not done.wait(GUARD_POLL_S):
            try:
                if self._store.check([ABORT_KEY]):
                    reason = self._store.get(ABORT_KEY).decode()
                    self._known()
                    return self._abort(done, GangError(f"rank {rank} ({self._where}) stops during {name}: {reason}"))
            except Exception as exc:  # noqa: BLE001 - the store went away: rank 0 exited
                return self._abort(done, GangError(
                    f"rank {rank} ({self._where}) lost the gang's store at {env.main_addr}:{env.main_port} during "
                    f"{name} ({type(exc).__name__}): rank 0 exited; its log says why"))
            if time.monotonic() > deadline:
                err = PhaseTimeout(f"rank {rank} ({self._where}): {name} did not finish within {self._timeout_s:.0f} s "
                                  f"(--collective-timeout-s): a rank cannot connect to another; {FIX}")
                self._tell_peers(str(err))
                return self._abort(done, err)
        return None

    def _abort(self, done: threading.Event, err: GangError) -> None:
        """End the process: the main thread is blocked in C++ and cannot be interrupted."""
        if done.is_set():
            return
        log.error("%s", err)
        if self._on_abort is not None:
            with contextlib.suppress(Exception):
                self._on_abort(err)
        sys.stderr.write(f"cuetrain: error: {err}\n")
        sys.stderr.flush()
        logging.shutdown()
        os._exit(err.exit_code)

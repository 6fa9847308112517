"""Forming the gang before training, and explaining its failures afterwards.

OpenCue has no gang scheduling: frames start when hosts free up and are retried one by one. So
before the process group exists, the ranks meet on rank 0's ``TCPStore`` (on
``COPYCAT_MAIN_ADDR:COPYCAT_MAIN_PORT``) and:

1. claim their rank (``store.add("claim/R", 1)`` must return 1): a second process with the same
   rank, e.g. a stray retry, is refused;
2. prove they belong to the job: rank 0 publishes a random nonce, each rank answers
   ``HMAC-SHA256(token, nonce:rank)`` and rank 0 checks every answer (RFC 2104). The token
   (``CUETRAIN_GANG_TOKEN``) is per job; without one the check is skipped;
3. wait for the whole gang up to the gang timeout, logging every 10 s which ranks are missing.

During training every rank bumps a heartbeat counter on the store every ``HEARTBEAT_S`` seconds.
When a collective fails, :func:`explain_failure` watches the counters to name the rank that died.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from trainer.envvars import DistEnv
from trainer.exitcodes import ExitCode
from trainer.runrecord import FailureKind

log = logging.getLogger(__name__)

HEARTBEAT_S = 3.0  # seconds between heartbeat bumps
LOG_EVERY_S = 10.0  # seconds between "waiting for ranks" lines


class GangError(RuntimeError):
    """The gang could not form or lost a member. ``exit_code`` (trainer.exitcodes) tells the farm what happened;
    ``kind`` is recorded in run.json ``failure_kind`` (trainer.runrecord)."""

    exit_code = int(ExitCode.GANG)
    kind = FailureKind.PORT_IN_USE


class GangTimeout(GangError):
    """A rank could not reach the main address within the gang timeout (exit code 3)."""

    exit_code = int(ExitCode.GANG)
    kind = FailureKind.MAIN_UNREACHABLE


class GangIncomplete(GangTimeout):
    """Not every rank arrived within the gang timeout (exit code 3); frame 0 fails the whole layer on it."""

    kind = FailureKind.GANG_INCOMPLETE


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


def connect(env: DistEnv, timeout_s: float, *, master: bool) -> dist.TCPStore:
    """Open the store on the main address (rank 0 hosts it when ``master``).

    Raises:
        GangTimeout: the main address could not be reached within ``timeout_s`` seconds.
        GangError: rank 0 could not bind the port (in use).
    """
    try:
        return dist.TCPStore(env.main_addr, env.main_port, None, master, timedelta(seconds=timeout_s),
                             wait_for_workers=False)
    except Exception as exc:  # DistNetworkError / RuntimeError / TimeoutError from c10d
        if master:
            raise GangError(f"rank 0 cannot listen on COPYCAT_MAIN_PORT={env.main_port}: {exc}; the port is in use "
                            "or not allowed: choose another port (farm frames pick a free one)") from exc
        raise GangTimeout(f"rank {env.rank} could not reach the main address {env.main_addr}:{env.main_port} within "
                          f"{timeout_s:.0f} s ({exc}); is frame/rank 0 running and reachable?") from exc


def _wait_keys(store: dist.TCPStore, keys: list[str], deadline: float, what: str) -> None:
    while True:
        missing = [k for k in keys if not store.check([k])]
        if not missing:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise GangIncomplete(f"gang incomplete: {what} {', '.join(k.rsplit('/', 1)[-1] for k in missing)} did not "
                              "join within the gang timeout; failing the whole gang instead of holding GPUs idle")
        log.info("waiting for %s %s (%.0f s of the gang timeout left)", what,
                 ", ".join(k.rsplit("/", 1)[-1] for k in missing), left)
        try:
            store.wait(missing, timedelta(seconds=min(LOG_EVERY_S, max(left, 0.1))))
        except Exception:  # c10d raises on wait timeout; loop to log and re-check
            pass


def form(env: DistEnv, store: dist.TCPStore, token: str | None, gang_timeout_s: float) -> None:
    """Claim the rank, check the job token and wait for the whole gang (see module doc).

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
        _wait_keys(store, ranks, deadline, "ranks")
        bad = [r for r in range(env.world_size)
               if token and not hmac.compare_digest(store.get(f"mac/{r}").decode(), _mac(token, nonce, r))]
        store.set("verdict", "ok" if not bad else f"rejected ranks {bad}")
    _wait_keys(store, ["verdict"], deadline, "rank")
    verdict = store.get("verdict").decode()
    if verdict != "ok":
        raise GangRejected(f"job token check failed ({verdict}): a process from another job or attempt tried to join "
                           "the gang; nobody trains with it")
    log.info("gang of %d formed (rank %d)", env.world_size, env.rank)


class Heartbeat:
    """Bumps ``hb/RANK`` on the store every :data:`HEARTBEAT_S` seconds from a daemon thread.

    Uses its own store connection (client), so training threads never share a socket with it.
    """

    def __init__(self, env: DistEnv, timeout_s: float) -> None:
        self._env = env
        self._store = connect(env, timeout_s, master=False)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gang-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._store.add(f"hb/{self._env.rank}", 1)
            except Exception:  # the store went away (rank 0 died): the training thread will notice
                return
            self._stop.wait(HEARTBEAT_S)

    def stop(self) -> None:
        """Stop bumping (idempotent)."""
        self._stop.set()


def lost_ranks(env: DistEnv, timeout_s: float = 10.0) -> list[int]:
    """Ranks whose heartbeat stopped, watched for ~3 beats; ``[0]`` when rank 0's store is unreachable
    (its process is gone). Empty when every other rank is still beating."""
    try:
        store = connect(env, timeout_s, master=False)
        first = [store.add(f"hb/{r}", 0) for r in range(env.world_size)]
        time.sleep(3 * HEARTBEAT_S + 1)
        second = [store.add(f"hb/{r}", 0) for r in range(env.world_size)]
    except Exception:
        return [0]
    return [r for r in range(env.world_size) if r != env.rank and second[r] == first[r]]


def explain_failure(env: DistEnv, exc: BaseException) -> BaseException:
    """After a failed collective: a :class:`RankLost` naming the dead rank(s), or ``exc`` itself when
    every rank is still alive and ``exc`` is not a c10d error (an ordinary bug stays visible)."""
    lost = lost_ranks(env)
    if not lost and not isinstance(exc, dist.DistError):
        return exc
    names = ", ".join(str(r) for r in lost) or "unknown (heartbeats alive: a hung rank or a network failure)"
    return RankLost(f"rank {env.rank} lost rank {names} during training ({type(exc).__name__}: {str(exc)[:200]}); "
                    "exiting so the farm restarts the gang from the latest checkpoint")

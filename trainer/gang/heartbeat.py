"""Heartbeats during training, and naming the rank that died when a collective fails.

During training every rank bumps a counter ``hb/RANK`` on the gang's store (``trainer.gang.formation.connect``)
every :data:`HEARTBEAT_S` seconds (:class:`Heartbeat`). When a collective fails, :func:`explain_failure` reads the
counters to name the rank that died (a :class:`trainer.gang.formation.RankLost`), or leaves an ordinary bug as it is.
"""

from __future__ import annotations

import threading
import time

import torch.distributed as dist

from trainer.core.envvars import DistEnv
from trainer.gang.formation import RankLost, connect

HEARTBEAT_S = 3.0  # seconds between heartbeat bumps


class Heartbeat:
    """Bumps ``hb/RANK`` on the store every :data:`HEARTBEAT_S` seconds from a daemon thread, and reads
    every rank's counter at each beat, noting when each last moved (:meth:`stale`).

    Uses its own store connection (client), so training threads never share a socket with it.
    """

    def __init__(self, env: DistEnv, timeout_s: float) -> None:
        self._env = env
        self._store = connect(env, timeout_s, master=False)
        self._stop = threading.Event()
        self._seen: dict[int, tuple[int, float]] = {}  # rank -> (counter, monotonic time it last changed)
        self._broken = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="gang-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._store.add(f"hb/{self._env.rank}", 1)
                counts = [self._store.add(f"hb/{r}", 0) for r in range(self._env.world_size)]
            except Exception:  # the store went away (rank 0 died): the training thread will notice
                self._broken = True
                return
            now = time.monotonic()
            with self._lock:
                for r, count in enumerate(counts):
                    if self._seen.get(r, (None, 0.0))[0] != count:
                        self._seen[r] = (count, now)
            self._stop.wait(HEARTBEAT_S)

    def stale(self, min_age_s: float = 3 * HEARTBEAT_S) -> list[int]:
        """Other ranks whose counter has not moved for ``min_age_s`` seconds [s] (as of this rank's last
        beat), so a rank behind a dead link is named at once; empty while this rank's own beats fail."""
        now = time.monotonic()
        with self._lock:
            if self._broken:
                return []
            return sorted(r for r, (_, changed) in self._seen.items()
                          if r != self._env.rank and now - changed >= min_age_s)

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


def explain_failure(env: DistEnv, exc: BaseException, heartbeat: Heartbeat | None = None) -> BaseException:
    """After a failed collective: a :class:`RankLost` naming the dead rank(s), or ``exc`` itself when
    every rank is still alive and ``exc`` is not a c10d error (an ordinary bug stays visible).

    Ranks whose heartbeat had already stopped for 3 beats (``heartbeat.stale()``: a host whose link
    went down a collective timeout ago) are named at once; otherwise the counters are watched for
    ~3 beats (:func:`lost_ranks`: a rank killed just now)."""
    lost = heartbeat.stale() if heartbeat is not None else []
    lost = lost or lost_ranks(env)
    if not lost and not isinstance(exc, dist.DistError):
        return exc
    names = ", ".join(str(r) for r in lost) or "unknown (heartbeats alive: a hung rank or a network failure)"
    return RankLost(f"rank {env.rank} lost rank {names} during training ({type(exc).__name__}: {str(exc)[:200]}); "
                    "exiting so the farm restarts the gang from the latest checkpoint")

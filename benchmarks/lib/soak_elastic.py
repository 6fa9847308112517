"""The soak's ``elastic`` path: elastic 3-frame jobs on the farm, a frame's host lost and back (issue 48).

Each run is one job of :data:`soak_plan.ELASTIC_WORLD_SIZE` frames with ``min_world_size``
:data:`soak_plan.ELASTIC_MIN_WORLD_SIZE` and ``elastic_window_s`` :data:`soak_plan.ELASTIC_WINDOW_S`, on the farm
path's Cuebot double with one RQD per frame (the double books one frame per host). Its one fault, ``elastic``, is a
frame other than frame 0 losing its host:

1. the frame's RQD is locked (``RqdInterface.LockAll``: RQD refuses every frame, as a host taken away would), then
   its frame process alone is SIGKILLed (exit 137, which Cuebot always retries; a killed process group would spend
   the job's one retry, :func:`soak_plan.within_cuebot_retries`). Cuebot retries the frame at once, and RQD
   refuses it (the double leaves the host alone 1 s and tries again);
2. the gang fails, and frame 0's node agent, after waiting the elastic window for the lost frame, forms a generation
   of the 2 frames left (``run.json`` ``gang``: ``members [0, F]``). The soak unlocks the host as soon as it reads
   that generation: the shrink is settled, so the frame's return cannot race it;
3. the 2-rank gang trains (a new attempt with ``world_size`` 2: the time to training again). Cuebot starts the
   frame again on its host, frame 0's agent sees it back and the gang stops at its next checkpoint (exit 79) and
   grows to 3 ranks (another attempt, ``world_size`` 3: :func:`soak_plan.grow_limit_s` bounds it).

So an elastic fault adds 2 attempts and may cost one checkpoint interval (the shrink resumes the newest checkpoint;
the regroup stops at one and loses none). The soak checks both attempts' world sizes, both bounds and, after the
run, the held-out gain against a fault-free 3-frame run of the same config. Other kinds are not drawn here: in an
elastic job whether a lost frame shrinks the gang or restarts it at full size is a race between Cuebot's retry
(seconds) and the elastic window, so their attempts would not be fixed. Elastic runs train crops of
:data:`soak_plan.ELASTIC_CROP` px so that the shrunk gang's steps outlast the grow-back (``tests/cue_plugin/
test_elastic.py``'s module doc: a 2-rank gang of tiny crops finishes before a new frame process starts).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Callable

from lib.soak_farm import FarmDriver
from lib.soak_plan import ELASTIC_MIN_WORLD_SIZE, ELASTIC_WINDOW_S, Fault, FaultOutcome, grow_limit_s
from lib.soak_run import FaultInFlight
from lib.soak_watch import POLL_S

RQD_TIMEOUT_S = 10.0  # seconds a LockAll / UnlockAll call to an RQD may take [s]
DISPATCH_LOG = "tests.cuebot.dispatcher"  # the double's dispatcher logs every frame an RQD refuses


class LockedHostRefusals(logging.Filter):
    """Drops the double's warning that RQD ``host`` refused a frame while the soak holds that host locked (it does
    so every second by design; other refusals still show)."""

    def __init__(self, host: str) -> None:
        super().__init__()
        self.host = host

    def filter(self, record: logging.LogRecord) -> bool:
        """False for ``<host> refused ...``."""
        return not record.getMessage().startswith(f"{self.host} refused ")


def rqd_call(address: str, method: str) -> None:
    """Call ``RqdInterface.<method>`` (``LockAll`` or ``UnlockAll``, no arguments) of the RQD at ``address``.

    Raises:
        grpc.RpcError: the RQD did not answer within :data:`RQD_TIMEOUT_S`.
    """
    import grpc
    from opencue_proto import rqd_pb2, rqd_pb2_grpc

    request = getattr(rqd_pb2, f"RqdStatic{method}Request")()
    with grpc.insecure_channel(address) as channel:
        getattr(rqd_pb2_grpc.RqdInterfaceStub(channel), method)(request, timeout=RQD_TIMEOUT_S)


class ElasticFault(FaultInFlight):
    """An ``elastic`` fault in flight: the kill, the shrink (the RQD unlocked once the shrunk generation is formed),
    the grow-back. ``out.seconds`` is the kill to the shrunk gang's attempt (bound: ``out.limit_s``); the grow-back,
    from the unlock to the full gang's attempt, is bounded by :func:`soak_plan.grow_limit_s` and told in the note."""

    def run(self) -> FaultOutcome:
        """Inject, follow the shrink and the grow-back; always unlock the RQD."""
        generation0, n0, t0 = self.watcher.record.gang_record.generation, self.attempts0, time.monotonic()
        try:
            self.undo = self.driver.inject(self.fault)
        except Exception as exc:  # noqa: BLE001 - a fault the soak could not do fails its run, not the soak
            self.out.problem = f"elastic: could not inject it ({type(exc).__name__}: {exc})"
            return self.out
        try:
            self._follow(generation0, n0, t0)
        finally:
            self._undo()
        return self.out

    def _follow(self, generation0: int, n0: int, t0: float) -> None:
        unlocked: list[float] = []

        def shrunk() -> bool:  # unlock once frame 0 has formed the next generation (run.json gang)
            if not unlocked and self.watcher.record.gang_record.generation > generation0:
                self._undo()
                unlocked.append(time.monotonic())
            return self.watcher.attempts > n0

        if not self._wait(shrunk, t0, self.out.limit_s, "not training again"):
            return
        self.out.seconds = time.monotonic() - t0
        self._undo()
        unlocked = unlocked or [time.monotonic()]
        if (size := self._size(n0)) != ELASTIC_MIN_WORLD_SIZE:
            self.out.problem = f"elastic: the gang did not shrink (attempt {n0 + 1} has {size} ranks, not " \
                               f"{ELASTIC_MIN_WORLD_SIZE})"
            return
        limit = grow_limit_s(self.cfg.gang_timeout_s)
        if not self._wait(lambda: self.watcher.attempts > n0 + 1, unlocked[0], limit, "not grown back"):
            return
        grown = time.monotonic() - unlocked[0]
        if (size := self._size(n0 + 1)) != self.cfg.world_size:
            self.out.problem = f"elastic: the gang did not grow back (attempt {n0 + 2} has {size} ranks, not " \
                               f"{self.cfg.world_size})"
            return
        self.out.steps_lost = self._lost(n0 + 1) + self._lost(n0 + 2)
        starts = [self._start(n0 + 1), self._start(n0 + 2)]
        self.out.note = (f"frame {self.fault.target} lost at step {self.fault.step}: {ELASTIC_MIN_WORLD_SIZE} ranks "
                         f"from step {starts[0]} {self.out.seconds:.1f} s after the kill, {self.cfg.world_size} again "
                         f"from step {starts[1]} {grown:.1f} s after its host was back (of {self.cfg.steps} steps)")
        self.driver.notes.append(f"elastic: {self.out.note}")

    def _wait(self, done: Callable[[], bool], since: float, limit_s: float, what: str) -> bool:
        """Poll ``done`` until it is true (True); False with the problem set when the job ends first or ``limit_s``
        seconds pass after ``since`` (a hang)."""
        while not done():
            if (code := self.driver.exit_code()) is not None:
                self.out.problem = f"elastic: the job ended (exit {code}) with the gang {what}" + (
                    ": elastic runs need more steps after the fault (soak_plan.ELASTIC_MIN_STEPS)"
                    if code == 0 else "")
                return False
            if time.monotonic() - since > limit_s:
                self.out.hang, self.out.problem = True, f"elastic: {what} after {limit_s:.0f} s"
                return False
            time.sleep(POLL_S)
        return True

    def _size(self, index: int) -> int:
        """``world_size`` of run.json attempt ``index`` (0-based) [ranks]; 0 when it is not there."""
        attempts = self.watcher.record.attempts
        return int(attempts[index].get("world_size", 0)) if len(attempts) > index else 0


class ElasticFarmDriver(FarmDriver):
    """One elastic job under the soak (the :class:`soak_local.LocalDriver` interface; ``cfg.world_size`` frames,
    :meth:`soak_plan.RunConfig.for_path`)."""

    path = "elastic"
    fault_class = ElasticFault  # how soak_run follows this path's faults

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.locked: dict[str, logging.Filter] = {}  # RQD address this run locked and has not unlocked yet -> the
        # filter that hides its refusals meanwhile

    def job_options(self) -> dict[str, object]:
        """An elastic gang: it trains on with :data:`soak_plan.ELASTIC_MIN_WORLD_SIZE` ranks after the window."""
        return {"min_world_size": ELASTIC_MIN_WORLD_SIZE, "elastic_window_s": ELASTIC_WINDOW_S}

    def inject_more(self, fault: Fault) -> Callable[[], None] | None:
        """``elastic``: lock the RQD that runs frame ``fault.target``, then SIGKILL that frame process; returns what
        unlocks the RQD (module doc).

        Raises:
            ValueError: ``fault.kind`` is not ``elastic``, or frame 0 is the target (it hosts the gang).
            KeyError: Cuebot does not say where that frame runs, no RQD has that host name, or the frame process
                is not found.
        """
        if fault.kind != "elastic" or fault.target == 0:
            raise ValueError(f"fault {fault} is not an elastic fault of frame 1 or more")
        host = self.cue.describe(self.handle).frames[str(fault.target)]["host"]
        address = {r.hostname: r.address for r in self.farm.rqds}[host]
        frame = self.frames()[fault.target]
        quiet = LockedHostRefusals(host)
        logging.getLogger(DISPATCH_LOG).addFilter(quiet)
        self.locked[address] = quiet
        try:
            rqd_call(address, "LockAll")
            frame.kill()
        except Exception:
            with contextlib.suppress(Exception):
                self.unlock(address)
            raise
        return lambda: self.unlock(address)

    def unlock(self, address: str) -> None:
        """Unlock the RQD at ``address`` (once)."""
        if address in self.locked:
            quiet = self.locked.pop(address)
            try:
                rqd_call(address, "UnlockAll")
            finally:
                logging.getLogger(DISPATCH_LOG).removeFilter(quiet)

    def kill_all(self) -> None:
        """Every RQD this run locked unlocked again (the farm serves the next run), then the farm path's kill."""
        for address in list(self.locked):
            with contextlib.suppress(Exception):
                self.unlock(address)
        super().kill_all()

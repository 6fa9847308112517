"""One soak run: start it, inject its scheduled faults at their steps, wait for each recovery, let it finish.

Works with any driver that has the :class:`soak_local.LocalDriver` interface (``start``, ``exit_code``, ``ranks``,
``inject``, ``processes``, ``kill_all``, ``notes``, ``extra_attempts``). A driver whose faults recover by other
rules names its own :class:`FaultInFlight` subclass as ``fault_class`` (:class:`soak_elastic.ElasticFault`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from lib.soak_checks import expected_exit
from lib.soak_local import HOLD_S, Exited
from lib.soak_plan import KINDS, Fault, FaultOutcome, PlannedRun, RunConfig
from lib.soak_watch import POLL_S, Watcher

log = logging.getLogger("soak")

RUN_BASE_S = 120.0  # a run's hard wall limit: this [s] ...
RUN_PER_FAULT_S = 60.0  # ... plus this per fault [s]
MAX_RELAUNCHES = 3  # supervisor starts the soak makes per fault (an operator's retries)


@dataclass
class RunOutcome:
    """A finished soak run: its faults, whether it hung, what the driver noted."""

    planned: PlannedRun
    faults: list[FaultOutcome] = field(default_factory=list)
    hang: str = ""
    notes: list[str] = field(default_factory=list)


class FaultInFlight:
    """The soak's side of one fault in flight: undo timer, relaunches, outcome."""

    def __init__(self, driver, watcher: Watcher, fault: Fault, cfg: RunConfig) -> None:
        self.driver, self.watcher, self.fault, self.cfg = driver, watcher, fault, cfg
        self.kind = KINDS[fault.kind]
        self.out = FaultOutcome(fault, driver.path, limit_s=cfg.limit_s(fault.kind))
        self.attempts0 = watcher.attempts
        self.undo: Callable[[], None] | None = None
        self.relaunches = 0

    def run(self) -> FaultOutcome:
        """Inject the fault, undo it after its hold, start an ended supervisor again, until training is back."""
        t0 = time.monotonic()
        try:
            self.undo = self.driver.inject(self.fault)
        except Exception as exc:  # noqa: BLE001 - a fault the soak could not do fails its run, not the soak
            self.out.problem = f"{self.fault.kind}: could not inject it ({type(exc).__name__}: {exc})"
            return self.out
        applied, row0 = time.monotonic(), self.watcher.rows
        while not self._trained_again(row0):
            now = time.monotonic()
            if self.undo is not None and now - applied >= HOLD_S:
                self._undo()
                if self.kind.rows_after_undo:  # rows held while the disk was full land with the next one after it
                    row0 = self.watcher.rows
            if self._exited():
                break
            if now - t0 > self.out.limit_s:
                self.out.hang, self.out.problem = True, f"{self.fault.kind}: not training again after {now - t0:.0f} s"
                break
            time.sleep(POLL_S)
        resolved = time.monotonic()
        self._undo()
        if not self.out.hang and not self.out.problem and (self.kind.attempts or self.watcher.rows > row0):
            self.out.seconds = resolved - (t0 if self.kind.attempts else applied)
            self.out.steps_lost = self._steps_lost()
        return self.out

    def _trained_again(self, row0: int) -> bool:
        if self.kind.attempts:
            return self.watcher.attempts > self.attempts0
        if self.kind.rows_after_undo and self.undo is not None:  # the fault lasts its whole hold
            return False
        return self.watcher.rows > row0

    def _undo(self) -> None:
        if self.undo is not None:
            undo, self.undo = self.undo, None
            undo()

    def _exited(self) -> bool:
        """The supervisor exited: judge it and start it again (True: give up on this fault)."""
        code = self.driver.exit_code()
        if code is None:
            return False
        self._undo()
        self.watcher.look()
        record = self.watcher.record
        exited = Exited(code, record.state, record.failure_kind, record.error)
        if code == 0:  # training went on to the end: fine for a fault that needs no new attempt
            if self.kind.attempts:
                self.out.problem = f"{self.fault.kind}: the run ended ({exited.words()}) without training again"
            return True
        if not expected_exit(self.fault.kind, code, record.state):
            self.out.problem = f"{self.fault.kind}: unexpected supervisor exit ({exited.words()})"
        self.out.note = exited.words()
        self.relaunches += 1
        if not self.driver.can_restart:  # the farm restarts its own jobs: a finished job is over
            self.out.problem = self.out.problem or f"{self.fault.kind}: the job finished ({exited.words()})"
            return True
        if self.relaunches > MAX_RELAUNCHES:
            self.out.problem = self.out.problem or f"{self.fault.kind}: still failing after {MAX_RELAUNCHES} starts"
            return True
        self.driver.start(resume=True)
        return False

    def _steps_lost(self) -> int:
        return self._lost(self.attempts0 + 1) if self.kind.attempts else 0

    def _start(self, n: int) -> int:
        """``start_step`` of run.json attempt ``n`` (1-based) [steps]; 0 when it is not there."""
        attempts = self.watcher.record.attempts
        return int(attempts[n - 1].get("start_step", 0)) if len(attempts) >= n else 0

    def _lost(self, n: int) -> int:
        """Steps attempt ``n`` (1-based) started behind the step reached before it was recorded [steps]."""
        return max(0, self.watcher.reached_before(n) - self._start(n))


def soak_run(driver, planned: PlannedRun, cfg: RunConfig, watcher: Watcher) -> RunOutcome:
    """Run ``planned`` through ``driver`` (not yet started) to its end; every fault waits for training to reach
    its step on a gang that has written a row since the previous recovery."""
    outcome = RunOutcome(planned)
    wall_s = RUN_BASE_S + RUN_PER_FAULT_S * len(planned.faults)
    deadline = time.monotonic() + wall_s
    driver.start()
    for fault in planned.faults:
        rows = watcher.rows
        reached = watcher.wait(lambda: watcher.rows > rows and watcher.current >= fault.step
                               and len(driver.ranks()) == cfg.world_size or driver.exit_code() is not None,
                               deadline - time.monotonic())
        if not reached or driver.exit_code() is not None:
            outcome.hang = "" if reached else f"never reached step {fault.step}"
            outcome.notes.append(f"run ended (exit {driver.exit_code()}) before the fault at step {fault.step}")
            break
        result = getattr(driver, "fault_class", FaultInFlight)(driver, watcher, fault, cfg).run()
        outcome.faults.append(result)
        log.info("%s %s at step %d: %s s, lost %d%s", driver.path, fault.kind, fault.step,
                 "-" if result.seconds is None else f"{result.seconds:.1f}", result.steps_lost,
                 f" ({result.problem or result.note})" if result.problem or result.note else "")
        if result.hang or result.problem.startswith(f"{fault.kind}: the run ended"):
            break
    if not watcher.wait(lambda: driver.exit_code() is not None, max(1.0, deadline - time.monotonic())):
        outcome.hang = outcome.hang or f"still running after the run's wall limit ({wall_s:.0f} s)"
    if any(f.hang for f in outcome.faults) and not outcome.hang:
        outcome.hang = "a fault did not resolve within its limit"
    if outcome.hang:
        driver.kill_all()
    elif driver.exit_code() not in (0, None):
        outcome.notes.append(f"PROBLEM: the supervisor ended with exit {driver.exit_code()} after the last fault")
    outcome.notes.extend(driver.notes)
    return outcome

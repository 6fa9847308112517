"""What the soak sees of a run while it trains: a thread that follows ``metrics.jsonl`` and ``run.json``.

Steps lost are counted as the recovery tests count them (tests/cue_plugin/test_e2e_recovery.py): the step the run
had reached at the fault minus the step the next attempt started from. The step reached is the highest step seen
in ``metrics.jsonl`` or among the checkpoints before the next attempt appeared in ``run.json``: the thread reads
both every :data:`POLL_S`, so a row the faulted gang wrote just before it died is seen long before a new gang (seconds
of process start) records its attempt.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass

from trainer.record.rundir import MetricsReader, RunDirError, RunPaths
from trainer.record.runrecord import RunRecord, read_record_or_empty

POLL_S = 0.05  # seconds between looks at the run directory


@dataclass(frozen=True)
class Seen:
    """One look: ``attempts`` recorded in run.json [count], the highest ``step`` reached before them [steps]."""

    attempts: int
    step: int
    at: float  # time.monotonic() [s]


class Watcher:
    """Follows one run directory from a daemon thread until :meth:`close`.

    Attributes:
        step: the highest step seen so far (metrics rows and checkpoints) [steps].
        current: the step of the newest metrics row (after a resume: the new attempt's) [steps].
        rows: metrics rows seen so far [count].
        attempts: training attempts recorded in run.json [count].
        record: the latest run.json read (an empty record while there is none).
    """

    def __init__(self, paths: RunPaths) -> None:
        self.paths = paths
        self.step = 0
        self.current = 0
        self.rows = 0
        self.attempts = 0
        self.record = RunRecord()
        self._reached_before: dict[int, int] = {}  # attempt n -> highest step seen before it was recorded
        self._metrics = MetricsReader(paths.metrics)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.look()
            self._stop.wait(POLL_S)

    def look(self) -> None:
        """Read the run directory once (the thread does this every :data:`POLL_S`)."""
        with contextlib.suppress(OSError, RunDirError, ValueError):
            rows = self._metrics.read_new()
            checkpoints = self.paths.list_checkpoints()
            record = read_record_or_empty(self.paths)
            with self._lock:
                for n in range(self.attempts + 1, len(record.attempts) + 1):
                    self._reached_before[n] = self.step  # rows of the faulted gang were seen looks ago
                self.attempts = max(self.attempts, len(record.attempts))
                self.rows += len(rows)
                if rows:
                    self.current = int(rows[-1].get("step", 0))
                self.step = max([self.step, *(int(r.get("step", 0)) for r in rows), *(c[0] for c in checkpoints[-1:])])
                self.record = record

    def reached_before(self, attempt: int) -> int:
        """The highest step seen before attempt ``attempt`` (1-based) was recorded [steps] (0 when unknown)."""
        with self._lock:
            return self._reached_before.get(attempt, 0)

    def wait(self, until, timeout_s: float) -> bool:
        """Poll ``until()`` every :data:`POLL_S` for at most ``timeout_s`` seconds; returns whether it came true."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if until():
                return True
            time.sleep(POLL_S)
        return bool(until())

    def close(self) -> None:
        """Stop the thread (after one last look)."""
        self._stop.set()
        self._thread.join(timeout=5)
        self.look()

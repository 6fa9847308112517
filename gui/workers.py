"""Background work for the controller: the thread-pool task, the signals it emits, and the poll.

:func:`poll_runs` runs on a worker thread: it reads run directories and asks the farm, and returns
plain values (:class:`PollUpdate`) that the controller applies on the GUI thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Sequence

from qtpy.QtCore import QObject, QRunnable, Signal

from cue_plugin.submit.spec import FarmError, JobHandle, JobStatus
from gui.localranks import count_local_ranks
from gui.poller import PollResult, RunPoller
from gui.records import ran_here
from trainer.core.config import ConfigError
from trainer.record.rundir import RunDirError

log = logging.getLogger(__name__)

#: Errors whose message is written for the artist; anything else is logged with its traceback.
EXPECTED_ERRORS = (FarmError, ConfigError, RunDirError, ValueError, OSError)

#: One run to poll: run directory, its poller, and the farm job to describe (``None``: don't ask).
PollJob = tuple[str, RunPoller, "JobHandle | None"]


def error_text(exc: BaseException) -> str:
    """A message for the artist: expected errors as written, others with their type (and logged)."""
    if isinstance(exc, EXPECTED_ERRORS):
        return str(exc)
    log.error("unexpected error", exc_info=exc)
    return f"unexpected {type(exc).__name__}: {exc} (details in the log)"


@dataclass
class PollUpdate:
    """One run's poll result plus the farm's answer, made on the worker, applied on the GUI thread."""

    run_dir: str
    poller: RunPoller
    result: PollResult
    asked_farm: bool = False
    status: JobStatus | None = None
    farm_error: str = ""
    local_ranks: int | None = None  # rank processes alive on this machine (runs without a farm job to ask)


@dataclass
class Outcome:
    """Result of a background farm action (cancel, retry, resume)."""

    run_dir: str
    message: str
    ok: bool = True
    handle: JobHandle | None = None


def poll_runs(jobs: Sequence[PollJob], describe: Callable[[JobHandle], JobStatus] | None,
              count_local: bool = False) -> list[PollUpdate]:
    """Poll every run directory and, with ``describe``, the farm job of each live run.

    A failure in one run (unreadable folder, farm unreachable) is recorded in its update; the other
    runs are still polled. With ``count_local`` (a local run of this machine is running, as known on the
    GUI thread) or a freshly read ``run.json`` saying so, runs with no farm job to ask get their live
    local rank count (:func:`gui.localranks.count_local_ranks`: one scan
    of /proc per poll, ~1-20 ms).
    """
    updates = []
    for run_dir, poller, handle in jobs:
        try:
            update = PollUpdate(run_dir, poller, poller.poll())
        except Exception as exc:  # noqa: BLE001 - one broken run must not stop the others
            update = PollUpdate(run_dir, poller, PollResult(run_dir, error=error_text(exc)))
        if describe is not None and handle is not None:
            update.asked_farm = True
            try:
                update.status = describe(handle)
            except Exception as exc:  # noqa: BLE001 - shown in the run's row
                update.farm_error = error_text(exc)
        updates.append(update)
    fresh = [u for u, (_, _, handle) in zip(updates, jobs) if handle is None and u.result.record is not None]
    if count_local or any(ran_here(u.result.record) and u.result.record.state == "running" for u in fresh):
        local = count_local_ranks()
        for update, (_, _, handle) in zip(updates, jobs):
            if handle is None and local is not None:
                update.local_ranks = local.get(update.run_dir, 0)
    return updates


class WorkerSignals(QObject):
    """Signals emitted on worker threads; the controller connects them queued."""

    polled = Signal(object)  # None: results wait in the controller's queue
    submitted = Signal(object, object)  # TrainingJob, JobHandle
    submit_errored = Signal(str)
    submit_progressed = Signal(str)
    acted = Signal(object)  # Outcome


class Task(QRunnable):
    """Run one callable on a thread pool (works with PySide2 and PySide6)."""

    def __init__(self, fn: Callable[[], None]) -> None:
        super().__init__()
        self._fn = fn
        self.setAutoDelete(True)

    def run(self) -> None:  # noqa: D102 - QRunnable API
        try:
            self._fn()
        except Exception:  # noqa: BLE001 - a worker must never take the host down
            log.exception("background task failed")

"""The runs controller: every run the GUI follows, polling, submit, cancel and retry. No widgets.

In the pyblish-lite manner the views only connect to the signals (named in the past tense) and read
:class:`gui.records.Run` records. File reads and farm calls run on a worker thread
(:class:`QThreadPool`); their results are queued, announced by a queued signal and applied on the GUI
thread, so a slow network file system or farm never freezes the host application. What runs there is plain
functions: the poll (``gui.workers``) and the farm actions (``gui.farm_actions``); the runs list persists through
``gui.persistence``.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable

from qtpy.QtCore import QObject, QSettings, Qt, QThreadPool, QTimer, Signal

from cue_plugin.submit.spec import Farm, FarmError, JobHandle, JobStatus, TrainingJob
from gui.farm_actions import cancel_job, infer_job, make_farm, retry_job, submit_job
from gui.persistence import load_records, save_runs, saved_run
from gui.poller import RunPoller
from gui.records import TERMINAL_STATES, Run, job_fields, retry_plan
from gui.workers import Outcome, PollJob, PollUpdate, Task, WorkerSignals, error_text, poll_runs
from trainer.core.config import ConfigError

log = logging.getLogger(__name__)

FarmFactory = Callable[[], Farm]
#: Default Live Updates period [ms]: polling is network traffic, so not too often.
POLL_INTERVAL_MS = 5000


def default_farm() -> Farm:
    """The production backend: OpenCue through ``cuetrain --json`` subprocesses (:class:`gui.farm_process.ProcessFarm`);
    the GUI process never imports pycue or grpc."""
    from gui.farm_process import ProcessFarm

    return ProcessFarm()


class RunsController(QObject):
    """Holds the runs, polls them and talks to the farm; emits what changed.

    Args:
        farm_factory: makes the farm backend on first use (default :func:`default_farm`); it is called
            on a worker thread, never in this constructor.
        settings: where the runs list persists (``gui.persistence``); ``None`` keeps it in memory only.
        poll_interval_ms: Live Updates period [ms].
        parent: Qt parent.
    """

    run_added = Signal(str)
    run_removed = Signal(str)
    run_updated = Signal(str)
    metrics_updated = Signal(str)
    contact_sheets_updated = Signal(str)
    previews_updated = Signal(str)  # new previews/step_NNNNNN.png renders of a run
    submit_progressed = Signal(str)  # a step of a submit in flight, for the dialog
    submit_finished = Signal(object)  # JobHandle
    submit_failed = Signal(str)
    action_finished = Signal(str, str)  # run_dir, message
    action_failed = Signal(str, str)  # run_dir, message
    live_updates_changed = Signal(bool)
    poll_finished = Signal()

    def __init__(self, farm_factory: FarmFactory | None = None, settings: QSettings | None = None,
                 poll_interval_ms: int = POLL_INTERVAL_MS, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._farm_factory = farm_factory or default_farm
        self._farm: Farm | None = None
        self._farm_lock = threading.Lock()
        self._settings = settings
        self._runs: dict[str, Run] = {}
        self._pollers: dict[str, RunPoller] = {}
        self._poll_lock = threading.Lock()  # one poll at a time touches the pollers
        self._poll_in_flight = False
        self._pending: list[list[PollUpdate]] = []  # poll results not applied yet, oldest first
        self._pending_lock = threading.Lock()  # short: the GUI thread never waits for a poll
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(2)
        self._signals = WorkerSignals(self)
        queued = Qt.ConnectionType.QueuedConnection
        self._signals.polled.connect(self._on_polled, queued)
        self._signals.submitted.connect(self._on_submitted, queued)
        self._signals.submit_errored.connect(self.submit_failed, queued)
        self._signals.submit_progressed.connect(self.submit_progressed, queued)
        self._signals.acted.connect(self._on_acted, queued)
        self._timer = QTimer(self)
        self._timer.setInterval(poll_interval_ms)
        self._timer.timeout.connect(self.poll_async)

    # ----------------------------------------------------------------- runs
    def runs(self) -> list[Run]:
        """Every run, in the order added."""
        return list(self._runs.values())

    def run(self, run_dir: str) -> Run | None:
        """The run of ``run_dir`` (any spelling of the path), or ``None``."""
        return self._runs.get(_key(run_dir))

    def add_run(self, run_dir: str, handle: JobHandle | None = None, job: dict[str, Any] | None = None) -> Run:
        """Follow ``run_dir``; a run already followed only takes the new ``handle`` and ``job``."""
        key = _key(run_dir)
        run = self._runs.get(key)
        is_new = run is None
        if run is None:
            run = self._runs[key] = Run(key)
            self._pollers[key] = RunPoller(key)
            log.info("following run %s", key)
        run.handle = handle or run.handle
        run.job = job or run.job
        self.save()
        if is_new:
            self.run_added.emit(key)
        elif handle or job:
            self.run_updated.emit(key)
        return run

    def remove_run(self, run_dir: str) -> None:
        """Stop following ``run_dir`` (its files are untouched)."""
        key = _key(run_dir)
        if self._runs.pop(key, None) is not None:
            self._pollers.pop(key, None)
            self.save()
            self.run_removed.emit(key)

    def set_show_graph(self, run_dir: str, shown: bool) -> None:
        """Plot ``run_dir`` in the Graph area or not."""
        self._set_flag(run_dir, "show_graph", shown)

    def set_show_sheet(self, run_dir: str, shown: bool) -> None:
        """List ``run_dir`` in the Contact Sheet dropdown or not."""
        self._set_flag(run_dir, "show_sheet", shown)

    def _set_flag(self, run_dir: str, name: str, value: bool) -> None:
        run = self.run(run_dir)
        if run is not None and getattr(run, name) != bool(value):
            setattr(run, name, bool(value))
            self.save()
            self.run_updated.emit(run.run_dir)

    # -------------------------------------------------------------- polling
    @property
    def live_updates(self) -> bool:
        """True while the Live Updates timer runs."""
        return self._timer.isActive()

    def set_live_updates(self, on: bool) -> None:
        """Start (polling at once) or stop polling every ``poll_interval_ms``."""
        if bool(on) == self.live_updates:
            return
        if on:
            self._timer.start()
            self.poll_async()
        else:
            self._timer.stop()
        log.info("live updates %s", "on" if on else "off")
        self.live_updates_changed.emit(bool(on))

    @property
    def polling(self) -> bool:
        """True while a background poll runs."""
        return self._poll_in_flight

    def poll_async(self) -> bool:
        """Poll every run and the farm on a worker thread; False when a poll is still running."""
        if self._poll_in_flight:
            return False
        self._poll_in_flight = True
        jobs, count_local = self._poll_jobs(), self._local_run_live()

        def work() -> None:
            try:
                self._poll_work(jobs, True, count_local)
            finally:
                self._signals.polled.emit(None)

        self._pool.start(Task(work))
        return True

    def poll_now(self, include_farm: bool = True) -> None:
        """Poll on the calling thread and apply at once (tests, screenshots, scripts)."""
        self._poll_work(self._poll_jobs(), include_farm, self._local_run_live())
        self._apply_pending()

    def _local_run_live(self) -> bool:
        """True when a run without a farm job ran on this machine and has not ended (its ranks are counted)."""
        return any(run.handle is None and run.ran_here and run.state not in TERMINAL_STATES
                   for run in self._runs.values())

    def _poll_jobs(self) -> list[PollJob]:
        """What the next poll covers, taken on the GUI thread: run, poller, handle to describe."""
        out = []
        for key, run in self._runs.items():
            ask = run.handle is not None and not (run.status is not None and run.status.state.is_terminal())
            out.append((key, self._pollers[key], run.handle if ask else None))
        return out

    def _poll_work(self, jobs: list[PollJob], include_farm: bool, count_local: bool = False) -> None:
        """Read every run directory and describe live jobs; queue the results in poll order."""
        with self._poll_lock:
            updates = poll_runs(jobs, self._describe if include_farm else None, count_local)
            with self._pending_lock:  # appended inside the poll lock: queue order = poll order
                self._pending.append(updates)

    def _describe(self, handle: JobHandle) -> JobStatus:
        return self.farm().describe(handle)

    def _on_polled(self, _: object = None) -> None:
        self._poll_in_flight = False
        self._apply_pending()

    def _apply_pending(self) -> None:
        """Apply queued poll results on the GUI thread, oldest first, and emit what changed."""
        with self._pending_lock:
            batches, self._pending = self._pending, []
        for updates in batches:
            for update in updates:
                run = self._runs.get(update.run_dir)
                if run is not None and self._pollers.get(update.run_dir) is update.poller:
                    self._apply_one(run, update)
        if batches:
            self.poll_finished.emit()

    def _apply_one(self, run: Run, update: PollUpdate) -> None:
        res, changed = update.result, False
        if res.record is not None:
            if run.adopt_record(res.record):
                self.save()  # a new farm job (submitted or resumed elsewhere) is remembered
            changed = True
        if res.error != run.read_error:
            run.read_error, changed = res.error, True
        if res.reset:
            run.metrics.clear()
        if res.new_rows or res.reset:
            run.metrics.extend(res.metrics)
            changed = True
            self.metrics_updated.emit(run.run_dir)
        if res.new_sheets:
            run.sheets = sorted(run.sheets + res.new_sheets)
            self.contact_sheets_updated.emit(run.run_dir)
        if res.new_previews:
            run.previews = sorted(run.previews + res.new_previews)
            self.previews_updated.emit(run.run_dir)
        if update.local_ranks != run.local_ranks:
            run.local_ranks, changed = update.local_ranks, True
        if update.asked_farm and (update.status, update.farm_error) != (run.status, run.farm_error):
            run.status = update.status or run.status
            run.farm_error, changed = update.farm_error, True
        if changed:
            self.run_updated.emit(run.run_dir)

    # ----------------------------------------------------------------- farm
    def farm(self) -> Farm:
        """The farm backend, made on first use (thread-safe).

        Raises:
            FarmError: the backend cannot be made (e.g. OpenCue is not installed).
        """
        with self._farm_lock:
            if self._farm is None:
                self._farm = make_farm(self._farm_factory)
            return self._farm

    def submit(self, job: TrainingJob) -> None:
        """Submit ``job`` on a worker; ends in :attr:`submit_finished` or :attr:`submit_failed`."""
        def work() -> None:
            try:
                handle = submit_job(self.farm(), job, self._signals.submit_progressed.emit)
            except Exception as exc:  # noqa: BLE001 - reported in the dialog
                self._signals.submit_errored.emit(error_text(exc))
                return
            self._signals.submitted.emit(job, handle)

        log.info("submitting %s (%d ranks)", job.train.run_dir, job.world_size)
        self._pool.start(Task(work))

    def _on_submitted(self, job: TrainingJob, handle: JobHandle) -> None:
        log.info("submitted %s as job %s", job.train.run_dir, handle.job_name or handle.job_id)
        self.add_run(job.train.run_dir, handle, job_fields(job))
        self.submit_finished.emit(handle)

    def cancel(self, run_dir: str) -> None:
        """Kill the run's farm job on a worker (idempotent); ends in an ``action_*`` signal."""
        run = self.run(run_dir)
        if run is None or run.handle is None:
            self.action_failed.emit(_key(run_dir), "this run has no farm job to cancel")
            return
        handle = run.handle
        self._start_action(run.run_dir, lambda: cancel_job(self.farm(), run.run_dir, handle))

    def retry(self, run_dir: str) -> None:
        """Retry a live job's failed frames (``farm.retry``), or resubmit a finished run with resume."""
        run = self.run(run_dir)
        if run is None:
            return
        try:
            mode, job = retry_plan(run)
        except (ValueError, ConfigError, FarmError) as exc:
            self.action_failed.emit(run.run_dir, str(exc))
            return
        handle = run.handle
        self._start_action(run.run_dir, lambda: retry_job(self.farm(), run.run_dir, mode, handle, job))

    def submit_infer(self, run_dir: str, input_dir: str, output_dir: str, template: str = "",
                     chunk: int | None = None) -> None:
        """Apply the run's ``model.pt`` to a shot on the farm (``farm.submit_infer``, a separate job); ends in
        an ``action_*`` signal. Show and shot are the run's submitted job's; the run keeps its own job handle.
        ``chunk``: input frames per farm frame (None: the farm's default)."""
        run = self.run(run_dir)
        if run is None:
            return
        recorded = run.job_record()
        show, shot = str(recorded.get("show") or ""), str(recorded.get("shot") or "")
        if not show or not shot:
            self.action_failed.emit(run.run_dir, "no submitted job is recorded for this run, so its show and "
                                    "shot are unknown; run cuetrain submit-infer --show S --shot S by hand")
            return
        self._start_action(run.run_dir, lambda: infer_job(self.farm(), run.run_dir, input_dir, output_dir, show, shot,
                                                          template, chunk))

    def _start_action(self, run_dir: str, work: Callable[[], Outcome]) -> None:
        def task() -> None:
            try:
                outcome = work()
            except Exception as exc:  # noqa: BLE001 - reported in the panel
                outcome = Outcome(run_dir, error_text(exc), ok=False)
            self._signals.acted.emit(outcome)

        self._pool.start(Task(task))

    def _on_acted(self, outcome: Outcome) -> None:
        run = self.run(outcome.run_dir)
        if outcome.ok and outcome.handle is not None and run is not None:
            run.handle, run.status = outcome.handle, None
            self.save()
            self.run_updated.emit(run.run_dir)
        (self.action_finished if outcome.ok else self.action_failed).emit(outcome.run_dir, outcome.message)

    # ---------------------------------------------------------- persistence (gui.persistence)
    def save(self) -> None:
        """Write the runs list to the settings (no-op without settings)."""
        if self._settings is not None:
            save_runs(self._settings, self._runs.values())

    def restore(self) -> None:
        """Add the runs saved by a previous session (unreadable records are skipped and logged)."""
        records = None if self._settings is None else load_records(self._settings)
        if records is None:
            return
        settings, self._settings = self._settings, None  # write once at the end, not per record
        try:
            for rec in records:
                self._restore_one(rec)
        finally:
            self._settings = settings
        self.save()

    def _restore_one(self, rec: Any) -> None:
        try:
            run = self.add_run(*saved_run(rec))
        except (KeyError, TypeError, AttributeError) as exc:
            log.warning("ignoring saved run %r: %s", rec, exc)
            return
        self.set_show_graph(run.run_dir, rec.get("show_graph", True))
        self.set_show_sheet(run.run_dir, rec.get("show_sheet", True))

    def shutdown(self, timeout_ms: int = 10000) -> None:
        """Stop Live Updates and wait for background work (call before the application quits)."""
        self._timer.stop()
        self._pool.waitForDone(timeout_ms)


def _key(run_dir: str) -> str:
    """A run's identity: its absolute, normalised path."""
    return os.path.normpath(os.path.abspath(os.path.expanduser(str(run_dir))))


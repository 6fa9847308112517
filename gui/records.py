"""What the GUI knows about one run: :class:`Run` and its growing :class:`MetricSeries`.

Pure Python (numpy; no Qt, no torch): the controller owns these records, views only read them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import warnings
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from cue_plugin.submit.spec import JobHandle, JobStatus, TrainingJob
from gui.poller import METRIC_FIELDS, Columns, empty_columns
from trainer.core.budget import BudgetError, parse_time_budget
from trainer.core.budget import format_duration as format_time_left
from trainer.core.config import TrainConfig
from trainer.record.runrecord import TERMINAL_STATES, RunRecord

#: Rows used to estimate seconds per step for the ETA.
ETA_WINDOW = 20


class MetricSeries:
    """Metrics of one run as float64 columns that grow in place (amortised doubling).

    ``view(name)`` returns the filled part of a column without copying, so plotting 100k points costs
    one decimation, not a list-of-dicts walk.
    """

    def __init__(self) -> None:
        self._cols: Columns = {name: np.empty(1024, dtype=np.float64) for name in METRIC_FIELDS}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def clear(self) -> None:
        """Drop every row (the run restarted from scratch)."""
        self._n = 0

    def extend(self, cols: Columns) -> None:
        """Append columns of equal length (as returned by :func:`gui.poller.rows_to_columns`)."""
        k = len(cols["step"])
        if not k:
            return
        need = self._n + k
        cap = len(self._cols["step"])
        if need > cap:
            cap = max(need, 2 * cap)
            for name in METRIC_FIELDS:
                grown = np.empty(cap, dtype=np.float64)
                grown[: self._n] = self._cols[name][: self._n]
                self._cols[name] = grown
        for name in METRIC_FIELDS:
            self._cols[name][self._n:need] = cols.get(name, np.full(k, np.nan))
        self._n = need

    def view(self, name: str) -> np.ndarray:
        """The filled part of column ``name`` (read-only view; do not keep across appends)."""
        out = self._cols[name][: self._n]
        out.flags.writeable = False
        return out

    def last(self, name: str) -> float:
        """Latest value of ``name`` (NaN when there are no rows)."""
        return float(self._cols[name][self._n - 1]) if self._n else math.nan

    def columns(self) -> Columns:
        """A copy of every column (for tests and export)."""
        return {name: self._cols[name][: self._n].copy() for name in METRIC_FIELDS} if self._n else empty_columns()


def decimate(x: np.ndarray, y: np.ndarray, max_points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Reduce a curve to at most about ``max_points`` points by averaging equal buckets.

    The last point is kept exactly so the plot ends at the latest value. NaNs are ignored within a
    bucket. Costs O(n) numpy work: about 1 ms for 100k points.
    """
    n = len(x)
    if n <= max_points:
        return x, y
    bucket = math.ceil(n / max_points)
    m = (n // bucket) * bucket
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN bucket -> NaN, which is fine
        xs = x[:m].reshape(-1, bucket).mean(axis=1)
        ys = np.nanmean(y[:m].reshape(-1, bucket), axis=1)
    return np.append(xs, x[-1]), np.append(ys, y[-1])


@dataclass
class Run:
    """One training run the GUI follows.

    Attributes:
        run_dir: the run directory (the run's identity).
        handle: the farm job, once known (from a submit or from ``run.json`` ``farm``).
        job: the non-config fields of the submitted :class:`TrainingJob` (see :func:`job_fields`), kept
            so that a resume can be submitted again; empty for runs added by folder.
        show_graph: plot this run in the Graph area.
        show_sheet: list this run in the Contact Sheet dropdown.
        record: the latest ``run.json`` record, typed (:mod:`trainer.record.runrecord`; empty until read).
        status: the latest farm status, if the farm was asked.
        farm_error: why the farm could not be asked ("" when it answered).
        read_error: why ``run.json`` could not be read ("" when it was).
        metrics: the metrics read so far.
        sheets: contact sheets as ``(step, path)`` sorted by step.
        previews: renders of the run's ``--preview`` frames (``previews/step_NNNNNN.png``), likewise.
        local_ranks: rank processes of this run alive on this machine (last poll; None: not counted).
    """

    run_dir: str
    handle: JobHandle | None = None
    job: dict[str, Any] = field(default_factory=dict)
    show_graph: bool = True
    show_sheet: bool = True
    record: RunRecord = field(default_factory=RunRecord)
    status: JobStatus | None = None
    farm_error: str = ""
    read_error: str = ""
    metrics: MetricSeries = field(default_factory=MetricSeries)
    sheets: list[tuple[int, str]] = field(default_factory=list)
    previews: list[tuple[int, str]] = field(default_factory=list)
    local_ranks: int | None = None

    @property
    def name(self) -> str:
        """Display name: the run directory's folder name."""
        return os.path.basename(os.path.normpath(self.run_dir)) or self.run_dir

    @property
    def total_steps(self) -> int:
        """``run.json`` config.steps (0 when unknown)."""
        return self.record.total_steps

    @property
    def step(self) -> int:
        """Latest logged step (0 before the first row)."""
        last = self.metrics.last("step")
        return 0 if math.isnan(last) else int(last)

    @property
    def state(self) -> str:
        """One state word: a terminal ``run.json`` state wins, then the farm's, then ``run.json``'s."""
        recorded = self.record.state
        if recorded in TERMINAL_STATES:
            return recorded
        if self.status is not None:
            return self.status.state.value
        return recorded or "unknown"

    @property
    def is_finished(self) -> bool:
        """True when neither the trainer nor the farm will change this run any more."""
        farm_done = self.status is None or self.status.state.is_terminal()
        return self.state in TERMINAL_STATES and farm_done

    @property
    def ranks_text(self) -> str:
        """``running/total`` ranks: from the farm when known (frames x ranks per frame); for a local run of
        this machine the live rank processes (:attr:`local_ranks`); else ``-/world_size``. With more than one
        rank per frame followed by ``(F frames x L ranks)``; then the node agents' gang restarts and an elastic
        gang's current size (:meth:`gang_note`)."""
        return self._ranks_text() + self.gang_note()

    def gang_note(self) -> str:
        """``, 2 restarts`` and ``, elastic: 2 of 3 ranks`` from ``run.json`` ``gang`` (cue_plugin.node.agent), or ""."""
        gang = self.record.gang_record
        if not gang.job_id or gang.job_id != self.record.farm_record.job_id:
            return ""
        restarts, world = gang.restarts, gang.world_size
        full = self.job_record().get("world_size")
        note = f", {restarts} restart{'s' if restarts != 1 else ''}" if restarts else ""
        if gang.members and isinstance(full, int) and world < full:
            note += f", elastic: {world} of {full} ranks"
        return note

    def _ranks_text(self) -> str:
        per = self.job_record().get("ranks_per_frame", 1)
        per = per if isinstance(per, int) and per > 0 else 1
        world = self.record.world_size
        shape = ""
        if self.status is not None and self.status.ranks_total:  # the farm counts frames
            text = f"{self.status.ranks_running * per}/{self.status.ranks_total * per}"
            shape = f" ({self.status.ranks_total} frames x {per} ranks)"
        elif world and self.handle is None and self.local_ranks is not None and self.ran_here:
            return f"{self.local_ranks}/{world}"
        else:
            text = f"-/{world}" if world else "-"
            if isinstance(world, int):
                shape = f" ({world // per} frames x {per} ranks)"
        return text + shape if per > 1 else text

    @property
    def ran_here(self) -> bool:
        """True when the latest attempt in ``run.json`` ran on this machine (its rank processes can be counted)."""
        return ran_here(self.record)

    def eta_s(self) -> float:
        """Seconds left, from the wall time of the last :data:`ETA_WINDOW` rows (NaN when unknown)."""
        n = len(self.metrics)
        if n < 2 or self.state in TERMINAL_STATES or not self.total_steps:
            return math.nan
        steps, wall = self.metrics.view("step"), self.metrics.view("wall_s")
        k = max(0, n - ETA_WINDOW)
        dstep, dwall = steps[-1] - steps[k], wall[-1] - wall[k]
        if not dstep > 0 or not dwall > 0:
            return math.nan
        return max(0.0, (self.total_steps - steps[-1]) * dwall / dstep)

    def adopt_record(self, record: RunRecord) -> bool:
        """Take a new ``run.json`` record. Its ``farm`` field (written by the farm backend at each submit)
        names the current job: adopt it when it differs from :attr:`handle`. Returns True when it did."""
        self.record = record
        farm = self.record.farm_record
        if not farm.submitted:
            return False
        job_id, job_name = farm.job_id, farm.job_name
        if self.handle is not None and (self.handle.job_id, self.handle.job_name) == (job_id, job_name):
            return False
        self.handle, self.status = JobHandle(job_id, job_name, self.run_dir), None
        return True

    def job_record(self) -> dict[str, Any]:
        """The submitted job's fields: from this GUI's submit, else ``run.json`` ``farm.job`` (the farm
        backend records it there; ``extra_env`` values are not recorded, so it is left out)."""
        if self.job:
            return dict(self.job)
        recorded = self.record.farm_record.job
        return {k: v for k, v in recorded.items() if k != "extra_env" or isinstance(v, Mapping)}


def ran_here(record: RunRecord) -> bool:
    """True when the latest attempt of a ``run.json`` record ran on this machine."""
    last = record.attempts[-1] if record.attempts else None
    return last is not None and last.get("host") == socket.gethostname()


def format_duration(seconds: float) -> str:
    """``1h02m``, ``3m05s`` or ``12s``; ``-`` for NaN."""
    if math.isnan(seconds):
        return "-"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def time_left_text(run: Run, now: float) -> str:
    """The Runs panel's Time left for ``run`` at ``now`` [s since the epoch].

    A ``--time-budget`` run: the time to its deadline (``run.json`` ``budget.deadline_unix``, fixed when training
    first starts; before that a deadline in ``config.time_budget``, or ``30 min once started`` for a duration not
    yet started), as :func:`trainer.core.budget.format_duration` writes it, ``0 s`` once passed. A
    ``--stop-when-flat`` run without one: ``until flat``. Else, and for a finished run: "".
    """
    if run.state in TERMINAL_STATES:
        return ""
    deadline = run.record.budget.get("deadline_unix")
    if isinstance(deadline, (int, float)) and not isinstance(deadline, bool):
        return format_time_left(deadline - now)
    config = run.record.config
    text = config.get("time_budget")
    if isinstance(text, str) and text:
        try:
            budget = parse_time_budget(text)
        except BudgetError:
            return ""
        if budget.deadline_unix is not None:
            return format_time_left(budget.deadline_unix - now)
        return f"{format_time_left(budget.seconds or 0.0)} once started"
    flat = config.get("stop_when_flat")
    return "until flat" if isinstance(flat, (int, float)) and flat > 0 else ""


def format_number(value: float, digits: int = 4) -> str:
    """A short number (``-`` for NaN)."""
    return "-" if math.isnan(value) else f"{value:.{digits}g}"


_JOB_SKIP = ("train",)


def job_fields(job: TrainingJob) -> dict[str, Any]:
    """The JSON-friendly fields of ``job`` other than its train config (saved with the run)."""
    out = {}
    for f in dataclasses.fields(job):
        if f.name in _JOB_SKIP:
            continue
        value = getattr(job, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) else value
    return out


def resume_job(run: Run) -> TrainingJob:
    """The job that continues ``run`` from its latest checkpoint (``resume=True``).

    Raises:
        ValueError: ``run.json`` holds no config, or the run was not submitted from the GUI so show and
            shot are unknown (the message says what to do).
        trainer.core.config.ConfigError, cue_plugin.submit.spec.FarmError: the recorded values are no longer valid.
    """
    config = run.record.config
    if not config:
        raise ValueError(f"{run.run_dir}/run.json holds no config yet; wait for the run to start")
    recorded = run.job_record()
    if not recorded.get("show") or not recorded.get("shot"):
        raise ValueError("no submitted job is recorded for this run, so its show and shot are unknown; "
                         "submit it again from Train on Render Farm with the same run directory and Resume")
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    train = TrainConfig(**{**{k: v for k, v in config.items() if k in names}, "resume": True})
    names = {f.name for f in dataclasses.fields(TrainingJob)}
    fields_ = {k: v for k, v in recorded.items() if k in names}
    fields_["tags"] = tuple(fields_.get("tags", ()))
    fields_.setdefault("world_size", run.record.world_size or 1)
    return TrainingJob(train=train, **fields_)



def retry_plan(run: Run) -> tuple[str, TrainingJob | None]:
    """How Retry/Resume treats ``run``: ``("retry", None)`` retries the failed frames of a live farm
    job; ``("resume", job)`` submits ``job`` (resume=True) for a run that has ended.

    Raises:
        ValueError: the run is still going but no farm job is known, or it cannot be resumed.
        trainer.core.config.ConfigError, cue_plugin.submit.spec.FarmError: see :func:`resume_job`.
    """
    if run.handle is not None and not run.is_finished:
        return "retry", None
    if run.state not in TERMINAL_STATES:
        raise ValueError(f"the run is {run.state} and this GUI knows no farm job for it; wait for it to end")
    return "resume", resume_job(run)

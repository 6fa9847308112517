"""When a run stops: ``--steps`` (the cap), ``--time-budget`` and ``--stop-when-flat``, decided in one place (no torch).

:class:`StopRule` holds the run's last step and why it is that step (:class:`StopReason`). It starts at ``--steps``
(or a restart's saved plan); rank 0 may move it at a ``--log-interval`` step, for one of two reasons:

- the time budget (:class:`BudgetClock`): the last step that fits before the deadline;
- a flat held-out gain (:class:`FlatRule`, ``--stop-when-flat``): the next optimizer update.

The proposal rides on the progress all-reduce every rank already makes at that step (``trainer.learn.train``'s
``_log``; the other ranks add 0), so every rank takes the same last step at the same step; rank 0, which proposed it,
knows the reason and logs it. ``trainer.learn.stopping`` is the trainer's side: it feeds the held-out scores in and
keeps ``run.json``'s ``budget`` record.

Time budget. The deadline (``trainer.core.budget``) is fixed when a run first starts training: rank 0 reads
``run.json``'s ``budget`` record and keeps its ``deadline_unix`` on a restart or an elastic resize (so they spend the
same budget), or fixes one (:meth:`BudgetClock.start`, after the data phase, the resume and the model's set-up): the
deadline given, or that moment plus the duration. A restart also resumes the record's plan (``stop_step``) from its
first step, so the lr schedule runs over the planned steps, not ``--steps``, until its first plan. Training is planned
to end :attr:`BudgetClock.reserve_s` before the deadline, the time the export and the shutdown take (measured by the
previous attempt, else :data:`DEFAULT_EXPORT_S`), so the export happens inside the budget.

Plan: at every ``--log-interval`` step rank 0 measures its seconds per step, the slower of two rates: over the steps
trained so far in this attempt (the first step's start-up excluded; contact sheets and checkpoints included, as they
recur) and over the last :data:`RECENT_PLANS` plans (a host that slows down, e.g. a neighbour's job, is seen within
a few intervals), and proposes the last step: ``step + (deadline - reserve - now) / seconds_per_step``, rounded up to an
optimizer update (a multiple of ``--sync-interval``, so no gradients are left pending), at least ``step`` (stop now)
and at most ``--steps``. The lr schedule's length is that last step (``trainer.learn.schedule.lr_at``'s
``total_updates``): the cosine runs over the budget's time, the warmup (50 updates) running before the first plans
settle.

Plateau. The rule (:meth:`FlatRule.flat`): at an evaluation at step s, the best held-out PSNR so far exceeds the best
PSNR at steps <= s - ``--flat-window`` by less than ``--stop-when-flat`` dB. Early stopping on a held-out set is
Prechelt's (1998, "Early Stopping - But When?", the GL/PQ criteria), here on an improvement over a window rather than a
loss of generalisation, since a CopyCat model rarely overfits its own shot within a farm run. Once flat, the run stops
at the next update; a budget plan never moves that stop later.
"""

from __future__ import annotations

import logging
import math
import time
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Mapping

from trainer.core.budget import TimeBudget, parse_time_budget
from trainer.core.config import ConfigError

log = logging.getLogger(__name__)

#: Seconds the export takes when no earlier attempt measured it [s]: ``model.pt``, ``model_nuke.nk`` and
#: ``model.json`` (0.2-0.3 s for the small network on a 2-core EPYC, ``benchmarks/bench_fixed_cost.py``), and
#: :data:`ONNX_EXPORT_S` more where rank 0 also writes ``model.onnx`` (a farm frame; ``cuetrain local`` writes it after
#: the run, ``trainer.export.deferred``).
DEFAULT_EXPORT_S = 2.0
#: Seconds ``model.onnx`` adds to the export in the run [s]: 5-15 s on 2 CPU cores (docs/hosts.md).
ONNX_EXPORT_S = 10.0
#: Seconds added to the export for the teardown after it (the gang's exit, the final ``run.json``) [s].
SHUTDOWN_S = 1.0
#: Plans the recent rate spans [plans, one per ``--log-interval``].
RECENT_PLANS = 5


class StopReason(str, Enum):
    """Why the run's last step is what it is (what the log line names)."""

    CAP = "cap"  # --steps
    BUDGET = "budget"  # --time-budget's plan (or its deadline, passed before a restart)
    PLATEAU = "plateau"  # --stop-when-flat


def recorded_deadline(text: str, record: Mapping[str, Any] | None) -> float | None:
    """The deadline [s since the epoch] a run of ``--time-budget text`` has before it starts training: the one
    ``run.json``'s ``budget`` ``record`` fixed for the same text (a restart or resize), else the text's own (an ISO
    deadline); None for no budget, or a duration not started yet."""
    if not text:
        return None
    record = record or {}
    if record.get("text") == text and isinstance(record.get("deadline_unix"), (int, float)):
        return float(record["deadline_unix"])
    return parse_time_budget(text).deadline_unix


def deadline_passed(text: str, record: Mapping[str, Any] | None, now: float | None = None) -> bool:
    """True when the run's deadline (:func:`recorded_deadline`) is already past at ``now`` [s since the epoch]."""
    deadline = recorded_deadline(text, record)
    return deadline is not None and deadline <= (time.time() if now is None else now)


def late_start_error(text: str, record: Mapping[str, Any] | None) -> ConfigError:
    """The error of a run whose deadline passed before it started training and that has no checkpoint to export
    (a job that waited in the queue past it, or a restart before its first checkpoint): bad input, exit 2."""
    deadline = recorded_deadline(text, record) or 0.0
    when = datetime.fromtimestamp(deadline, timezone.utc).isoformat(timespec="seconds")
    return ConfigError(f"--time-budget {text}: the deadline {when} passed before this run started training, and it has "
                       "no checkpoint to export; give a later deadline or a duration such as 2h (a duration counts "
                       "from the start of training)")


class BudgetClock:
    """Rank 0's time budget: the deadline, the reserve and the planned last step (module doc).

    Args:
        text: the ``--time-budget`` text ("" = no budget: :attr:`active` is False and nothing is planned).
        cap: ``--steps``, the last step at most [steps].
        record: ``run.json``'s ``budget`` record ({} on a first attempt): a restart keeps its deadline, its measured
            export time and its plan (:attr:`saved_plan`).
        sync_interval: steps per optimizer update: the last step planned is a multiple of it (or ``cap``) [steps].
        onnx_in_run: rank 0 writes ``model.onnx`` before the run ends (``CUETRAIN_EXPORT_ONNX``, default on).

    :attr:`deadline_unix` is None until :meth:`start` for a duration not started before.
    """

    def __init__(self, text: str, cap: int, record: Mapping[str, Any] | None = None,
                 sync_interval: int = 1, onnx_in_run: bool = False) -> None:
        self.cap, self.sync = cap, max(1, sync_interval)
        self.active = bool(text)
        self.budget: TimeBudget | None = parse_time_budget(text) if text else None
        record = record or {}
        same = record.get("text") == text
        self.deadline_unix: float | None = recorded_deadline(text, record)  # a restart or resize: the same budget
        planned = record.get("stop_step") if same else None
        valid = isinstance(planned, int) and not isinstance(planned, bool) and 0 < planned < cap
        self.saved_plan: int | None = planned if valid else None  # the last attempt's last step [steps]
        measured = record.get("export_s") if same else None
        guess = DEFAULT_EXPORT_S + (ONNX_EXPORT_S if onnx_in_run else 0.0)
        self.reserve_s = (float(measured) if isinstance(measured, (int, float)) else guess) + SHUTDOWN_S
        self._first: tuple[int, float] | None = None  # (step, time) after this attempt's first step
        self._recent: list[tuple[int, float]] = []  # (step, time) of the latest plans

    def start(self, now: float | None = None) -> None:
        """Training starts at ``now`` [s since the epoch]: a duration's deadline is fixed here unless a restart kept
        it (module doc)."""
        if self.budget is not None and self.deadline_unix is None:
            self.deadline_unix = self.budget.deadline_from(time.time() if now is None else now)

    def record(self, stop_step: int | None, export_s: float | None = None) -> dict[str, Any]:
        """The ``run.json`` ``budget`` record with the planned last step ``stop_step`` (None: not planned yet) ({}
        without a budget, or before :meth:`start` fixed the deadline)."""
        if self.budget is None or self.deadline_unix is None:
            return {}
        rec: dict[str, Any] = {"text": self.budget.text, "deadline_unix": self.deadline_unix,
                               "deadline": datetime.fromtimestamp(self.deadline_unix, timezone.utc).isoformat(),
                               "reserve_s": self.reserve_s, "stop_step": stop_step,
                               "planned_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        if export_s is not None:
            rec["export_s"] = export_s
        return rec

    def seconds_left(self, now: float | None = None) -> float:
        """Seconds until training must end (the deadline less the reserve) [s]; inf without a budget or before
        :meth:`start`."""
        if self.deadline_unix is None:
            return math.inf
        return self.deadline_unix - self.reserve_s - (time.time() if now is None else now)

    def mark(self, step: int, now: float | None = None) -> None:
        """Note the end of ``step``: the first call of an attempt starts the per-step clock."""
        if self._first is None:
            self._first = (step, time.time() if now is None else now)

    def propose(self, step: int, now: float | None = None) -> int:
        """The last step, seen at the end of ``step`` (0 without a budget or before two steps are timed: no plan).

        The rate is the slower of this attempt's seconds per step and the recent plans' (module doc); the last step is
        at least ``step`` (the budget is spent: stop after this step), rounded up to a multiple of the sync interval,
        and at most :attr:`cap`.
        """
        now = time.time() if now is None else now
        if self.budget is None or self.deadline_unix is None or self._first is None or step <= self._first[0]:
            return 0
        self._recent = [*self._recent[-RECENT_PLANS:], (step, now)]
        since = self._recent[0] if len(self._recent) > 1 else self._first
        per_step = max((now - self._first[1]) / (step - self._first[0]), (now - since[1]) / max(1, step - since[0]))
        left = self.seconds_left(now)
        more = int(left / per_step + 1e-6) if per_step > 0 and left > 0 else 0  # whole steps that fit
        planned = math.ceil((step + more) / self.sync) * self.sync
        return max(step, min(self.cap, planned))


class FlatRule:
    """``--stop-when-flat``'s rule on rank 0's held-out scores (module doc, "Plateau").

    Args:
        min_gain_db: ``--stop-when-flat`` [dB]; window: ``--flat-window`` [steps].
    """

    def __init__(self, min_gain_db: float, window: int) -> None:
        self.min_gain_db, self.window = min_gain_db, window
        self.history: list[tuple[int, float]] = []  # (step, held-out PSNR dB)

    def add(self, step: int, psnr_db: float) -> None:
        """Keep the held-out PSNR [dB] measured at ``step``."""
        self.history.append((step, psnr_db))

    def flat(self, step: int) -> bool:
        """True when the best held-out PSNR up to ``step`` beats the best up to ``step - window`` by less than
        ``min_gain_db`` (False until evaluations span a window)."""
        old = [p for s, p in self.history if s <= step - self.window]
        if not old or not self.history:
            return False
        gain = max(p for _, p in self.history) - max(old)
        if gain < self.min_gain_db:
            log.info("--stop-when-flat: held-out PSNR improved %.3f dB over the last %d steps (< %.3f dB): stopping",
                     gain, self.window, self.min_gain_db)
            return True
        return False


class StopRule:
    """The run's last step and its reason (module doc): the cap, the time budget's plan or the plateau's stop.

    Args:
        budget: the time budget (:class:`BudgetClock`; inactive without ``--time-budget``).
        flat: the plateau rule (rank 0 with ``--stop-when-flat``), else None.
    """

    def __init__(self, budget: BudgetClock, flat: FlatRule | None = None) -> None:
        self.budget, self.flat = budget, flat
        self.cap, self.sync = budget.cap, budget.sync
        self.last_step, self.reason = budget.cap, StopReason.CAP
        self._proposed = StopReason.CAP  # the reason of rank 0's latest proposal

    @property
    def total_updates(self) -> int:
        """Optimizer updates of the whole run, at ``sync_interval`` steps each [updates]."""
        return math.ceil(self.last_step / self.sync)

    def restart_plan(self, step: int, late: bool) -> int:
        """Rank 0's last step for a run that starts at ``step`` [steps] (every rank takes it: :meth:`take`):
        ``step`` when the deadline passed before this attempt (``late``: export the checkpoint at once); the last
        attempt's plan when it lies ahead (the lr schedule runs over it from the first update); else the cap."""
        if late:
            return step
        saved = self.budget.saved_plan
        return saved if saved is not None and saved > step else self.cap

    def take(self, last_step: int) -> None:
        """Take the start's last step (:meth:`restart_plan`, broadcast by rank 0)."""
        self.last_step = min(last_step, self.cap)
        self.reason = StopReason.CAP if self.last_step == self.cap else StopReason.BUDGET

    def propose(self, step: int, now: float | None = None) -> int:
        """Rank 0's last step at the end of ``step`` for the all-reduce (0: no change): the plateau's stop (the next
        update) once the held-out gain is flat, else the time budget's plan; a plateau stop is never moved."""
        if self.reason is StopReason.PLATEAU:
            return 0
        plan = self.budget.propose(step, now)
        self._proposed = StopReason.CAP if plan >= self.cap else StopReason.BUDGET
        if self.flat is not None and self.flat.flat(step):
            flat_stop = math.ceil(step / self.sync) * self.sync
            if not plan or flat_stop <= plan:
                plan, self._proposed = flat_stop, StopReason.PLATEAU
        return plan

    def agree(self, summed: float, step: int) -> bool:
        """Take the all-reduced proposal made at the end of ``step`` (rank 0's; the others add 0, and 0 keeps the
        plan); True when the last step changed. A plan of ``step`` ends the run after it. The reason is rank 0's
        (the other ranks keep theirs: only rank 0 logs and records)."""
        planned = min(int(round(summed)), self.cap)
        if planned < step or planned == self.last_step or self.reason is StopReason.PLATEAU:
            return False
        self.last_step, self.reason = planned, self._proposed
        return True

    def describe(self) -> str:
        """The log line of a changed last step, naming its reason."""
        if self.reason is StopReason.PLATEAU:
            return f"last step {self.last_step} (--stop-when-flat: the held-out gain is flat)"
        if self.reason is StopReason.BUDGET:
            return f"last step {self.last_step} (time budget: {self.budget.seconds_left():.0f} s left)"
        return f"last step {self.last_step} (--steps cap)"

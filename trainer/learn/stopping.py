"""When a run ends: ``--steps``, ``--time-budget`` and ``--stop-when-flat``, planned by rank 0 and agreed by every rank.

:class:`StopPlan` holds the run's last step. It starts at ``--steps``; rank 0 may bring it forward at a
``--log-interval`` step, for one of two reasons:

- the time budget (:class:`trainer.learn.budget.BudgetClock`): the last step that fits before the deadline;
- a flat held-out gain (:class:`trainer.learn.plateau.Plateau`, ``--stop-when-flat``): the next optimizer update.

The proposal rides on the progress all-reduce every rank already makes at that step (``trainer.learn.train``'s
``_log``; the other ranks add 0), so every rank takes the same last step at the same step. Rank 0 keeps ``run.json``'s
``budget`` record (``trainer.record.runrecord``) up to date, at most every :data:`RECORD_EVERY_S`, and once more as
the plan comes within a log interval of its end.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable

import torch

from trainer.core.config import TrainConfig
from trainer.learn.budget import BudgetClock
from trainer.learn.plateau import FrameSubset, Plateau, split_frames
from trainer.learn.run_writer import wall_clock
from trainer.record import runrecord
from trainer.record.rundir import RunPaths

log = logging.getLogger(__name__)

#: Rank 0 rewrites ``run.json``'s ``budget`` record at most this often while the plan moves [s].
RECORD_EVERY_S = 15.0


class StopPlan:
    """The run's last step (module doc) and the training frames' source.

    Args:
        cfg: the run's config (``steps``, ``time_budget``, ``stop_when_flat``, ``flat_window``, ``log_interval``).
        paths: the run directory (rank 0 reads and writes ``run.json``'s ``budget`` record).
        master: this is rank 0, which plans; the other ranks only agree.
        sync_interval: steps per optimizer update: a planned last step is a multiple of it [steps].
        onnx_in_run: rank 0 writes ``model.onnx`` in the run (its time is reserved from the budget).
        source: the shot's frames (a ``trainer.data.crops`` FrameSource); with ``--stop-when-flat`` every 10th frame
            is held out (:func:`trainer.learn.plateau.split_frames`) and :attr:`source` is the rest.
    """

    def __init__(self, cfg: TrainConfig, paths: RunPaths, master: bool, sync_interval: int, onnx_in_run: bool,
                 source: Any) -> None:
        self.cfg, self.paths, self.master, self.sync = cfg, paths, master, max(1, sync_interval)
        record = runrecord.read_record_or_empty(paths).budget if master else {}
        self.budget_record = dict(record)  # run.json's budget record as this attempt found it (rank 0; {} elsewhere)
        self.budget = BudgetClock(cfg.time_budget, cfg.steps, record, sync_interval=self.sync,
                                  onnx_in_run=onnx_in_run)  # rank 0's holds the last attempt's plan
        self.plateau: Plateau | None = None
        self.source = source
        if cfg.stop_when_flat > 0:
            train_idx, held = split_frames(source.count)
            self.plateau = Plateau(source, held, cfg.stop_when_flat, cfg.flat_window) if master else None
            self.source = FrameSubset(source, train_idx)
        self._written = 0.0  # wall_clock() of the last budget record

    @property
    def last_step(self) -> int:
        """The step the run ends after [steps]: ``--steps`` until a plan brings it forward."""
        return self.budget.last_step

    @property
    def total_updates(self) -> int:
        """Optimizer updates of the whole run, at ``sync_interval`` steps each [updates]."""
        return math.ceil(self.budget.last_step / self.sync)

    def restart_plan(self, step: int, late: bool) -> int:
        """Rank 0's last step for a run that resumes at ``step`` [steps] (every rank then takes it, :meth:`take`):
        ``step`` when the deadline passed before this attempt (``late``: export the checkpoint at once); the last
        attempt's plan when it lies ahead (``run.json`` ``budget.stop_step``: the lr schedule runs over it from the
        first update, not over ``--steps``); else ``--steps`` until the first plan."""
        if late:
            return step
        return self.budget.last_step if self.budget.last_step > step else self.cfg.steps

    def take(self, last_step: int) -> None:
        """Every rank takes the last step rank 0 chose at the start (:meth:`restart_plan`), broadcast."""
        self.budget.last_step = min(last_step, self.cfg.steps)

    def start(self) -> None:
        """Training starts: a duration's deadline is fixed now (unless a restart kept it), and rank 0 writes the
        ``budget`` record (with ``--time-budget``)."""
        self.budget.start()
        if self.master and self.budget.active:
            runrecord.update_record(self.paths, budget=self.budget.record())

    def finish(self, step: int, export_s: float) -> None:
        """Rank 0 records the step the run ended on and the export's time [s] (with ``--time-budget``): a restart
        reserves that time instead of the default guess."""
        if self.master and self.budget.active:
            runrecord.update_record(self.paths, budget=self.budget.record(step, export_s))

    def mark(self, step: int) -> None:
        """Note the end of ``step`` (starts the budget's per-step clock)."""
        self.budget.mark(step)

    def propose(self, step: int) -> float:
        """Rank 0's last step at ``step`` for the all-reduce (0: no change; the other ranks pass 0): the time
        budget's plan, or the next update when the held-out gain is flat."""
        if not self.master:
            return 0.0
        plan = self.budget.propose(step)
        if self.plateau is not None and self.plateau.flat(step):
            flat_stop = math.ceil(step / self.sync) * self.sync
            plan = min(plan, flat_stop) if plan else flat_stop
        return float(plan)

    def agree(self, summed: float, step: int) -> None:
        """Take the all-reduced proposal made at ``step``; rank 0 logs a change and records it in ``run.json``."""
        if not self.budget.agree(summed, step) or not self.master:
            return
        if not self.budget.active:
            log.info("last step %d (--stop-when-flat)", self.budget.last_step)
        elif wall_clock() - self._written >= RECORD_EVERY_S or self.budget.last_step <= step + self.cfg.log_interval:
            runrecord.update_record(self.paths, budget=self.budget.record())
            self._written = wall_clock()
            log.info("time budget: last step %d (%.0f s left)", self.budget.last_step, self.budget.seconds_left())

    def evaluate(self, step: int, model: torch.nn.Module, device: torch.device, autocast: Callable[[], Any]) -> None:
        """Rank 0, at a contact sheet: score the held-out frames for ``--stop-when-flat`` (no-op without it)."""
        if self.plateau is not None:
            self.plateau.evaluate(step, model, device, autocast())

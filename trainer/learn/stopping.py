"""The trainer's side of when a run stops: ``trainer.core.stopping`` decides; this feeds it and records it.

:class:`StopPlan` holds the run's :class:`~trainer.core.stopping.StopRule` and gives it what it needs from a training
rank: ``run.json``'s ``budget`` record (rank 0 reads it at the start and keeps it up to date, at most every
:data:`RECORD_EVERY_S` and once more as the plan comes within a log interval of its end), the held-out PSNR of
``--stop-when-flat`` (:class:`HeldOut`, scored by rank 0 at each contact sheet), the frames to train on (every 10th
pair held out, ``trainer.data.holdout``), and the start of a run whose deadline already passed (:meth:`StopPlan.
late_start`).

Held-out score: rank 0 scores the exported weights (the EMA) on the centre :data:`EVAL_CROP` px square of up to
:data:`EVAL_FRAMES` held-out frames: the PSNR [dB] of the output against the Ground Truth (mattes included: the PSNR of
the alpha). A crop, not the whole frame, keeps the cost bounded on 4K plates.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import numpy as np
import torch

from trainer.core.config import TrainConfig
from trainer.core.stopping import (BudgetClock, FlatRule, StopReason, StopRule, deadline_passed,
                                   late_start_error)
from trainer.data.holdout import FrameSubset, psnr, split_frames
from trainer.data.sources import FrameSource
from trainer.learn.run_writer import wall_clock
from trainer.record import ckptcopies, runrecord
from trainer.record.rundir import RunPaths
from trainer.record.storage import unless_full

log = logging.getLogger(__name__)

#: Rank 0 rewrites ``run.json``'s ``budget`` record at most this often while the plan moves [s].
RECORD_EVERY_S = 15.0
#: Held-out frames scored per evaluation at most [frames].
EVAL_FRAMES = 8
#: Side of the centre square scored per held-out frame, in Input pixels at most [pixels].
EVAL_CROP = 256
#: The most a held-out crop scores [dB]: an MSE of 1e-10 (what the score's floor on the MSE was before it used psnr).
PSNR_CAP = 100.0


class HeldOut:
    """Rank 0's held-out crops and their score (module doc).

    Args:
        source: the whole shot; held: its held-out pair indices (``trainer.data.holdout.split_frames``).
    """

    def __init__(self, source: FrameSource, held: Sequence[int]) -> None:
        h, w = source.size
        c = min(EVAL_CROP, h, w)
        y, x, k = (h - c) // 2, (w - c) // 2, source.scale
        picks = [held[round(i * (len(held) - 1) / max(1, EVAL_FRAMES - 1))] for i in range(min(EVAL_FRAMES, len(held)))]
        self.pairs = [(source.crop(2 * f, y, x, c), source.crop(2 * f + 1, k * y, k * x, k * c))
                      for f in dict.fromkeys(picks)]

    @torch.no_grad()
    def score(self, model: torch.nn.Module, device: torch.device, autocast: Any) -> float:
        """The mean PSNR [dB] of ``model`` on the held-out crops (``trainer.data.holdout.psnr``: output and target
        clipped to 0..1, peak 1), each crop's capped at :data:`PSNR_CAP` (a perfect crop would be infinite)."""
        was = model.training
        model.eval()
        scores = []
        try:
            for inp, tgt in self.pairs:
                x = torch.from_numpy(np.ascontiguousarray(inp, dtype=np.float32)).permute(2, 0, 1)[None].to(device)
                with autocast:
                    out = model(x)
                scores.append(min(PSNR_CAP, psnr(out[0].float().permute(1, 2, 0).cpu().numpy(), tgt)))
        finally:
            model.train(was)
        return float(np.mean(scores))


class StopPlan:
    """A training rank's :class:`~trainer.core.stopping.StopRule`, its records and the training frames' source.

    Args:
        cfg: the run's config (``steps``, ``time_budget``, ``stop_when_flat``, ``flat_window``, ``log_interval``).
        paths: the run directory (rank 0 reads and writes ``run.json``'s ``budget`` record).
        master: this is rank 0, which plans; the other ranks only agree.
        sync_interval: steps per optimizer update: a planned last step is a multiple of it [steps].
        onnx_in_run: rank 0 writes ``model.onnx`` in the run (its time is reserved from the budget).
        source: the shot's frames (a ``trainer.data.sources`` FrameSource); with ``--stop-when-flat`` every 10th frame
            is held out (``trainer.data.holdout.split_frames``) and :attr:`source` is the rest.
    """

    def __init__(self, cfg: TrainConfig, paths: RunPaths, master: bool, sync_interval: int, onnx_in_run: bool,
                 source: Any) -> None:
        self.cfg, self.paths, self.master = cfg, paths, master
        self.budget_record = dict(runrecord.read_record_or_empty(paths).budget) if master else {}
        budget = BudgetClock(cfg.time_budget, cfg.steps, self.budget_record, sync_interval=sync_interval,
                             onnx_in_run=onnx_in_run)  # rank 0's holds the last attempt's plan
        self.held_out: HeldOut | None = None
        self.source = source
        flat = None
        if cfg.stop_when_flat > 0:
            train_idx, held = split_frames(source.count)
            if master:
                self.held_out, flat = HeldOut(source, held), FlatRule(cfg.stop_when_flat, cfg.flat_window)
            self.source = FrameSubset(source, train_idx)
        self.rule = StopRule(budget, flat)
        self._written = 0.0  # wall_clock() of the last budget record

    @staticmethod
    def late_start(cfg: TrainConfig, paths: RunPaths, master: bool, broadcast: Callable[[int], int]) -> bool:
        """Before the data phase: is ``--time-budget``'s deadline past already? Rank 0 decides, ``broadcast`` (rank
        0's int to every rank) tells the others. True when rank 0 will resume a checkpoint (the run exports it at
        once); without one every rank raises ``trainer.core.stopping.late_start_error`` (ConfigError: exit 2), with
        nothing written. No budget: False, no collective."""
        if not cfg.time_budget:
            return False
        late, record = 0, None
        if master:
            record = runrecord.read_record_or_empty(paths).budget
            if deadline_passed(cfg.time_budget, record):
                late = 1 if cfg.resume and ckptcopies.newest_first(paths) else 2
        late = broadcast(late)
        if late == 2:
            raise late_start_error(cfg.time_budget, record)
        return late == 1

    def begin(self, step: int, late: bool, broadcast: Callable[[int], int]) -> None:
        """Every rank, before training from ``step`` (0, or the resumed checkpoint's): take rank 0's last step (the
        last attempt's plan, or ``step`` when ``late``: ``StopRule.restart_plan``).

        Raises:
            ConfigError: ``late`` but no checkpoint was loaded (``step`` 0): nothing to export.
        """
        if late and step == 0:
            raise late_start_error(self.cfg.time_budget, self.budget_record)
        if self.cfg.time_budget:  # every rank: rank 0's plan
            self.rule.take(broadcast(self.rule.restart_plan(step, late)))
        if late:
            log.warning("--time-budget %s: the deadline passed before this restart; exporting the checkpoint of step "
                        "%d without training", self.cfg.time_budget, step)

    @property
    def last_step(self) -> int:
        """The step the run ends after [steps]: ``--steps`` until a plan brings it forward."""
        return self.rule.last_step

    @property
    def total_updates(self) -> int:
        """Optimizer updates of the whole run [updates] (``StopRule.total_updates``)."""
        return self.rule.total_updates

    def _record(self, stop_step: int | None = None, export_s: float | None = None) -> dict[str, Any]:
        planned = stop_step if stop_step is not None else (self.last_step if self.last_step < self.cfg.steps else None)
        return self.rule.budget.record(planned, export_s)

    def start(self) -> None:
        """Training starts: a duration's deadline is fixed now (unless a restart kept it), and rank 0 writes the
        ``budget`` record (with ``--time-budget``)."""
        self.rule.budget.start()
        if self.master and self.rule.budget.active:
            runrecord.update_record(self.paths, budget=self._record())

    def finish(self, step: int, export_s: float) -> None:
        """Rank 0 records the step the run ended on and the export's time [s] (with ``--time-budget``): a restart
        reserves that time instead of the default guess."""
        if self.master and self.rule.budget.active:
            runrecord.update_record(self.paths, budget=self._record(step, export_s))

    def mark(self, step: int) -> None:
        """Note the end of ``step`` (starts the budget's per-step clock)."""
        self.rule.budget.mark(step)

    def propose(self, step: int) -> float:
        """Rank 0's last step at ``step`` for the all-reduce (0: no change; the other ranks pass 0)."""
        return float(self.rule.propose(step)) if self.master else 0.0

    def agree(self, summed: float, step: int) -> None:
        """Take the all-reduced proposal made at ``step``; rank 0 logs a change with its reason and records it in
        ``run.json``."""
        if not self.rule.agree(summed, step) or not self.master:
            return
        if not self.rule.budget.active:
            log.info("%s", self.rule.describe())
        elif (wall_clock() - self._written >= RECORD_EVERY_S or self.last_step <= step + self.cfg.log_interval
              or self.rule.reason is not StopReason.BUDGET):
            if unless_full(lambda: runrecord.update_record(self.paths, budget=self._record())) is not None:
                log.warning("run.json's budget not recorded at step %d (storage full); recorded again at the next "
                            "log row", step)  # _written unchanged: the next agree writes it
                return
            self._written = wall_clock()
            log.info("%s", self.rule.describe())

    def evaluate(self, step: int, model: torch.nn.Module, device: torch.device, autocast: Callable[[], Any]) -> None:
        """Rank 0, at a contact sheet: score the held-out frames for ``--stop-when-flat`` (no-op without it)."""
        if self.held_out is not None and self.rule.flat is not None:
            self.rule.flat.add(step, self.held_out.score(model, device, autocast()))

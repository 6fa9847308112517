"""The training loop every rank (farm frame) runs.

One step = one batch on every rank. Gradients are all-reduced by DDP every
``COPYCAT_SYNC_INTERVAL`` steps (``no_sync()`` in between, so gradients accumulate locally) and the
optimizer updates after each all-reduce, as Determined's ``aggregation_frequency`` does: the
effective batch is ``batch_size * sync_interval`` crops per update.

Loss: L1 (mean absolute error). It is the usual choice for image restoration (Zhao et al., "Loss
Functions for Image Restoration with Neural Networks", 2017): robust to outliers in ground truth,
sharper results than L2, and scale-independent enough for scene-linear EXR values.

Learning rate: :mod:`trainer.learn.schedule` (``effective_lr``, ``lr_at``).
"""

from __future__ import annotations

import contextlib
import logging
import sys
import traceback
from dataclasses import dataclass
from typing import Iterator

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer.gang import distributed
from trainer.data.colour import ColourSpec
from trainer.core.config import TrainConfig
from trainer.core.logsetup import print_progress, progress_line
from trainer.data.crops import (CropBatch, CropSampler, grade_sides_for, rank_loss_weight, rank_slice,
                                warn_identity)
from trainer.data.shot_loading import open_data
from trainer.learn.divergence import DivergenceWatch, reference_output
from trainer.learn.loss import per_crop_loss
from trainer.learn.ema import WeightEMA
from trainer.core.envvars import DistEnv, read_dist_env, read_export_onnx
from trainer.gang.formation import GangError
from trainer.gang.heartbeat import explain_failure
from trainer.gang.stopvote import GangStop, Regroup, StopSignal, StopTraining, Vote, record_stop_timeout
from trainer.learn.model import build_model, count_parameters
from trainer.learn.preview import Previews
from trainer.learn.noise_scale import GradNoise, NoiseSampling, parameter_grads, squared_norm
from trainer.learn.precision import (configure_backends, float32_contiguous, maybe_compile, memory_format,
                               resolve_precision)
from trainer.learn.resume import RunStart, broadcast_int, record_failed_start
from trainer.learn.run_writer import RunWriter, config_record, export_model, model_meta, wall_clock
from trainer.record.rundir import RunPaths
from trainer.learn.schedule import build_optimizer, effective_lr, lr_at, optimizer_record
from trainer.learn.stopping import StopPlan
from trainer.record import recordlock, runrecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainResult:
    """What a finished run returns.

    Attributes:
        step: last step trained [steps].
        start_step: step the run started from (0, or the resumed checkpoint's step) [steps].
        loss: mean global L1 loss of the last log interval.
        model: the trained network (unwrapped, on its device).
    """

    step: int
    start_step: int
    loss: float
    model: torch.nn.Module


def train(cfg: TrainConfig, env: DistEnv | None = None) -> TrainResult:
    """Train one rank of a run (non-distributed when ``env`` is not distributed).

    ``env`` defaults to the process environment (``trainer.core.envvars.read_dist_env``).

    Raises:
        DataError, EnvError, RunDirError: bad input (message names the path/variable).
        RuntimeError: a collective or the rendezvous failed (e.g. a rank died).
    """
    env = read_dist_env() if env is None else env
    paths = RunPaths.of(cfg.run_dir)
    mark = None
    if env.is_main:
        paths.create()
        recordlock.remove_stale_temp_files(paths)  # what a rank 0 killed mid-write left
        mark = runrecord.attempt_mark(runrecord.read_record_or_empty(paths))  # run.json as the last attempt left it

    def record(exc: GangError) -> None:
        if env.is_main:
            runrecord.update_record(paths, state="failed", error=str(exc), failure_kind=exc.kind.value,
                                    exit_code=exc.exit_code, failed_rank=env.rank, failed_at=runrecord.now_iso())

    with StopSignal(cfg.stop_grace_s, on_timeout=record_stop_timeout(paths) if env.is_main else None) as sig:
        try:
            rt = distributed.setup(env, cfg.collective_timeout_s, cfg.gang_timeout_s, on_abort=record)
        except GangError as exc:
            log.error("%s", exc)
            record(exc)
            raise
        try:
            return _Loop(cfg, rt, sig).run()
        except BaseException as exc:
            if mark is not None and isinstance(exc, Exception) and not isinstance(exc, StopTraining):
                record_failed_start(paths, mark, exc, rt)  # when it ended before the steps began (trainer.learn.resume)
            # Free the loop (DDP model, its reducer and comm hook, the stop vote's group) here, in this thread and
            # before teardown, as a run that returns does; not whenever the traceback's frames are collected, in
            # whatever thread: a gloo object destroyed on its own worker thread aborts ("Resource deadlock
            # avoided"), seen once in a pytest worker after an in-process run ended by an exception.
            traceback.clear_frames(exc.__traceback__)
            raise
        finally:
            distributed.teardown(rt)


class _Loop(RunStart):
    """State of one rank's training run (internal; :func:`train` is the API)."""

    def __init__(self, cfg: TrainConfig, rt: distributed.Runtime, sig: StopSignal | None = None) -> None:
        self.cfg, self.rt, self.env = cfg, rt, rt.env
        self.sig = sig or StopSignal(cfg.stop_grace_s)
        self.stop = GangStop(self.sig, rt.backend != "none", lambda: distributed.side_group(rt))
        self.master = rt.env.is_main  # this process logs, writes contact sheets and checkpoints
        self.paths = RunPaths.of(cfg.run_dir)
        self.colour = ColourSpec(cfg.colorspace, cfg.working_space)
        self.precision = resolve_precision(cfg.precision, rt.device)
        fmt = memory_format(cfg.memory_format)
        configure_backends(rt.device)
        rank_slice(cfg.batch_size, self.env.rank, self.env.world_size)  # too few crops: fail before the data phase
        self._late = StopPlan.late_start(cfg, self.paths, self.master, lambda v: broadcast_int(v, rt))  # deadline past
        self.data = open_data(cfg, rt, self.colour, self.paths)  # the shot, decoded once per host (trainer.data.shot_loading)
        self.plan = cfg.channels  # which channels in, which out (trainer.core.channels)
        self.stop_plan = StopPlan(cfg, self.paths, self.master, self.env.sync_interval, read_export_onnx(),
                                  self.data.source)  # --time-budget, --stop-when-flat (trainer.core.stopping decides)
        source = self.stop_plan.source  # with --stop-when-flat, every 10th frame is held out
        self.sampler = CropSampler(source, cfg.crop_size, cfg.batch_size, self.env.rank, self.env.world_size,
                                   cfg.seed, rt.device, fmt, check=self.data.watch, channels=self.plan,
                                   augment=cfg.augment, grade_sides=grade_sides_for(cfg.augment_grade, self.plan))
        self.previews = Previews(cfg, self.colour, self.master)  # --preview frames, read before training
        if self.master:
            warn_identity(cfg.input_dir, cfg.target_dir, self.plan)
        torch.manual_seed(cfg.seed)  # same initial weights on every rank (DDP also broadcasts rank 0's)
        self.net = build_model(cfg.model_size, cfg.architecture_name, scale=cfg.scale, channels=self.plan).to(
            rt.device, memory_format=fmt)  # float32 master weights
        self.scaler = self.precision.grad_scaler()  # enabled for fp16 only
        self.peak_lr = effective_lr(cfg, self.env.sync_interval)
        self.opt = build_optimizer(cfg, self.net, self.peak_lr)
        self.optimizer_why = (cfg.optimizer, cfg.optimizer_reason)  # run.json's optimizer (a resume may change it)
        self.step, self.updates, self._last_ckpt = 0, 0, 0
        self._focus_cells = self._resumed_cells = None  # the crop focus's grid in use, and a checkpoint's (resume.py)
        self._focus_every = 0  # steps between its refreshes, set with the focus
        self.writer = RunWriter(self.paths, self.master, cfg.keep_checkpoints, cfg.storage_full_grace_s)
        self.loss_weight = rank_loss_weight(self.sampler.local_batch, cfg.batch_size, self.env.world_size)
        self.sampling = NoiseSampling(self.env.world_size, self.env.sync_interval, self.sampler.local_batch,
                                      cfg.batch_size, cfg.noise_interval)  # when the noise scale is sampled
        self.noise = GradNoise(rt.device, max(self.sampling.every, 1))  # the gradient noise scale (trainer.learn.noise_scale)
        self.ema = WeightEMA(self.net, cfg.ema_decay) if self.master and cfg.ema_decay > 0 else None  # trainer.learn.ema
        self._micro, self._logged_updates = 0, 0  # steps accumulated into the pending update; updates at the last log
        self.divergence = DivergenceWatch(self.peak_lr, cfg.base_lr)  # a blown-up loss stops the run

    @property
    def total_updates(self) -> int:
        """Optimizer updates of the whole run: ``--steps``, or the last step the gang agreed under a budget."""
        return self.stop_plan.total_updates

    def run(self) -> TrainResult:
        if self.cfg.resume or self.rt.backend != "none":  # in a gang, rank 0's --resume decides for every rank
            self._resume()
        self.stop_plan.begin(self.step, self._late, lambda v: broadcast_int(v, self.rt))  # the last attempt's plan
        started_from = self._init_from() if self.step == 0 and self.cfg.init_from else None
        self._crop_focus(loaded=started_from is not None)
        start = self.step
        model = self._wrap()
        self.writer.start(config_record(self.cfg), self.env.world_size, start, self.rt.backend)
        self.stop_plan.start()
        if self.master:
            runrecord.update_record(self.paths, precision=self.precision.to_dict(),
                                    optimizer=optimizer_record(self.cfg, self.opt, *self.optimizer_why))
            if started_from is not None:
                runrecord.update_record(self.paths, init_from=started_from)
        log.info("precision %s (%s), memory format %s", self.precision.name, self.precision.reason,
                 self.cfg.memory_format)
        log.info("rank %d/%d: model %s (%d parameters), %d crops/step on this rank, steps %d..%d, peak lr %.3g",
                 self.env.rank, self.env.world_size, self.cfg.model_size, count_parameters(self.net),
                 self.sampler.local_batch, start + 1, self.cfg.steps, self.peak_lr)
        try:
            loss = self._steps(model)
            self.stop.close()
            if self.master:
                self.writer.flush()
                t_export = wall_clock()
                export_model(self.paths, float32_contiguous(self._shipped()), model_meta(
                    self.cfg, self.plan, self.net, self.step, self.env.world_size, self.colour, self.precision.name),
                    storage=self.writer.storage)  # a full disk: each file waits up to --storage-full-grace-s
                export_s = wall_clock() - t_export
                self.writer.storage.patiently("run.json", self.paths.run_json,
                                              lambda: self.stop_plan.finish(self.step, export_s))
        except StopTraining:
            raise
        except BaseException as exc:
            if self.rt.backend != "none" and isinstance(exc, RuntimeError):  # gloo raises plain RuntimeError
                exc = explain_failure(self.env, exc, self.rt.heartbeat)  # name the rank that died
                log.error("%s", exc)
            self.writer.finish("failed", error=f"{type(exc).__name__}: {exc}", failed_rank=self.env.rank,
                               **runrecord.failure_fields(exc))
            raise exc
        finally:
            self.data.close()
        self.writer.finish("succeeded", final_step=self.step, final_loss=None if self._late else loss)
        return TrainResult(self.step, start, loss, self.net)

    def _wrap(self) -> torch.nn.Module:
        if self.rt.backend == "none":
            return maybe_compile(self.net, self.cfg.compile)
        ids = [self.rt.device.index] if self.rt.device.type == "cuda" else None
        model = DDP(self.net, device_ids=ids, gradient_as_bucket_view=True)  # no copy grads <-> buckets
        from trainer.gang.compression import register_hook

        register_hook(model, self.cfg.grad_compression,
                      observe=self.noise.observe_bucket if self.sampling.observes_buckets else None)
        return maybe_compile(model, self.cfg.compile)

    def _steps(self, model: torch.nn.Module) -> float:
        cfg, sync = self.cfg, self.env.sync_interval
        loss_acc = torch.zeros((), dtype=torch.float64, device=self.rt.device)
        identity_acc = torch.zeros_like(loss_acc)  # L1 of returning the input unchanged (trainer.learn.divergence)
        n_acc, t_last, loss = 0, wall_clock(), float("nan")
        t0 = t_last
        for step in self._progress(range(self.step + 1, cfg.steps + 1)):
            if step > self.stop_plan.last_step:  # --time-budget: the gang agreed to stop before --steps
                break
            update = step % sync == 0 or step == self.stop_plan.last_step
            batch = self.sampler.batch(step)  # on the device already
            no_sync = getattr(model, "no_sync", None)
            with no_sync() if (no_sync is not None and not update) else contextlib.nullcontext():
                per_crop = self._forward_backward(model, batch)
            loss_acc += per_crop.sum()
            identity_acc += self._loss(reference_output(batch.input, self.plan, cfg.scale), batch.target).sum()
            n_acc += self.sampler.local_batch
            self.step = step
            if update:
                self._update()
            self._refresh_focus(step, self.stop_plan.last_step)  # before a checkpoint of this step stores the map
            self.stop_plan.mark(step)
            if step % cfg.log_interval == 0 or step == self.stop_plan.last_step:
                loss = self._log(step, (loss_acc, identity_acc), n_acc, wall_clock() - t_last, wall_clock() - t0)
                loss_acc.zero_()
                identity_acc.zero_()
                n_acc, t_last = 0, wall_clock()
            checkpointed = self._outputs(step, update)
            level = self.stop.poll()  # every rank votes every step (trainer.gang.stopvote)
            if level == Vote.STOP and update and step < self.stop_plan.last_step:
                self._stop_at(step)
            if level == Vote.REGROUP and checkpointed and step < self.stop_plan.last_step:
                self._regroup_at(step)
        return loss

    def _stop_at(self, step: int) -> None:
        """Checkpoint ``step`` now (rank 0), record ``stopped`` and raise :class:`StopTraining`."""
        if self.master and self._last_ckpt != step:
            self.writer.checkpoint(step, self._state())
        self.writer.finish("stopped", stopped_step=step, exit_code=StopTraining.exit_code)
        self.sig.finished()
        log.warning("rank %d stopped at step %d (%s)", self.env.rank, step,
                    "checkpoint written" if self.master else "rank 0 writes the checkpoint")
        raise StopTraining(step, self.sig.signum)

    def _regroup_at(self, step: int) -> None:
        """After SIGUSR1: rank 0 waits until the periodic checkpoint of ``step`` is on disk and records
        ``stopped`` (exit 79); every rank raises :class:`Regroup`."""
        self.stop.close()  # the vote still in flight (every rank started the same number)
        self.writer.finish("stopped", stopped_step=step, exit_code=Regroup.exit_code)  # flushes the checkpoint
        self.sig.finished()
        log.warning("rank %d regroups at step %d (checkpoint %s%s)", self.env.rank, step,
                    self.paths.checkpoint(step), "" if self.master else ", written by rank 0")
        raise Regroup(step)

    def _forward_backward(self, model: torch.nn.Module, batch: CropBatch) -> torch.Tensor:
        """Forward and backward of this rank's crops (gradients accumulate in ``.grad``); returns the
        (b,) float32 L1 loss per crop, detached.

        One rank at sync interval 1 runs the batch as two halves on every ``--noise-interval``-th update
        and reads the gradient of the first (the small batch of the noise scale, ``trainer.learn.noise_scale``);
        one rank with a sync interval k > 1 reads the gradient after the first of its k steps.
        """
        sync, local = self.env.sync_interval, self.sampler.local_batch
        self._micro += 1
        halves = self.sampling.split(self.updates)
        parts = [(0, local // 2), (local // 2, local)] if halves else [(0, local)]
        losses = []
        no_sync = getattr(model, "no_sync", None)  # a 1-rank gang: the first half must not all-reduce
        for first, stop in parts:
            early = halves and first == 0 and no_sync is not None
            with no_sync() if early else contextlib.nullcontext():
                with self.precision.autocast():
                    out = model(batch.input[first:stop])
                per_crop = self._loss(out, batch.target[first:stop])  # (b,) float32
                loss_sum = per_crop.sum() / local * self.loss_weight / sync
                self.scaler.scale(loss_sum).backward()  # scaled for fp16 only
            losses.append(per_crop.detach())
            if self.sampling.reads_small(self.updates, self._micro, halves and first == 0):
                # the gradient so far is (crops seen / crops per update) x their mean gradient
                self.noise.observe_small(squared_norm(parameter_grads(self.net)) * (local * sync / stop) ** 2)
        return torch.cat(losses) if len(losses) > 1 else losses[0]

    def _measure_noise(self) -> None:
        """Close this update's noise-scale sample (the all-reduced gradient is in ``.grad``), if it is one;
        an update with fewer than ``sync_interval`` steps (the last of a run) adds none."""
        micro, self._micro = self._micro, 0
        sizes = self.sampling.batches(self.loss_weight)
        if micro != self.env.sync_interval or sizes is None or not self.sampling.due(self.updates):
            return
        scale = self.scaler._get_scale_async() if self.scaler.is_enabled() else 1.0  # fp16: grads still scaled
        b_small, b_big, small_scale = sizes
        self.noise.add_sync(b_small, b_big, squared_norm(parameter_grads(self.net)), small_scale, scale)

    def _update(self) -> None:
        self._measure_noise()
        lr = lr_at(self.updates, self.total_updates, self.peak_lr, self.cfg.warmup_steps, self.cfg.lr_schedule,
                   self.cfg.cosine_floor)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.scaler.step(self.opt)  # opt.step(), skipped by fp16's scaler when gradients overflowed
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)
        self.updates += 1
        if self.ema is not None:
            self.ema.update(self.net)

    def _shipped(self) -> torch.nn.Module:
        """The weights an artist gets (model.pt, contact sheets): the EMA with ``--ema-decay``, else the last."""
        return self.ema.module if self.ema is not None else self.net

    def _log(self, step: int, sums: tuple[torch.Tensor, torch.Tensor], n_local: int, dt: float, wall: float) -> float:
        # one all-reduce: the loss and identity-loss sums and the noise-scale sums of the window (trainer.learn.noise_scale)
        plan = self.stop_plan.propose(step)  # --time-budget / --stop-when-flat: rank 0's last step
        total, identity, count, plan, *noise = distributed.all_reduce_sum(
            [float(sums[0]), float(sums[1]), float(n_local), plan, *self.noise.window()], self.rt)
        self.stop_plan.agree(plan, step)
        noise_scale = self.noise.smooth(*noise, updates=self.updates - self._logged_updates)
        if noise[2] > 0:  # samples in this window: the next one's weight counts the updates from here
            self._logged_updates = self.updates
        loss = total / max(count, 1.0)
        images_per_s = count / dt if dt > 0 else 0.0
        lr = self.opt.param_groups[0]["lr"]
        print_progress(progress_line(step, self.stop_plan.last_step, loss, lr, images_per_s))
        row = {"step": step, "loss": loss, "lr": lr, "images_per_s": images_per_s, "wall_s": wall}
        self.writer.metrics(row if noise_scale is None else {**row, "noise_scale": noise_scale})
        self.divergence.check(step, loss, identity / max(count, 1.0))  # every rank: the same all-reduced sums
        return loss

    def _outputs(self, step: int, update: bool) -> bool:
        """Contact sheet and periodic checkpoint of ``step`` (rank 0 writes them).

        Returns True when a periodic checkpoint is due at ``step``; every rank applies the same rule
        (and tracks ``_last_ckpt``), so a regroup (:meth:`_regroup_at`) stops every rank at that step.
        """
        cfg = self.cfg
        last = self.stop_plan.last_step
        due = step // cfg.checkpoint_interval > self._last_ckpt // cfg.checkpoint_interval or step == last
        due = due and update  # only at update boundaries: no gradients are pending
        if due:
            self._last_ckpt = step
        if not self.master:
            return due
        if step % cfg.contact_sheet_interval == 0 or step == last:
            prev = self.sampler.preview(step)
            with torch.no_grad(), self.precision.autocast():
                out = self._shipped()(prev.input)  # (n, 3, c, c) -> (n, 3, sc, sc) with --scale s
            self.writer.contact_sheet(step, prev.input, out, prev.target, self.plan)
            self.previews.render(step, self._shipped(), self.rt.device, self.precision, self.writer)
            self.stop_plan.evaluate(step, self._shipped(), self.rt.device, self.precision.autocast)
        if due:
            self.writer.checkpoint(step, self._state())
        return due

    def _loss(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """(b,) float32 loss per crop: L1, and on matte channels ``--matte-loss`` (``trainer.learn.loss``)."""
        return per_crop_loss(out, target, self.plan, self.cfg.matte_loss)

    def _progress(self, steps: range) -> Iterator[int]:
        if self.master and sys.stderr.isatty():
            from tqdm import tqdm

            yield from tqdm(steps, initial=steps.start - 1, total=self.cfg.steps, unit="step", dynamic_ncols=True)
        else:
            yield from steps


"""Where a rank's run starts: the state a checkpoint holds, rank 0's latest checkpoint for the whole gang
(``--resume``) and another model's weights (``--init-from``).

:class:`RunStart` is the part of the training loop (``trainer.learn.train``) that writes and reads that state;
:func:`record_failed_start` records an attempt that failed before its steps began.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from trainer.core.channels import ChannelPlan
from trainer.core.config import ConfigError, TrainConfig
from trainer.core.envvars import DistEnv
from trainer.core.recipe import DEFAULT_LR_FLOOR
from trainer.data.crops import CropSampler
from trainer.gang import distributed
from trainer.gang.formation import GangError
from trainer.gang.heartbeat import explain_failure
from trainer.learn.divergence import DivergenceWatch
from trainer.learn.ema import WeightEMA
from trainer.learn.model import build_model
from trainer.learn.noise_scale import GradNoise
from trainer.learn.precision import Precision
from trainer.learn.run_writer import (check_resumable, config_record, cpu_copy, load_checkpoint_file,
                                      model_config_record, resume_optimizer)
from trainer.learn.schedule import build_optimizer, effective_lr
from trainer.record import runrecord
from trainer.record.rundir import RunDirError, RunPaths

log = logging.getLogger("trainer.learn.train")  # the loop's records keep their name (benchmarks/bench_fixed_cost.py)


class RunStart:
    """The training loop's checkpoint state, ``--resume`` and ``--init-from`` (internal: a base of the loop in
    ``trainer.learn.train``, which sets these attributes before :meth:`_resume` or :meth:`_init_from` runs)."""

    cfg: TrainConfig
    rt: distributed.Runtime
    env: DistEnv
    paths: RunPaths
    master: bool  # this process logs, writes contact sheets and checkpoints
    plan: ChannelPlan
    precision: Precision
    net: torch.nn.Module
    sampler: CropSampler
    opt: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    noise: GradNoise
    ema: WeightEMA | None
    divergence: DivergenceWatch
    peak_lr: float
    optimizer_why: tuple[str, str]
    step: int
    updates: int
    _last_ckpt: int
    _logged_updates: int
    _focus_cells: np.ndarray | None  # the crop focus's grid in use (trainer.learn.focus_map), checkpointed
    _resumed_cells: torch.Tensor | None  # the grid the resumed checkpoint holds
    _focus_every: int  # steps between refreshes of the crop focus (0: never)

    def _state(self) -> dict[str, Any]:
        return cpu_copy({"model": self.net.state_dict(), "optimizer": self.opt.state_dict(), "step": self.step,
                         "updates": self.updates, "config": config_record(self.cfg), "model_size": self.cfg.model_size,
                         "world_size": self.env.world_size, "sync_interval": self.env.sync_interval,
                         "torch_rng": torch.get_rng_state(), "grad_scaler": self.scaler.state_dict(),
                         "precision": self.precision.name, "architecture": self.cfg.architecture_name,
                         "model_config": model_config_record(self.cfg, self.plan), "scale": self.cfg.scale,
                         "noise_scale": self.noise.state_dict(),
                         "ema": self.ema.state_dict() if self.ema is not None else None,
                         "focus_cells": None if self._focus_cells is None else torch.from_numpy(self._focus_cells)})

    def _resume(self) -> None:
        """Load the latest checkpoint when rank 0 runs with ``--resume``; the other ranks load the step rank 0
        broadcasts (whatever their own ``--resume`` says, so a gang never disagrees on where it starts)."""
        found = load_checkpoint_file(self.paths) if self.master and self.cfg.resume else None
        step = broadcast_int(found[0]["step"] if found else 0, self.rt)
        if step and found is None and (found := load_checkpoint_file(self.paths, step)) is None:
            raise RunDirError(f"rank 0 resumes from step {step}, but neither {self.paths.checkpoint(step)} nor "
                              f"{self.paths.checkpoint_copy(step)} is intact from here: check that every host mounts "
                              "the run directory's shared storage and reads the same files")
        if not found:
            if self.cfg.resume and self.master:
                log.info("--resume: no checkpoint in %s, starting from step 0", self.paths.checkpoints)
            return
        ckpt, path = found
        optimizer = resume_optimizer(self.cfg.optimizer, self.cfg.optimizer_name, ckpt)
        check_resumable(ckpt, path, self.cfg.model_size, self.cfg.architecture_name, optimizer, self.cfg.scale,
                        self.plan)
        if optimizer != self.cfg.optimizer_name:  # --optimizer auto: the checkpoint's, with that optimizer's lr
            log.warning("--optimizer auto: resuming with %s, the optimizer %s was written with (auto now picks %s "
                        "for a new run)", optimizer, path, self.cfg.optimizer_name)
            self._use_optimizer(optimizer)
        kept = resumed_schedule(self.cfg, ckpt)
        if kept != self.cfg:
            log.warning("--resume: training on with the lr %g, cosine floor %g, crop focus %g and encoder lr %g that "
                        "%s was trained with (this version's defaults are %g, %g, %g and %g; give --lr / --lr-floor / "
                        "--init-focus / --init-encoder-lr to change them)", kept.base_lr, kept.cosine_floor,
                        kept.focus_share, kept.encoder_lr, path, self.cfg.base_lr, self.cfg.cosine_floor,
                        self.cfg.focus_share, self.cfg.encoder_lr)
            self._use_config(kept)
        self.net.load_state_dict(ckpt["model"])
        self.opt.load_state_dict(ckpt["optimizer"])
        if ckpt.get("grad_scaler"):  # fp16 runs: keep the loss scale found so far
            self.scaler.load_state_dict(ckpt["grad_scaler"])
        torch.set_rng_state(ckpt["torch_rng"])
        self.noise.load_state_dict(ckpt.get("noise_scale"))
        if self.ema is not None:
            self.ema.load_state_dict(ckpt.get("ema"), self.net)
        self.step, self.updates, self._last_ckpt = ckpt["step"], ckpt["updates"], ckpt["step"]
        self._resumed_cells = ckpt.get("focus_cells")  # None before the map was checkpointed
        self._logged_updates = self.updates
        log.info("resumed from %s (step %d)", path, step)

    def _use_optimizer(self, name: str) -> None:
        """Train with ``name`` (``adam`` or ``muon``) from here on: the config, its peak lr, the optimizer and the
        divergence watch follow it (before a checkpoint's optimizer state is loaded)."""
        self.optimizer_why = (self.cfg.optimizer, f"auto: resumed with {name}, the optimizer of the checkpoint (auto "
                                                  f"picks {self.cfg.optimizer_name} for a new run)")
        self._use_config(dataclasses.replace(self.cfg, optimizer=name))

    def _use_config(self, cfg: TrainConfig) -> None:
        """Train with ``cfg`` from here on: its peak lr, a fresh optimizer and the divergence watch follow it
        (before a checkpoint's optimizer state is loaded)."""
        self.cfg = cfg
        self.peak_lr = effective_lr(self.cfg, self.env.sync_interval)
        self.opt = build_optimizer(self.cfg, self.net, self.peak_lr)
        self.divergence = DivergenceWatch(self.peak_lr, self.cfg.base_lr)

    def _init_from(self) -> dict[str, Any]:
        """``--init-from``: load another model's weights into the network on every rank (the optimizer and the
        schedule start fresh); the EMA restarts from them. Returns the ``run.json`` ``init_from`` record.

        Raises:
            ConfigError: the source's architecture, size, scale or channels differ (each mismatch named), or it
                cannot be read (``trainer.learn.init_from``).
        """
        record = self._load_source(self.net)
        if self.ema is not None:
            self.ema = WeightEMA(self.net, self.cfg.ema_decay)
            if self.cfg.init_ema == "source":
                self.ema.updates = int(record.get("step") or 0)  # its warm-up counts on from the source's step
        log.info("rank %d: weights from %s (%s, step %s)", self.env.rank, record.get("weights"), record.get("kind"),
                 record.get("step"))
        return record

    def _crop_focus(self, loaded: bool) -> None:
        """``--init-focus``: the sampler draws its share of each batch's crops where the source model's error on this
        shot is largest (``trainer.learn.focus_map``; on a large shot rendered on one frame in every ``map_stride``),
        on every rank. ``loaded``: the network holds the source's weights (step 0). A resumed run draws from the map
        its checkpoint holds (the one in use when it was written, which may be the network's own since
        ``--init-focus-every``); from a checkpoint without one the source is loaded again into a copy (under a forked
        RNG: the checkpoint's RNG state stays as restored). A source that can no longer be read (deleted since the run
        started) does not fail the resume: the gang agrees, warns and draws every crop uniformly."""
        if not (self.cfg.init_from and self.cfg.focus_share > 0):
            return
        from trainer.learn.focus_map import focus_of, map_stride, model_focus, refresh_every

        source, crop, share = self.sampler.source, self.cfg.crop_size, self.cfg.focus_share
        self._focus_every = refresh_every(self.cfg.init_focus_every, source.count, source.size,
                                          self.sampler.global_batch, crop)
        if self._focus_every > self.cfg.init_focus_every > 0:
            log.info("crop focus: made again every %d steps, not %d: the %d training frames of %dx%d px are too many "
                     "pixels to render more often", self._focus_every, self.cfg.init_focus_every, source.count,
                     source.size[1], source.size[0])
        if not loaded and self._resumed_cells is not None:
            cells = self._resumed_cells.numpy()
            try:
                self.sampler.focus, self._focus_cells = focus_of(cells, source, crop, share), cells
                if self.sampler.focus is None:
                    log.info("crop focus: the checkpoint's map is 0 everywhere; every crop is drawn uniformly")
                else:
                    log.info("crop focus: %.0f%% of each batch's crops drawn by the checkpoint's map", share * 100)
                return
            except ValueError as exc:  # not this shot's grid: the source's map, as for an older checkpoint
                log.warning("rank %d: the checkpoint's crop focus does not fit this shot (%s); the source's map is "
                            "made again", self.env.rank, exc)
        net = self.net if loaded else self._source_copy()
        if not loaded and distributed.all_reduce_sum([float(net is None)], self.rt)[0] > 0:  # any rank: all uniform
            log.warning("rank %d: the head start's source %s cannot be read again; from here on every crop is drawn "
                        "uniformly (--init-focus needs it)", self.env.rank, self.cfg.init_from)
            return
        stride = map_stride(source.count, source.size, self.cfg.steps, self.sampler.global_batch, crop)
        self.sampler.focus, self._focus_cells = model_focus(net, source, crop, share, self.rt, stride=stride)

    def _refresh_focus(self, step: int, last_step: int) -> None:
        """``--init-focus-every`` (stretched for a large shot: ``focus_map.refresh_every``): at every multiple of it
        before ``last_step``, the crop focus follows the network being trained (its error on the training frames:
        ``trainer.learn.focus_map``). Every rank calls it at every step; the condition is the same on all of them."""
        every = self._focus_every  # --init-focus-every, stretched for a large shot (_crop_focus)
        if self.sampler.focus is None or not every or step % every or step >= last_step:
            return
        from trainer.learn.focus_map import model_focus

        what = f"the network at step {step}"
        self.sampler.focus, self._focus_cells = model_focus(self.net, self.sampler.source, self.cfg.crop_size,
                                                            self.cfg.focus_share, self.rt, what)

    def _load_source(self, net: torch.nn.Module) -> dict[str, Any]:
        """Load ``--init-from``'s weights into ``net`` (this run's network, checked against the source's); returns
        the ``run.json`` record (``trainer.learn.init_from.apply_init_from``, which raises ConfigError)."""
        from trainer.learn.init_from import apply_init_from

        return apply_init_from(net, self.cfg.init_from, architecture=self.cfg.architecture_name,
                               model_size=self.cfg.model_size, scale=self.cfg.scale, channels=len(self.plan.inputs),
                               target_channels=len(self.plan.targets))

    def _source_copy(self) -> torch.nn.Module | None:
        """A new network holding ``--init-from``'s weights, or None (logged) when they cannot be read."""
        with torch.random.fork_rng(devices=[]):
            net = build_model(self.cfg.model_size, self.cfg.architecture_name, scale=self.cfg.scale,
                              channels=self.plan).to(self.rt.device)
        try:
            self._load_source(net)
        except ConfigError as exc:
            log.warning("rank %d: %s", self.env.rank, exc)
            return None
        return net


#: The floor with Muon, by job and size, of the versions that had ``--lr-floor`` but did not record the floor a run
#: used in its checkpoints (from commit 0b1e0d0 until ead0d09): colour repair at small 0.3, everything else a tenth.
FLOOR_BEFORE_RECORDED = {"repair": {"small": 0.3}}


def resumed_schedule(cfg: TrainConfig, ckpt: dict[str, Any]) -> TrainConfig:
    """``cfg`` with the lr, cosine floor, crop focus and encoder lr the checkpoint's run trained with, where ``--lr``
    / ``--lr-floor`` / ``--init-focus`` / ``--init-encoder-lr`` are not given and a default has changed since (a run
    resumes on the schedule it started, as :func:`resume_optimizer` keeps its optimizer).

    The checkpoint's ``config`` (``run_writer.config_record``) names them as ``base_lr`` and ``cosine_floor``. One
    written before they were recorded keeps this version's lr, and its floor is the one its version used:
    :data:`DEFAULT_LR_FLOOR` before ``lr_floor`` existed (every cosine ended at a tenth of the peak), and
    :data:`FLOOR_BEFORE_RECORDED` where its config has ``lr_floor`` but no ``cosine_floor``. The focus is
    ``focus_share``, 0 (every crop uniform) in a checkpoint written before it was recorded, and the encoder's lr
    ``encoder_lr``, 1 (every layer at the peak lr) before it was."""
    config = ckpt.get("config") if isinstance(ckpt.get("config"), dict) else {}
    changes: dict[str, float] = {}
    base_lr = config.get("base_lr")
    if cfg.lr is None and isinstance(base_lr, (int, float)) and base_lr != cfg.base_lr:
        changes["lr"] = float(base_lr)
    floor = config.get("cosine_floor", DEFAULT_LR_FLOOR)
    if "cosine_floor" not in config and "lr_floor" in config and cfg.optimizer_name == "muon":
        floor = FLOOR_BEFORE_RECORDED.get(cfg.recipe_job, {}).get(cfg.model_size, DEFAULT_LR_FLOOR)
    if cfg.lr_floor is None and isinstance(floor, (int, float)) and floor != cfg.cosine_floor:
        changes["lr_floor"] = float(floor)
    # a head start's: (the field, its resolved value's config key and property, its value before it was recorded)
    for field, key, before in (("init_focus", "focus_share", 0.0), ("init_encoder_lr", "encoder_lr", 1.0)):
        value = config.get(key, before)
        unset = getattr(cfg, field) is None and cfg.init_from
        if unset and isinstance(value, (int, float)) and value != getattr(cfg, key):
            changes[field] = float(value)
    return dataclasses.replace(cfg, **changes) if changes else cfg


def broadcast_int(value: int, rt: distributed.Runtime) -> int:
    """Rank 0's ``value`` on every rank of the gang (``value`` itself without one)."""
    if rt.backend == "none":
        return value
    t = torch.tensor([value], dtype=torch.int64, device=rt.device)
    dist.broadcast(t, src=0)
    return int(t.item())


def record_failed_start(paths: RunPaths, mark: tuple[str, int, str], exc: Exception, rt: distributed.Runtime) -> None:
    """Rank 0 of ``trainer.learn.train.train``: ``run.json`` says failed when the attempt ended with ``exc`` before its
    steps began (``runrecord.record_failed_start``: nothing of this attempt recorded since ``mark``, read as it
    started), a failed collective named as the loop names it (the rank that died, ``explain_failure``), with the exit
    code ``cuetrain train`` gives (``runrecord.failure_fields``).

    Raises nothing: a record that cannot be written (a full disk, a lost mount) is logged, so that ``exc`` stays the
    attempt's error.
    """
    try:
        if not paths.run_json.exists() or runrecord.attempt_mark(runrecord.read_record_or_empty(paths)) != mark:
            return  # none to update yet, or recorded already: by the writer, the data phase or the gang's formation
        if rt.backend != "none" and isinstance(exc, RuntimeError) and not isinstance(exc, GangError):
            exc = explain_failure(rt.env, exc, rt.heartbeat)  # type: ignore[assignment]  # an Exception either way
        runrecord.record_failed_start(paths, mark, exc, rt.env.rank)
    except Exception as failed:  # noqa: BLE001 - the attempt's own error is what the caller raises
        log.warning("could not record the failed start in %s: %s", paths.run_json, failed)

"""The critical batch measured directly: short trainings at global batches B, 4 B and 16 B.

``cuetrain advise --quality-probe`` uses this in place of the simple noise scale. McCandlish et al. 2018
("An Empirical Model of Large-Batch Training", eq. 2.11) define the critical batch by what it predicts:
``S(B) = S_min (1 + B_noise / B)`` optimizer updates to reach a given loss. Runs from the same initial
weights at ``B`` and ``k B`` crops per update, measured to the same loss, solve it:

    r = S(k B) / S(B) = (1 + B_noise / (k B)) / (1 + B_noise / B)   =>   B_noise = B (1 - r) / (r - 1 / k)

(:func:`critical_batch`; ``r <= 1/k``: the big batch scaled perfectly, so ``B_noise`` is at least
:data:`CRITICAL_BATCH_CAP`; ``r >= 1``: it bought nothing, 0); with more than two batches S(B) is fitted by
least squares (:func:`fit_critical_batch`). The default runs :data:`FACTORS` 4 and 16 because the advisor's
largest effective batches (8 ranks, or ``--sync-interval 8``) are where the trainer's learning-rate rule, not
the gradient noise, can decide the updates (docs/scaling.md, "Time to quality"). Why not ``B_simple``: on the
two clips of docs/studies/noise_scale.md the simple noise scale ``tr(Sigma) / |G|^2``
(``trainer.learn.noise_scale``) was 1.5x (carphone) and 9-15x (blur + noise) below the critical batch fitted
to full runs at batches 8, 32 and 128, so no one calibration fits both; this probe measures the batch
dependence itself.

Each run is the trainer's update: its network (``build_model``, or ``build``), its optimizer and betas
(``build_optimizer``), its precision and memory format, the peak learning rate of its effective batch by
``--lr-scaling`` (``trainer.learn.schedule.effective_lr``, as ``--sync-interval k`` scales it), warmed up linearly
from 1/10 over :data:`WARMUP_UPDATES` updates in every run and then held (S(B) counts updates, so the schedule's
length must not decide them; the warm-up adds the same ~8.5 updates to every run that outlasts it, so the fit
gives the critical batch of this schedule, ``B_noise S_min / (S_min + 8.5)``, the figure that predicts runs with
this warm-up: tests/trainer/advise/test_critical_batch.py measures a known 16 crops as 16 without it and 13 with
it). A bigger batch is ``k`` micro-batches of ``B`` crops accumulated into one update, as
``COPYCAT_SYNC_INTERVAL`` k makes it. Progress is the mean L1 loss on a fixed set of :data:`EVAL_CROPS` crops of
the training frames (their own crop stream), about :data:`EVALUATIONS` times a run; each curve is made monotone by
its running minimum (the first crossing). The run at ``B`` trains :data:`SMALL_UPDATES` updates and its last loss
is the level; each bigger run stops as soon as it reaches that level (at most as many updates), and the updates to
it are interpolated linearly between evaluations. The level is early in a long run, and the critical batch grows
as the loss falls (McCandlish et al. 2018 observe it; docs/studies/noise_scale.md measured it on the second clip),
so for a quality much later in a run the probe's figure is likely low.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from trainer.core.config import TrainConfig
from trainer.data.crops import CropSampler, per_crop_l1

FACTORS = (4, 16)  # the bigger runs' batches: these multiples of the small run's [1]
SMALL_UPDATES = 160  # updates of the run at the config's batch: its last loss is the level [updates]
EVALUATIONS = 40  # evaluations a run (of its cap), about [1]
EVAL_CROPS = 64  # crops in the fixed evaluation set [crops]
WARMUP_UPDATES = 20  # linear warm-up from lr/10, both runs [updates] (as benchmarks/bench_noise_scale.py)
CRITICAL_BATCH_CAP = 10_000.0  # reported when the big batch scaled perfectly (r <= 1/k) [crops]
PROBE_FRAMES = 16  # frame pairs the advisor's quality probe trains on at most, spread over the shot [frames]
EVAL_STREAM = 3  # CropSampler.coords stream of the evaluation crops (0: training, 1: contact sheets)


@dataclass(frozen=True)
class QualityProbe:
    """What :func:`measure_critical_batch` measured.

    Attributes:
        batches: crops per update of each run, the config's global batch first [crops].
        updates: updates each run needed to reach ``level`` (a bigger run that never did: its cap) [updates].
        level: the mean L1 loss on the evaluation crops every run reached [1, pixel values 0..1].
        critical_batch: ``B_noise`` from them (:func:`critical_batch`, or :func:`fit_critical_batch` for
            more than two runs) [crops].
        curves: ``(updates, running-minimum eval loss)`` per evaluation, one per run [updates, 1].
        seconds: wall time of all runs [s].
        truncated: the time budget stopped a run before it reached the level (its updates are a lower bound) or
            shortened the plan (fewer updates or factors than asked; ``trainer.advise.budget.plan_quality``).
    """

    batches: tuple[int, ...]
    updates: tuple[float, ...]
    level: float
    critical_batch: float
    curves: tuple[tuple[tuple[int, float], ...], ...]
    seconds: float
    truncated: bool = False

    def line(self) -> str:
        """One sentence for the advisor's output."""
        bound = "at least " if self.critical_batch >= CRITICAL_BATCH_CAP else ""
        runs = ", ".join(f"batch {b} {u:.0f}" for b, u in zip(self.batches, self.updates))
        rough = "; the time budget cut it short, so it is rough" if self.truncated else ""
        return (f"quality probe: updates to the same loss ({self.level:.4f} L1): {runs}: critical batch "
                f"{bound}{self.critical_batch:.1f} crops ({self.seconds:.0f} s{rough})")


class OverBudget(RuntimeError):
    """The quality probe does not fit the time left (the message says what it needs)."""


def critical_batch(small_updates: float, big_updates: float, batch: float, factor: float) -> float:
    """``B_noise`` [crops] from the updates two batches needed to reach one loss (module doc; McCandlish
    et al. 2018, eq. 2.11, solved for ``B_noise``).

    Args:
        small_updates: updates at ``batch`` crops per update [updates], > 0.
        big_updates: updates at ``factor x batch`` [updates], > 0.
        batch: the small batch [crops], > 0.
        factor: the big batch over the small, > 1.

    Returns:
        ``batch (1 - r) / (r - 1 / factor)`` with ``r = big_updates / small_updates``; 0 when ``r >= 1``;
        :data:`CRITICAL_BATCH_CAP` when ``r <= 1 / factor`` (or the formula exceeds it).

    Raises:
        ValueError: a value out of range (named).
    """
    if not small_updates > 0 or not big_updates > 0 or not batch > 0 or not factor > 1:
        raise ValueError(f"critical_batch needs updates > 0, batch > 0 and factor > 1; got small_updates="
                         f"{small_updates}, big_updates={big_updates}, batch={batch}, factor={factor}")
    r = big_updates / small_updates
    if r >= 1.0:
        return 0.0
    if r <= 1.0 / factor:
        return CRITICAL_BATCH_CAP
    return min(CRITICAL_BATCH_CAP, batch * (1.0 - r) / (r - 1.0 / factor))


def fit_critical_batch(batches: Sequence[float], updates: Sequence[float]) -> float:
    """``B_noise`` [crops] of the least-squares S(B) through the updates several batches needed to reach one loss
    (``trainer.advise.quality.least_squares_in_inverse_batch``; with two batches exactly :func:`critical_batch`).
    A fit whose updates rise with the batch gives 0 (bigger batches bought nothing); one with ``S_min <= 0``
    (better than perfect scaling) gives :data:`CRITICAL_BATCH_CAP`.

    Raises:
        ValueError: fewer than two distinct batches, a length mismatch, or an update count <= 0.
    """
    from trainer.advise.quality import least_squares_in_inverse_batch

    if len(batches) != len(updates) or len(set(batches)) < 2 or min(updates) <= 0:
        raise ValueError(f"fit_critical_batch needs >= 2 distinct batches with updates > 0 each; got "
                         f"{list(batches)}, {list(updates)}")
    s_min, slope = least_squares_in_inverse_batch(batches, updates)
    if slope <= 0:
        return 0.0
    if s_min <= 0:
        return CRITICAL_BATCH_CAP
    return min(CRITICAL_BATCH_CAP, slope / s_min)


def first_crossing(curve: Sequence[tuple[int, float]], level: float) -> float | None:
    """First update at which a falling loss ``curve`` [(updates, loss)] reaches ``level``, linear between
    evaluations; None if it never does."""
    for (u0, l0), (u1, l1) in zip(curve, curve[1:]):
        if l1 <= level:
            return float(u0) if l0 <= level else u0 + (u1 - u0) * (l0 - level) / (l0 - l1)
    return None


def measure_critical_batch(cfg: TrainConfig, frames: Sequence[tuple[np.ndarray, np.ndarray]], *,
                           device: torch.device | None = None, build: Callable[[], torch.nn.Module] | None = None,
                           factors: Sequence[int] = FACTORS, small_updates: int = SMALL_UPDATES,
                           big_updates: int | None = None, budget_s: float | None = None,
                           progress: Callable[[str, int, int], None] | None = None) -> QualityProbe:
    """Train from the same weights at ``cfg.batch_size`` and at each ``factor x`` that per update; measure
    ``B_noise`` (module doc).

    Args:
        cfg: the run's settings (network, batch, crop, lr, lr scaling, beta2, precision, memory format, seed).
        frames: training pairs ``[(input, target)]``, each (H, W, 3) float16/float32 in 0..1.
        device: where to train (default: CUDA when available, else the CPU).
        build: makes the initial network (default ``trainer.learn.model.build_model(cfg.model_size,
            cfg.architecture_name)`` after ``torch.manual_seed(cfg.seed)``); called once per run, it must return the
            same weights each time.
        factors: the bigger runs' batch multiples (each > 1).
        small_updates: updates of the run at ``cfg.batch_size``; its last (running-minimum) loss is the level.
        big_updates: each bigger run stops when it reaches the level, or after this many updates (default
            ``small_updates``), when its count is this cap.
        budget_s: wall-clock budget [s] (None: none): two timed updates plan the runs to fit
            (``trainer.advise.budget.plan_quality``: fewer updates, then fewer factors), and a run stops at it.
        progress: ``(phase "quality", micro-batches done, micro-batches expected)`` as it trains.

    Raises:
        ValueError: a factor <= 1, or fewer than 4 updates a run.
        OverBudget: ``budget_s`` is too short for even the shortest plan.
        DataError: no frames, or the crop is larger than the frames (``CropSampler``).
        FloatingPointError: a run diverged (its loss is not finite).
    """
    big_updates = small_updates if big_updates is None else big_updates
    if not factors or min(factors) <= 1 or small_updates < 4 or big_updates < 4:
        raise ValueError(f"the quality probe needs factors > 1 and >= 4 updates a run; got factors={list(factors)}, "
                         f"small_updates={small_updates}, big_updates={big_updates}")
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    t0 = time.perf_counter()
    run = _Runs(cfg, frames, device, build, None if budget_s is None else t0 + budget_s, progress)
    asked = (small_updates, tuple(factors))
    if budget_s is not None:
        small_updates, factors = run.plan(small_updates, factors)
        big_updates = min(big_updates, small_updates)
    run.expected = small_updates * (1 + sum(k * (1 + 1 / k) / 2 for k in factors))
    ks = (1, *factors)
    curves = [run.curve(1, small_updates)]
    level = curves[0][-1][1]  # a running minimum: the small run reached it
    curves += [run.curve(k, big_updates, level) for k in factors]
    crossings = [first_crossing(c, level) for c in curves]
    updates = tuple(max(1.0, float(c[-1][0]) if u is None else u) for c, u in zip(curves, crossings))
    batches = tuple(k * cfg.batch_size for k in ks)
    if progress:
        progress("quality", run.done, run.done)
    return QualityProbe(batches, updates, level, fit_critical_batch(batches, updates), tuple(map(tuple, curves)),
                        time.perf_counter() - t0, run.cut or (small_updates, tuple(factors)) != asked)


class _Runs:
    """The quality probe's runs against one deadline (``time.perf_counter`` seconds, None: none), with progress."""

    def __init__(self, cfg: TrainConfig, frames: Sequence[tuple[np.ndarray, np.ndarray]], device: torch.device,
                 build: Callable[[], torch.nn.Module] | None, deadline: float | None,
                 progress: Callable[[str, int, int], None] | None) -> None:
        self.cfg, self.frames, self.device, self.build = cfg, frames, device, build
        self.deadline, self.progress = deadline, progress
        self.costs: dict[str, float] = {}
        self.done, self.expected, self.cut = 0, 0.0, False

    def plan(self, small_updates: int, factors: Sequence[int]) -> tuple[int, tuple[int, ...]]:
        """Time two updates and an evaluation, then fit the runs to the time left (raises :class:`OverBudget`)."""
        from trainer.advise.budget import MIN_QUALITY_UPDATES, plan_quality, quality_cost

        _train_curve(self.cfg, self.frames, self.device, self.build, 1, 2, costs=self.costs)
        left = (self.deadline or 0.0) - time.perf_counter()
        update_s, eval_s = self.costs["update_s"], self.costs["eval_s"]
        planned = plan_quality(left, update_s, eval_s, factors, small_updates, EVALUATIONS)
        if planned is None:
            need = quality_cost(MIN_QUALITY_UPDATES, update_s, eval_s, [min(factors)], EVALUATIONS)
            raise OverBudget(f"the quality probe needs about {need:.0f} s here ({update_s:.2f} s an update, "
                             f"{eval_s:.2f} s an evaluation) and {max(left, 0.0):.0f} s of the budget was left: not "
                             "run (a longer --probe-budget runs it)")
        return planned

    def curve(self, k: int, updates: int, stop_at: float | None = None) -> list[tuple[int, float]]:
        """:func:`_train_curve` of ``k`` micro-batches an update, reporting progress, stopping at the deadline."""
        def tick() -> None:
            self.done += k
            if self.progress:
                self.progress("quality", self.done, max(int(self.expected), self.done))

        cut: list[bool] = []
        out = _train_curve(self.cfg, self.frames, self.device, self.build, k, updates, stop_at,
                           deadline=self.deadline, tick=tick, cut=cut, costs=dict(self.costs))
        self.cut = self.cut or bool(cut)
        return out


def probe_frames(cfg: TrainConfig, count: int = PROBE_FRAMES) -> list[tuple[np.ndarray, np.ndarray]]:
    """Up to ``count`` pairs of ``cfg``'s Input and Ground Truth sequences, evenly spread over the shot, decoded
    ((H, W, 3) float16 each; ``trainer.data.sequences.load_pairs``).

    Raises:
        DataError: what ``trainer.data.sequences.pair_frames`` and ``load_pairs`` raise (missing or unpaired frames).
    """
    from trainer.data.sequences import load_pairs, pair_frames

    pairs = pair_frames(cfg.input_dir, cfg.target_dir)
    step = max(1, math.ceil(len(pairs) / count))
    return load_pairs(pairs[::step][:count], scale=cfg.scale, channels=cfg.channels)


def _train_curve(cfg: TrainConfig, frames: Sequence[tuple[np.ndarray, np.ndarray]], device: torch.device,
                 build: Callable[[], torch.nn.Module] | None, k: int, updates: int,
                 stop_at: float | None = None, *, deadline: float | None = None, tick: Callable[[], None] | None = None,
                 cut: list[bool] | None = None, costs: dict[str, float] | None = None) -> list[tuple[int, float]]:
    """A run of up to ``updates`` updates of ``k`` accumulated micro-batches, ending once its eval loss is at or
    below ``stop_at``; its running-minimum eval curve (about :data:`EVALUATIONS` evaluations).

    With ``deadline`` (``time.perf_counter`` seconds) an update starts only if the last one ends before it (else
    ``True`` is appended to ``cut`` and the curve ends with an evaluation); ``tick()`` follows every update;
    ``costs`` receives the last update's and evaluation's seconds (``update_s``, ``eval_s``).
    """
    from trainer.learn.model import build_model
    from trainer.learn.precision import memory_format, resolve_precision
    from trainer.learn.schedule import build_optimizer, effective_lr

    precision, fmt = resolve_precision(cfg.precision, device), memory_format(cfg.memory_format)
    torch.manual_seed(cfg.seed)
    net = build() if build else build_model(cfg.model_size, cfg.architecture_name, scale=cfg.scale,
                                            channels=cfg.channels)
    net = net.to(device, memory_format=fmt)
    peak = effective_lr(cfg, k)
    opt = build_optimizer(cfg, net, peak)  # as trained
    scaler = precision.grad_scaler()
    sampler = CropSampler(frames, cfg.crop_size, cfg.batch_size, seed=cfg.seed, device=device, memory_format=fmt,
                              channels=cfg.channels)
    held = sampler.cut(sampler.coords(0, EVAL_CROPS, stream=EVAL_STREAM))
    costs = {} if costs is None else costs
    t = time.perf_counter()
    curve = [(0, _eval_loss(net, held, precision.autocast))]
    costs["eval_s"] = time.perf_counter() - t
    micro = 0
    for update in range(1, updates + 1):
        if deadline is not None and time.perf_counter() + costs.get("update_s", 0.0) * k > deadline:
            if cut is not None:
                cut.append(True)
            if curve[-1][0] != update - 1:
                curve.append((update - 1, min(curve[-1][1], _eval_loss(net, held, precision.autocast))))
            break
        t = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = peak * min(1.0, 0.1 + 0.9 * update / WARMUP_UPDATES)
        for _ in range(k):
            batch = sampler.batch(micro)
            micro += 1
            with precision.autocast():
                out = net(batch.input)
            scaler.scale(per_crop_l1(out, batch.target).mean() / k).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        costs["update_s"] = (time.perf_counter() - t) / k
        if tick:
            tick()
        if update % max(1, updates // EVALUATIONS) == 0 or update == updates:
            curve.append((update, min(curve[-1][1], _eval_loss(net, held, precision.autocast))))
            if stop_at is not None and curve[-1][1] <= stop_at:
                break
    return curve


@torch.no_grad()
def _eval_loss(net: torch.nn.Module, held, autocast) -> float:
    """Mean L1 of ``net`` on the evaluation crops (``CropBatch``), in chunks of 16 crops."""
    total = 0.0
    for i in range(0, held.input.shape[0], 16):
        with autocast():
            out = net(held.input[i:i + 16])
        total += float(per_crop_l1(out, held.target[i:i + 16]).sum())
    result = total / held.input.shape[0]
    if not math.isfinite(result):
        raise FloatingPointError(f"the quality probe's loss is {result}: the run diverged; try a lower --lr")
    return result

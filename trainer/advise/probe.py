"""The compute probe behind ``cuetrain advise``, and the probe processes it shares with the link probe.

:func:`run_probe` trains the real model on this host for a few iterations at every per-rank batch
``ceil(B/N)`` the table needs, with the trainer's ``--precision`` and ``--memory-format`` and its
crops cut on the device: data + forward + backward, then the optimizer step (the run's Adam or Muon), timed separately
(warm-up iterations dropped, medians kept), in rounds that visit every batch size in turn. It also
times rank 0's contact sheet and checkpoint, and takes the bytes all-reduced per sync from the
parameter shapes (``trainer.gang.compression.sync_payload``). With ``ranks_per_host`` R > 1 it runs R
timing processes at once, as ``cuetrain local --world-size R`` shares one host, and keeps the
slowest. It keeps to a time budget (``ProbeSettings.budget_s``): untimed steps at the smallest and largest batch
plan how many rounds and batch sizes fit, and a step starts only if it ends before the budget
(``trainer.advise.budget``); rank 0 reports progress on the result queue as it goes.

The probe always runs in fresh processes, as every rank is one: a process's allocator history
changes the step time. In a fresh process glibc serves each multi-megabyte activation with a new
``mmap`` (thousands of page faults per step, about 15% of a small-model CPU step here); after a
large buffer has been freed (decoding video, a 16 MiB all-reduce) its raised mmap threshold
serves them from the heap instead, so a probe in a long-lived process would time too fast.

The link probe is :mod:`trainer.advise.link`.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from queue import Empty
from typing import Any, Callable, Iterable, Sequence

import torch

from trainer.advise.budget import ProbeSettings, StepPlan, estimate, median_rse, plan_steps, thin
from trainer.advise.costmodel import Probe
from trainer.core.config import TrainConfig
from trainer.core.channels import ChannelPlan
from trainer.data.crops import CropSampler
from trainer.learn.loss import per_crop_loss

PROBE_FRAMES = 4  # frame pairs loaded for the probe: crop cost does not depend on how many
MAX_PROBE_POINTS = 8  # per-rank batch sizes timed at most; others are interpolated
OUTPUT_REPEATS = 3  # contact sheets and checkpoints timed (median), as the budget allows
#: Share of the time left after the planning steps held back for rank 0's outputs [1].
OUTPUT_SHARE = 0.05
#: Progress messages on the probe's queue are ``(PROGRESS, rank, record)``; results ``(RESULT, rank, value)``.
PROGRESS, RESULT = "progress", "result"

#: ``(phase, done, total)`` -> None: what :func:`run_probe` reports as it goes (``trainer.advise.progress``).
Report = Callable[[str, int, int], None]


def probe_batches(batch_size: int, world_sizes: Iterable[int], max_points: int = MAX_PROBE_POINTS) -> list[int]:
    """Per-rank batches ``ceil(B/N)`` to time for ``world_sizes`` (N <= B), ascending.

    More than ``max_points`` distinct values are thinned to ``max_points``, spread evenly on a log
    scale (always keeping the smallest and largest, ``trainer.advise.budget.thin``); :meth:`Probe.fb_at`
    interpolates the rest.
    """
    return thin(sorted({math.ceil(batch_size / n) for n in world_sizes if 1 <= n <= batch_size}), max_points)


def monotone(points: Sequence[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """Least-squares non-decreasing fit of ``(batch, seconds)`` points (pool adjacent violators).

    More crops never take less time; a dip in measured medians is noise from other work on the host.
    """
    blocks: list[list[float]] = []  # [sum of seconds, count]
    for _, t in sorted(points):
        blocks.append([t, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += n
    fitted = [s / n for s, n in blocks for _ in range(int(n))]
    return tuple((b, t) for (b, _), t in zip(sorted(points), fitted))


def run_probe(cfg: TrainConfig, world_sizes: Iterable[int], settings: ProbeSettings = ProbeSettings(),
              progress: Report | None = None) -> Probe:
    """Time the real training step of ``cfg`` on this host, in ``settings.ranks_per_host`` fresh processes
    (see the module docstring), within ``settings.budget_s`` seconds from this call (``trainer.advise.budget``).

    Runs on CUDA when available (as the trainer does), else on the CPU with ``settings.threads`` torch
    threads per rank. ``progress(phase, done, total)`` is called on this thread as the first process measures
    (phases ``steps`` and ``outputs``; ``total`` is planned measurements).

    Raises:
        DataError: the training data cannot be read or is smaller than the crop.
        RuntimeError: a co-located probe process failed or ran past ``settings.timeout_s``.
    """
    sizes = sorted(set(world_sizes))
    per_host = settings.ranks_per_host
    ctx = mp.get_context("spawn")
    gang = _Gang(ctx.Barrier(per_host), ctx.Value("i", per_host))
    queue: Any = ctx.Queue()
    deadline_unix = time.time() + settings.budget_s  # a wall clock: it crosses into the spawned processes
    started = time.monotonic()
    probes = collect(ctx, _colocated_rank, [(cfg, sizes, settings, deadline_unix, gang, r, queue)
                                             for r in range(per_host)], queue, settings.timeout_s, "probe",
                      progress)
    first = replace(probes[0], seconds=time.monotonic() - started)
    if per_host == 1:
        return first
    return replace(first, fb_s=tuple((b, max(p.fb_at(b) for p in probes)) for b, _ in first.fb_s),
                   optimizer_s=max(p.optimizer_s for p in probes), ranks_per_host=per_host,
                   truncated=any(p.truncated for p in probes))


@dataclass(frozen=True)
class _Gang:
    """Co-located probe processes: start timing together, keep the host busy until all are done."""

    start: Any  # multiprocessing Barrier
    running: Any  # multiprocessing Value("i"): processes still timing


def _colocated_rank(cfg: TrainConfig, sizes: list[int], settings: ProbeSettings, deadline_unix: float, gang: _Gang,
                    rank: int, queue: Any) -> None:
    from trainer.core.allocator import tune_allocator

    tune_allocator()  # as every trainer process does (trainer.cli train)
    report = (lambda phase, done, total: queue.put((PROGRESS, rank, (phase, done, total)))) if rank == 0 else None
    queue.put((RESULT, rank, _probe(cfg, sizes, settings, deadline_unix, gang, report)))


@dataclass
class _Timed:
    """The compute probe's measurements: per batch, ``fb`` seconds of timed steps, and the optimizer's."""

    fb: dict[int, list[float]]
    opt: list[float]
    planning: dict[int, float]  # batch -> data + forward + backward of a planning (untimed) step [s]
    planning_opt: list[float]  # optimizer steps of the planning steps [s]
    truncated: bool = False


def _probe(cfg: TrainConfig, sizes: list[int], settings: ProbeSettings, deadline_unix: float, gang: _Gang,
           report: Report | None = None) -> Probe:
    from trainer.gang.compression import sync_calls, sync_payload
    from trainer.data.sequences import load_pairs, pair_frames
    from trainer.learn.model import build_model, count_parameters
    from trainer.learn.precision import configure_backends, memory_format, resolve_precision
    from trainer.learn.schedule import build_optimizer

    frames = load_pairs(pair_frames(cfg.input_dir, cfg.target_dir)[:PROBE_FRAMES], scale=cfg.scale,
                        channels=cfg.channels)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    old_threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        torch.manual_seed(cfg.seed)
        precision, fmt = resolve_precision(cfg.precision, device), memory_format(cfg.memory_format)
        configure_backends(device)
        net = build_model(cfg.model_size, cfg.architecture_name, scale=cfg.scale, channels=cfg.channels)  # the trainer's
        net = net.to(device, memory_format=fmt)
        opt = build_optimizer(cfg, net, cfg.base_lr)  # as trained
        step = _Step(net, opt, precision.autocast, precision.grad_scaler(), device, cfg.channels, cfg.matte_loss)
        batches = probe_batches(cfg.batch_size, sizes)
        samplers = {b: CropSampler(frames, cfg.crop_size, b, seed=cfg.seed, device=device, memory_format=fmt,
                                   channels=cfg.channels)
                    for b in batches}
        deadline = device_now(device) + deadline_unix - time.time()
        gang.start.wait()
        timed, plan = _time_steps(step, samplers, batches, settings, deadline, report)
        with gang.running.get_lock():  # then keep loading the host until the other probe processes are done
            gang.running.value -= 1
        while gang.running.value > 0 and device_now(device) < deadline:
            step(samplers[plan.batches[-1]], 0)
        sheet_s, ckpt_s = _time_outputs(cfg, net, opt, frames, device, fmt, deadline, report)
    finally:
        torch.set_num_threads(old_threads)
    counted = {b: t for b, t in timed.fb.items() if t}
    fb = counted or {b: [t] for b, t in timed.planning.items()}  # nothing timed in the budget: the planning steps
    shapes = [tuple(p.shape) for p in net.parameters() if p.requires_grad]
    return Probe(model_size=cfg.model_size, parameters=count_parameters(net), crop_size=cfg.crop_size,
                 batch_size=cfg.batch_size, compression=cfg.grad_compression,
                 fb_s=monotone([(b, statistics.median(t)) for b, t in fb.items()]),
                 optimizer_s=statistics.median(timed.opt or timed.planning_opt), contact_sheet_s=sheet_s,
                 checkpoint_s=ckpt_s,
                 contact_sheet_interval=cfg.contact_sheet_interval, checkpoint_interval=cfg.checkpoint_interval,
                 sync_bytes=sync_payload(shapes, cfg.grad_compression),
                 sync_calls=sync_calls(shapes, cfg.grad_compression), log_interval=cfg.log_interval,
                 threads=settings.threads, device=device.type, warmup=plan.warmup, iters=plan.iters,
                 optimizer=cfg.optimizer_name, fb_samples=tuple(len(counted.get(b, ())) for b in sorted(fb)),
                 fb_rse=tuple(median_rse(fb[b]) for b in sorted(fb)), needed_batches=plan.needed,
                 truncated=timed.truncated or len(plan.batches) < plan.needed or plan.iters < settings.iters,
                 budget_s=settings.budget_s)


def _time_steps(step: "_Step", samplers: dict[int, CropSampler], batches: list[int], settings: ProbeSettings,
                deadline: float, report: Report | None) -> tuple[_Timed, StepPlan]:
    """Plan (``trainer.advise.budget.plan_steps``) from untimed steps at the smallest batch (twice) and the largest,
    then time the plan's rounds, each step only if it ends before ``deadline`` (``device_now`` seconds)."""
    lo, hi = batches[0], batches[-1]
    timed = _Timed({b: [] for b in batches}, [], {}, [])
    first, _ = step(samplers[lo], 0)
    timed.planning[lo], opt_s = step(samplers[lo], 0)
    inflation = max(1.0, first / max(timed.planning[lo], 1e-9))  # a first step's extra cost
    if hi != lo and device_now(step.device) + timed.planning[lo] * hi / lo * inflation < deadline:
        timed.planning[hi], opt_s = step(samplers[hi], 0)
        timed.planning[hi] /= inflation
    timed.planning_opt.append(opt_s)
    left = deadline - device_now(step.device)
    plan = plan_steps(batches, {b: t + opt_s for b, t in timed.planning.items()}, left * (1 - OUTPUT_SHARE),
                      settings.warmup, settings.iters)
    last = {b: estimate(timed.planning, b) + opt_s for b in plan.batches}
    done, end = 0, deadline - left * OUTPUT_SHARE
    # Rounds visit every batch size once (1, 2, 4, 8, 1, 2, ...) so a noisy neighbour slows all alike.
    for i in range(plan.warmup + plan.iters):
        for b in plan.batches:
            if device_now(step.device) + last[b] > end:
                timed.truncated = True
                break
            fb_s, opt_s = step(samplers[b], i)
            last[b] = fb_s + opt_s
            if i >= plan.warmup:
                timed.fb[b].append(fb_s)
                timed.opt.append(opt_s)
            done += 1
            if report:
                report("steps", done, plan.steps)
        if timed.truncated:
            break
    return timed, plan


@dataclass(frozen=True)
class _Step:
    """One training step as ``trainer.learn.train`` runs it, with its precision, memory format and loss
    (``trainer.learn.loss.per_crop_loss`` of the run's channels: a matte's BCE and soft IoU cost more than L1)."""

    net: torch.nn.Module
    opt: torch.optim.Optimizer
    autocast: Any  # () -> context manager (trainer.learn.precision.Precision.autocast)
    scaler: torch.amp.GradScaler
    device: torch.device
    plan: ChannelPlan  # the run's channels (TrainConfig.channels): its loss is the trainer's for them
    matte_loss: str  # --matte-loss

    def __call__(self, sampler: CropSampler, step: int) -> tuple[float, float]:
        """(data + forward + backward, optimizer step) seconds."""
        t0 = device_now(self.device)
        batch = sampler.batch(step)  # cut on the device, as the trainer does
        with self.autocast():
            out = self.net(batch.input)
        per_crop = per_crop_loss(out, batch.target, self.plan, self.matte_loss)  # the trainer's loss: (b,) per crop
        self.scaler.scale(per_crop.sum() / sampler.local_batch).backward()
        _ = per_crop.detach().sum()  # the loop's running loss sum
        t1 = device_now(self.device)
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)
        return t1 - t0, device_now(self.device) - t1


def device_now(device: torch.device) -> float:
    """The probes' clock [s]: ``time.perf_counter`` once ``device``'s queued work is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def _time_outputs(cfg: TrainConfig, net: torch.nn.Module, opt: torch.optim.Optimizer, frames: list,
                  device: torch.device, fmt: torch.memory_format, deadline: float,
                  report: Report | None = None) -> tuple[float, float]:
    """Rank 0's training-thread time for one contact sheet and one checkpoint, as ``trainer.learn.train`` does them:
    medians of up to :data:`OUTPUT_REPEATS`, one at least, more while the last one's time fits before ``deadline``."""
    from trainer.learn.run_writer import RunWriter, cpu_copy
    from trainer.record.rundir import RunPaths

    sampler = CropSampler(frames, cfg.crop_size, 1, seed=cfg.seed, device=device, memory_format=fmt,
                              channels=cfg.channels)
    sheets: list[float] = []
    ckpts: list[float] = []
    with tempfile.TemporaryDirectory(prefix="cuetrain-advise-") as tmp:
        paths = RunPaths.of(tmp)
        paths.create()
        writer = RunWriter(paths, True, keep_checkpoints=1)
        try:
            for step in range(1, OUTPUT_REPEATS + 1):
                if sheets and device_now(device) + sheets[-1] + ckpts[-1] > deadline:
                    break
                t0 = device_now(device)
                prev = sampler.preview(step)
                with torch.no_grad():
                    out = net(prev.input)
                writer.contact_sheet(step, prev.input, out, prev.target)
                t1 = device_now(device)
                writer.checkpoint(step, cpu_copy({"model": net.state_dict(), "optimizer": opt.state_dict(),
                                                  "step": step, "config": cfg.to_dict()}))
                t2 = device_now(device)
                writer.flush()  # background encoding and writing: not on the training thread
                sheets.append(t1 - t0)
                ckpts.append(t2 - t1)
                if report:
                    report("outputs", step, OUTPUT_REPEATS)
        finally:
            writer.finish("probe")
    return statistics.median(sheets), statistics.median(ckpts)


def collect(ctx: Any, target: Any, args: list[tuple], queue: Any, timeout_s: float, what: str,
             progress: Report | None = None) -> list[Any]:
    """Start one process per ``args``, gather one ``(RESULT, rank, result)`` each from ``queue``, in rank order;
    ``(PROGRESS, rank, (phase, done, total))`` messages go to ``progress`` on the way."""
    procs = [ctx.Process(target=target, args=a) for a in args]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < len(procs):
            try:
                kind, rank, value = queue.get(timeout=0.5)
                if kind == RESULT:
                    results[rank] = value
                elif progress is not None:
                    progress(*value)
            except Empty:
                failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if failed or time.monotonic() > deadline:
                    raise RuntimeError(f"{what} processes failed (exit codes {failed}) or timed out after "
                                       f"{timeout_s:.0f} s; see the messages above") from None
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [results[r] for r in sorted(results)]

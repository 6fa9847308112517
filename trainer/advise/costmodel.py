"""The scaling model behind ``cuetrain advise``: pure functions of measured figures (no torch, no I/O).

A step of the trainer (``trainer.learn.train``) on N ranks with sync interval k, global batch B:

    step(N, k) = fb(ceil(B / N)) + opt / k + out + allreduce(N) / k + log(N)

- ``fb(b)``: data + forward + backward of ``b`` crops on one rank (measured by the probe; the
  slowest rank has ``ceil(B/N)`` crops, ``trainer.data.crops.rank_slice``);
- ``opt``: one optimizer step (Adam, or Muon with Adam: the run's ``--optimizer``; measured), once per ``k`` steps;
- ``out``: rank 0's contact sheets and checkpoints, amortised over their intervals (measured);
  the other ranks wait for rank 0 at the next all-reduce;
- ``allreduce(N)``: ring all-reduce of the gradient payload ``S`` bytes in ``c`` calls over links
  of bandwidth ``beta`` with per-hop latency ``alpha``: ``2 (N-1)/N S / beta + c 2 (N-1) alpha``
  (Patarasuk & Yuan 2009; zero for N = 1, which runs without DDP);
- ``log(N)``: the 2-value loss all-reduce every ``log_interval`` steps.

Ranks that share a host. With L ranks per frame (``cuetrain submit --ranks-per-frame L``), frame f
holds ranks ``f*L .. f*L+L-1`` on one host, so the ring (in rank order) has ``H = N/L`` hops between
hosts (``inter``: the farm network) and ``N - H`` hops inside a host (``intra``: loopback or shared
memory for gloo, PCIe/NVLink for NCCL). Every one of the ``2 (N-1)`` ring steps sends ``S/N`` over
every hop at once, so a step lasts as long as its slowest hop:
``allreduce(N) = 2 (N-1) max_kind(S / N / beta_kind + c alpha_kind)`` over the hop kinds present
(with L = 1 this is the formula above; with N <= L only ``intra`` is used). Only world sizes that are
multiples of L are predicted (every frame runs L ranks), and the compute probe runs L processes at
once (``Probe.ranks_per_host``), as L ranks share the host's cores.

Images/s = B / step(N, k). Speedup is against 1 rank at sync interval 1; efficiency =
speedup / N. The model ignores DDP's overlap of bucket all-reduces with the backward pass, so it
errs on the slow side for models with several buckets.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Iterable, Sequence

#: Link assumed when none is measured: 10 Gb/s Ethernet, the common render-farm host link.
DEFAULT_BANDWIDTH_GBPS = 10.0
#: Per-hop latency assumed when none is measured [s]: a gloo TCP message between farm hosts
#: (``cuetrain advise link`` measures it; loopback here measures about 0.05-0.1 ms).
DEFAULT_LATENCY_S = 100e-6
#: Link between ranks of one frame (one host) assumed when none is measured [Gb/s]: gloo TCP over
#: loopback, which ``cuetrain advise --measure-link`` measures; NCCL over PCIe/NVLink is faster.
DEFAULT_INTRA_BANDWIDTH_GBPS = 20.0
#: Per-hop latency between ranks of one host assumed when none is measured [s].
DEFAULT_INTRA_LATENCY_S = 50e-6


@dataclass(frozen=True)
class Probe:
    """What a short probe measured on one host (``trainer.advise.advisor.run_probe``), for one configuration.

    Attributes:
        model_size: ``small``, ``medium`` or ``large``.
        parameters: trainable parameters [count].
        crop_size: crop side [pixels].
        batch_size: global batch B [crops per step].
        compression: gradient compression (``none``, ``fp16``, ``powersgd``).
        fb_s: ``(per-rank batch, seconds)`` pairs, ascending: median data + forward + backward time.
        optimizer_s: median optimizer step [s] (of ``optimizer``).
        contact_sheet_s: rank 0's training-thread time for one contact sheet [s] (encoding and
            writing happen on a background thread, ``trainer.learn.run_writer``).
        checkpoint_s: rank 0's training-thread time for one checkpoint (the CPU copy) [s].
        contact_sheet_interval, checkpoint_interval: steps between them [steps].
        sync_bytes: gradient payload all-reduced per sync [bytes] (PowerSGD: after its warm-up).
        sync_calls: ``all_reduce`` calls per sync [count].
        log_interval: steps between loss all-reduces [steps].
        threads: torch threads per rank during the probe.
        ranks_per_host: probe processes timed at once on the host (ranks sharing it, as with
            ``cuetrain local``; 1 for farm hosts running one rank each).
        device: ``cpu`` or ``cuda``.
        warmup: untimed iterations per batch size.
        iters: timed iterations per batch size (the median is kept).
        optimizer: the optimizer timed, as trained (``TrainConfig.optimizer_name``): ``adam`` or ``muon``.
        fb_samples: timed steps behind each ``fb_s`` median [steps] (empty: not recorded).
        fb_rse: relative standard error of each ``fb_s`` median [1], None for one step
            (``trainer.advise.budget.median_rse``).
        needed_batches: per-rank batches the table needs [count]; more than ``len(fb_s)`` when the budget
            left some to interpolation.
        truncated: the time budget cut the asked measurements short (``trainer.advise.budget``).
        budget_s: the probe's time budget [s] (0: none recorded); seconds: its wall time [s].
    """

    model_size: str
    parameters: int
    crop_size: int
    batch_size: int
    compression: str
    fb_s: tuple[tuple[int, float], ...]
    optimizer_s: float
    contact_sheet_s: float
    checkpoint_s: float
    contact_sheet_interval: int
    checkpoint_interval: int
    sync_bytes: int
    sync_calls: int
    log_interval: int
    threads: int = 1
    ranks_per_host: int = 1
    device: str = "cpu"
    warmup: int = 0
    iters: int = 0
    optimizer: str = "adam"
    fb_samples: tuple[int, ...] = ()
    fb_rse: tuple[float | None, ...] = ()
    needed_batches: int = 0
    truncated: bool = False
    budget_s: float = 0.0
    seconds: float = 0.0

    @property
    def outputs_s(self) -> float:
        """Rank 0's contact sheets and checkpoints, amortised over their intervals [s/step]."""
        return self.contact_sheet_s / self.contact_sheet_interval + self.checkpoint_s / self.checkpoint_interval

    def fb_at(self, batch: int) -> float:
        """Data + forward + backward seconds for ``batch`` crops: measured, or linearly interpolated
        (extrapolated from the two nearest points outside the measured range)."""
        xs = [b for b, _ in self.fb_s]
        ys = [t for _, t in self.fb_s]
        if not xs:
            raise ValueError("the probe measured no batch sizes")
        if len(xs) == 1:
            return ys[0] * batch / xs[0]
        i = min(max(bisect.bisect_left(xs, batch), 1), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return max(0.0, y0 + (y1 - y0) * (batch - x0) / (x1 - x0))

    def fb_support(self, batch: int) -> tuple[int, float | None, bool]:
        """What :meth:`fb_at` rests on at ``batch``: ``(timed steps, relative standard error, measured)``; an
        interpolated figure takes the fewer steps and the larger error of its two neighbours (None: unknown)."""
        xs = [b for b, _ in self.fb_s]
        if len(self.fb_samples) != len(xs) or len(self.fb_rse) != len(xs) or not xs:
            return 0, None, batch in xs
        if batch in xs:
            i = xs.index(batch)
            return self.fb_samples[i], self.fb_rse[i], True
        i = min(max(bisect.bisect_left(xs, batch), 1), len(xs) - 1)
        near = [j for j in {i - 1, i} if 0 <= j < len(xs)]
        errors = [self.fb_rse[j] for j in near]
        return (min(self.fb_samples[j] for j in near), None if None in errors else max(errors), False)


@dataclass(frozen=True)
class Link:
    """The network between ranks.

    Attributes:
        bandwidth_gbps: per-link bandwidth [Gb/s, 1e9 bits per second].
        latency_s: per-hop latency of one all-reduce message [s].
        source: how it was obtained, e.g. ``stated`` or ``measured: loopback``.
    """

    bandwidth_gbps: float
    latency_s: float
    source: str = "stated"


@dataclass(frozen=True)
class Prediction:
    """Predicted throughput of one (world size, sync interval).

    Attributes:
        world_size: ranks N.
        sync_interval: steps between gradient all-reduces k.
        per_rank_batch: crops on the busiest rank, ceil(B / N).
        compute_s: forward/backward/optimizer/outputs per step [s].
        comm_s: all-reduce time per step, amortised over k [s].
        step_s: compute_s + comm_s [s].
        images_per_s: B / step_s [crops/s].
        speedup: images_per_s / images/s of 1 rank at k = 1.
        efficiency: speedup / N.
        ranks_per_frame: ranks sharing one host (frame) L.
        timed_steps: timed steps behind the compute figure at ``per_rank_batch`` [steps] (interpolated: the fewer
            of its two neighbours'; 0 when not recorded).
        rel_error: relative standard error of ``images_per_s`` from the compute figure's spread [1], None unknown.
        interpolated: the compute figure at ``per_rank_batch`` was interpolated, not timed.
    """

    world_size: int
    sync_interval: int
    per_rank_batch: int
    compute_s: float
    comm_s: float
    step_s: float
    images_per_s: float
    speedup: float
    efficiency: float
    ranks_per_frame: int = 1
    timed_steps: int = 0
    rel_error: float | None = None
    interpolated: bool = False

    @property
    def frames(self) -> int:
        """Frames (hosts) the gang takes: ``world_size / ranks_per_frame``."""
        return self.world_size // self.ranks_per_frame


def allreduce_seconds(world_size: int, payload_bytes: float, calls: int, bandwidth_gbps: float,
                      latency_s: float) -> float:
    """Ring all-reduce time [s]: ``2 (N-1)/N x payload / bandwidth + calls x 2 (N-1) x latency``."""
    if world_size <= 1:
        return 0.0
    hops = 2 * (world_size - 1)
    return hops / world_size * payload_bytes * 8 / (bandwidth_gbps * 1e9) + calls * hops * latency_s


def shared_host_allreduce_seconds(world_size: int, ranks_per_host: int, payload_bytes: float, calls: int,
                                  inter: Link, intra: Link) -> float:
    """Ring all-reduce time [s] of ``world_size`` ranks in rank order, ``ranks_per_host`` consecutive ranks per
    host: ``2 (N-1) x max(S / N / beta + c alpha)`` over the hop kinds present (module doc). Equals
    :func:`allreduce_seconds` over ``inter`` when ``ranks_per_host`` is 1."""
    if world_size <= 1:
        return 0.0
    hosts = math.ceil(world_size / ranks_per_host)
    kinds = ([inter] if hosts > 1 else []) + ([intra] if world_size > hosts else [])
    per_step = max(payload_bytes * 8 / world_size / (k.bandwidth_gbps * 1e9) + calls * k.latency_s for k in kinds)
    return 2 * (world_size - 1) * per_step


def _step(probe: Probe, n: int, k: int, inter: Link, intra: Link, per_host: int) -> tuple[int, float, float]:
    b = math.ceil(probe.batch_size / n)
    compute = probe.fb_at(b) + probe.optimizer_s / k + probe.outputs_s
    comm = (shared_host_allreduce_seconds(n, per_host, probe.sync_bytes, probe.sync_calls, inter, intra) / k
            + shared_host_allreduce_seconds(n, per_host, 16, 1, inter, intra) / probe.log_interval)
    return b, compute, comm


def predict(probe: Probe, world_sizes: Iterable[int], sync_intervals: Iterable[int],
            bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS, latency_s: float = DEFAULT_LATENCY_S, *,
            ranks_per_frame: int = 1, intra: Link | None = None) -> list[Prediction]:
    """Predictions for every (world size, sync interval), world sizes ascending, then intervals.

    World sizes above the global batch are left out (every rank needs at least one crop), and so are
    those that are not multiples of ``ranks_per_frame`` (every frame runs that many ranks).

    Args:
        bandwidth_gbps, latency_s: the link between hosts [Gb/s], [s].
        ranks_per_frame: ranks sharing one host, L.
        intra: the link between ranks of one host (default :data:`DEFAULT_INTRA_BANDWIDTH_GBPS`,
            :data:`DEFAULT_INTRA_LATENCY_S`).

    Raises:
        ValueError: a world size, interval or ranks_per_frame below 1, or a bandwidth that is not positive.
    """
    sizes, intervals = sorted(set(world_sizes)), sorted(set(sync_intervals))
    if not sizes or not intervals or sizes[0] < 1 or intervals[0] < 1 or ranks_per_frame < 1:
        raise ValueError(f"world sizes {sizes}, sync intervals {intervals} and ranks per frame {ranks_per_frame} "
                         "must be non-empty and >= 1")
    intra = intra or Link(DEFAULT_INTRA_BANDWIDTH_GBPS, DEFAULT_INTRA_LATENCY_S, "assumed")
    if not bandwidth_gbps > 0 or latency_s < 0 or not intra.bandwidth_gbps > 0 or intra.latency_s < 0:
        raise ValueError(f"bandwidths {bandwidth_gbps}, {intra.bandwidth_gbps} Gb/s must be > 0 and latencies "
                         f"{latency_s}, {intra.latency_s} s >= 0")
    link = Link(bandwidth_gbps, latency_s)
    _, c1, m1 = _step(probe, 1, 1, link, intra, ranks_per_frame)
    base = probe.batch_size / (c1 + m1)
    out = []
    for n in sizes:
        if n > probe.batch_size or n % ranks_per_frame:
            continue
        for k in intervals:
            b, compute, comm = _step(probe, n, k, link, intra, ranks_per_frame)
            ips = probe.batch_size / (compute + comm)
            steps, rse, measured = probe.fb_support(b)
            error = None if rse is None else rse * probe.fb_at(b) / (compute + comm)
            out.append(Prediction(n, k, b, compute, comm, compute + comm, ips, ips / base, ips / base / n,
                                  ranks_per_frame, steps, error, not measured))
    return out


def recommend(predictions: Sequence[Prediction], min_efficiency: float = 0.7) -> Prediction:
    """The advised setting: among those with efficiency >= ``min_efficiency``, the fewest ranks and
    then the smallest sync interval whose images/s is within 5% of the best such throughput.

    Fewer machines leave the farm for others; a smaller interval keeps the effective batch (and
    the tuned learning rate) closer to what was chosen. 1 rank always qualifies.

    Raises:
        ValueError: no predictions.
    """
    if not predictions:
        raise ValueError("no predictions to choose from")
    ok = [p for p in predictions if p.efficiency >= min_efficiency] or [min(predictions, key=lambda p: p.world_size)]
    best = max(p.images_per_s for p in ok)
    near = [p for p in ok if p.images_per_s >= 0.95 * best]
    return min(near, key=lambda p: (p.world_size, p.sync_interval))


def format_table(predictions: Sequence[Prediction], chosen: Prediction | None = None) -> str:
    """Text table: one row per world size, images/s and efficiency per sync interval; ``*`` marks ``chosen``.

    ``timed`` is the timed steps behind a row's compute figure (``interp``: interpolated between timed batches)
    and ``+-`` the relative standard error of its images/s (``Prediction.rel_error``; ``-`` unknown).
    """
    sizes = sorted({p.world_size for p in predictions})
    intervals = sorted({p.sync_interval for p in predictions})
    by = {(p.world_size, p.sync_interval): p for p in predictions}
    shared = any(p.ranks_per_frame > 1 for p in predictions)
    hosts = f" {'frames':>6}" if shared else ""
    head = (f"{'ranks':>5}{hosts} {'crops/rank':>10} {'timed':>6} {'+-':>6} |"
            + "|".join(f"{f'sync {k}':^19}" for k in intervals))
    sub = (f"{'':>5}{' ' * len(hosts)} {'':>10} {'':>6} {'':>6} |"
           + "|".join(f"{'images/s':>10} {'eff':>6}  " for _ in intervals))
    lines = [head, sub, "-" * len(head)]
    for n in sizes:
        cells = []
        for k in intervals:
            p = by.get((n, k))
            mark = "*" if p is not None and p == chosen else " "
            cells.append(f"{p.images_per_s:>10.1f} {p.efficiency:>6.2f} {mark}" if p else f"{'-':>10} {'-':>6}  ")
        first = by[(n, intervals[0])]
        frames = f" {first.frames:>6}" if shared else ""
        timed = "interp" if first.interpolated else str(first.timed_steps)
        error = "-" if first.rel_error is None else f"{first.rel_error:.1%}"
        lines.append(f"{n:>5}{frames} {first.per_rank_batch:>10} {timed:>6} {error:>6} |" + "|".join(cells))
    return "\n".join(lines)


def recommendation_line(chosen: Prediction, min_efficiency: float) -> str:
    """One sentence naming the advised world size and sync interval."""
    return (f"recommended: {chosen.world_size} rank(s), sync interval {chosen.sync_interval}: "
            f"{chosen.images_per_s:.1f} images/s, {chosen.speedup:.2f}x one rank, efficiency "
            f"{chosen.efficiency:.2f} (fewest ranks within 5% of the best setting with efficiency "
            f">= {min_efficiency:g})"
            + (f"; {chosen.frames} frame(s) x {chosen.ranks_per_frame} ranks" if chosen.ranks_per_frame > 1 else ""))

"""The advisor's time budget: how the probe plans its measurements to fit it, and how sure its answer is (no torch).

``cuetrain advise --probe-budget 90s`` gives the probe a wall-clock budget (:attr:`ProbeSettings.budget_s`). The
compute probe (``trainer.advise.probe``) first times one untimed step at the smallest and the largest per-rank batch
(two at the smallest: the second over the first is the warm-up's inflation, taken off the largest), estimates every
batch's step by straight lines between them (:func:`estimate`), and :func:`plan_steps` picks what fits: every batch
with the asked warm-up and timed iterations; else one warm-up round and fewer timed ones (at least
:data:`MIN_TIMED`); else fewer batches (thinned on a log scale, the ends kept, :func:`thin`), the others interpolated.
The probe then starts a step only if its last time (or the estimate) ends before the deadline, so it never overruns
the budget by more than one measurement. The quality probe (``trainer.advise.critical_batch``) plans its run length
the same way (:func:`plan_quality`).

How sure: each figure is the median of ``n`` timed steps; its relative standard error is ``1.2533 sigma / (sqrt(n)
median)`` (the median's asymptotic standard error for normal data, ``sqrt(pi/2) sigma / sqrt(n)``: Kenney & Keeping,
"Mathematics of Statistics", 1962, sect. 13.13), with ``sigma = 1.4826 MAD`` (the median absolute deviation scaled to
a normal's standard deviation: a step slowed by a neighbour's burst should not make every figure "rough", as the
sample standard deviation does). :func:`probe_confidence` turns the counts, the worst error and whether
the budget cut the plan short into one plain statement.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: Default budget of the whole probe [s]: with the parent's imports (~5-20 s) ``cuetrain advise`` ends within 120 s.
DEFAULT_PROBE_BUDGET_S = 90.0
#: Fewest timed steps per batch a plan settles for before it measures fewer batches [steps].
MIN_TIMED = 3
#: Relative standard error up to which a figure is called good, then fair [1].
GOOD_RSE, FAIR_RSE = 0.05, 0.15
#: Median's standard error over the standard deviation, times sqrt(n): sqrt(pi / 2) (module doc).
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)
#: A normal distribution's standard deviation over its median absolute deviation: 1 / Phi^-1(3/4).
MAD_TO_SIGMA = 1.4826
#: The quality probe's run at the config's batch trains at least this many updates, or the probe is skipped
#: (its learning-rate warm-up alone is 20 updates, ``trainer.advise.critical_batch.WARMUP_UPDATES``) [updates].
MIN_QUALITY_UPDATES = 40


@dataclass(frozen=True)
class ProbeSettings:
    """How the compute probe runs (``cuetrain advise``'s flags of the same names).

    Attributes:
        threads: torch threads per rank [threads], >= 1.
        warmup: untimed iterations per batch size asked for [steps], >= 0.
        iters: timed iterations per batch size asked for [steps], >= 1; fewer when the budget is short.
        ranks_per_host: probe processes timed at once (ranks sharing a host), >= 1.
        budget_s: wall-clock budget of the probe from its start, process start-up included [s], > 0.
        timeout_s: hard limit after which the probe processes are killed and it fails [s], > 0.

    Raises:
        ValueError: a value out of range (named).
    """

    threads: int = 1
    warmup: int = 3
    iters: int = 10
    ranks_per_host: int = 1
    budget_s: float = DEFAULT_PROBE_BUDGET_S
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if self.threads < 1 or self.warmup < 0 or self.iters < 1 or self.ranks_per_host < 1:
            raise ValueError(f"threads={self.threads}, iters={self.iters} and ranks_per_host={self.ranks_per_host} "
                             f"must be >= 1, warmup={self.warmup} >= 0")
        if not self.budget_s > 0 or not self.timeout_s > 0:
            raise ValueError(f"budget_s={self.budget_s} and timeout_s={self.timeout_s} must be > 0 seconds "
                             "(e.g. --probe-budget 90s)")


@dataclass(frozen=True)
class StepPlan:
    """What the compute probe times: ``warmup + iters`` rounds over ``batches``.

    Attributes:
        batches: per-rank batches to time, ascending [crops].
        warmup: untimed rounds [steps].
        iters: timed rounds [steps].
        needed: per-rank batches the table needs [count] (more than ``len(batches)``: the rest is interpolated).
    """

    batches: tuple[int, ...]
    warmup: int
    iters: int
    needed: int

    @property
    def steps(self) -> int:
        """Steps the plan runs [steps]."""
        return len(self.batches) * (self.warmup + self.iters)


def thin(need: Sequence[int], max_points: int) -> list[int]:
    """At most ``max_points`` (>= 1) of the ascending batches ``need``, spread evenly on a log scale, the smallest and
    (for ``max_points`` >= 2) the largest always kept."""
    need = sorted(set(need))
    if len(need) <= max_points:
        return need
    if max_points <= 1:
        return need[:1]
    lo, hi = math.log(need[0]), math.log(need[-1])
    picks = [need[0], need[-1]]
    for i in range(1, max_points - 1):
        target = lo + (hi - lo) * i / (max_points - 1)
        picks.append(min((b for b in need if b not in picks), key=lambda b: abs(math.log(b) - target)))
    return sorted(picks)


def estimate(costs: Mapping[int, float], batch: int) -> float:
    """Seconds of one step at ``batch`` crops from measured ``{batch: seconds}``: the measured value, else the straight
    line through the nearest two (proportional to the batch through one), never below the smallest measured.

    Raises:
        ValueError: ``costs`` is empty.
    """
    if not costs:
        raise ValueError("no step was timed to estimate from")
    if batch in costs:
        return costs[batch]
    xs = sorted(costs)
    if len(xs) == 1:
        return costs[xs[0]] * batch / xs[0]
    below = [x for x in xs if x < batch]
    above = [x for x in xs if x > batch]
    x0, x1 = (below[-1], above[0]) if below and above else ((xs[0], xs[1]) if not below else (xs[-2], xs[-1]))
    y = costs[x0] + (costs[x1] - costs[x0]) * (batch - x0) / (x1 - x0)
    return max(y, min(costs.values()))


def plan_steps(need: Sequence[int], costs: Mapping[int, float], seconds: float, warmup: int, iters: int) -> StepPlan:
    """The most of ``warmup + iters`` rounds over ``need`` that fits ``seconds`` (module doc).

    Args:
        need: per-rank batches the table needs, ascending [crops].
        costs: measured seconds of one step at some batches (``{batch: seconds}``), >= 1 entry.
        seconds: time left for the rounds [s].
        warmup, iters: what was asked [steps].
    """
    need = sorted(set(need))

    def rounds(batches: Sequence[int]) -> int:
        return int(max(0.0, seconds) // max(1e-9, sum(estimate(costs, b) for b in batches)))

    if rounds(need) >= warmup + iters:
        return StepPlan(tuple(need), warmup, iters, len(need))
    short = min(warmup, 1)
    for m in range(len(need), 2, -1):
        batches = thin(need, m)
        if rounds(batches) - short >= MIN_TIMED:
            return StepPlan(tuple(batches), short, min(iters, rounds(batches) - short), len(need))
    ends = thin(need, 2)  # warmed by the planning steps already: no warm-up round
    return StepPlan(tuple(ends), 0, max(1, min(iters, rounds(ends))), len(need))


def median_rse(samples: Sequence[float]) -> float | None:
    """Relative standard error of the median of ``samples`` [1] (module doc: from their median absolute
    deviation); None for fewer than two."""
    if len(samples) < 2:
        return None
    middle = statistics.median(samples)
    sigma = MAD_TO_SIGMA * statistics.median(abs(x - middle) for x in samples)
    return MEDIAN_SE_FACTOR * sigma / math.sqrt(len(samples)) / middle if middle > 0 else None


@dataclass(frozen=True)
class Confidence:
    """How sure the compute figures are, given the time the probe had (``--json``'s ``confidence``).

    Attributes:
        level: ``good`` (every batch timed as asked, errors <= 5%), ``fair`` (<= 15%) or ``rough``.
        measured_batches: per-rank batches timed [count].
        needed_batches: per-rank batches the table needs [count] (the rest interpolated).
        timed_steps: timed steps behind the figures, all batches [steps].
        worst_rse: the largest relative standard error of a median [1], None when a batch had one step or fewer.
        truncated: the budget cut the asked measurements short.
        statement: one plain sentence saying all this.
    """

    level: str
    measured_batches: int
    needed_batches: int
    timed_steps: int
    worst_rse: float | None
    truncated: bool
    statement: str


def probe_confidence(probe: Any) -> Confidence:
    """The :class:`Confidence` of a ``trainer.advise.costmodel.Probe`` (its ``fb_samples``, ``fb_rse``,
    ``needed_batches``, ``truncated``, ``budget_s``)."""
    counts, errors = list(probe.fb_samples), list(probe.fb_rse)
    measured, needed = len(probe.fb_s), max(probe.needed_batches, len(probe.fb_s))
    steps = sum(counts)
    worst = None if not errors or any(e is None for e in errors) else max(errors)
    if probe.truncated or measured < needed or worst is None or worst > FAIR_RSE:
        level = "rough"
    else:
        level = "good" if worst <= GOOD_RSE else "fair"
    spread = f"medians within +-{worst:.0%} (relative standard error)" if worst is not None else \
        "a single timed step behind some figures, so no spread"
    said = (f"measured {measured} of {needed} world sizes' batches ({steps} timed steps, "
            f"{min(counts, default=0)}-{max(counts, default=0)} per batch), {spread}")
    if probe.truncated:
        statement = (f"the {probe.budget_s:.0f} s budget cut the probe short: {said}; the answer is rough "
                     "(a longer --probe-budget measures more)")
    else:
        statement = f"{said}: the answer is {level}"
    return Confidence(level, measured, needed, steps, worst, bool(probe.truncated), statement)


def quality_cost(updates: int, update_s: float, eval_s: float, factors: Sequence[int], evaluations: int) -> float:
    """Expected seconds of the quality probe with ``updates`` updates at the config's batch and ``factors`` (module
    doc of :func:`plan_quality`) [s]; ``update_s`` is one micro-batch update, ``eval_s`` one evaluation [s]."""
    gains = [(1 + 1 / k) / 2 for k in factors]
    return (updates * update_s * (1 + sum(k * g for k, g in zip(factors, gains)))
            + min(evaluations, updates) * eval_s * (1 + sum(gains)))


def plan_quality(seconds: float, update_s: float, eval_s: float, factors: Sequence[int],
                 small_updates: int, evaluations: int) -> tuple[int, tuple[int, ...]] | None:
    """The quality probe's run length and batch factors that fit ``seconds``, or None when even
    :data:`MIN_QUALITY_UPDATES` updates (or ``small_updates``, if fewer) with one factor do not.

    Expected cost (:func:`quality_cost`), with ``B_noise = B``, the bigger runs stopping at the level:
    ``S(kB) / S(B) = (1 + 1/k) / 2`` (``trainer.advise.quality``), so
    ``n update_s (1 + sum k g_k) + E eval_s (1 + sum g_k)``, ``E = min(evaluations, n)``. Fewer updates first, down to
    :data:`MIN_QUALITY_UPDATES`; then the largest factor goes.

    Args:
        seconds: time left [s]; update_s: one update of one micro-batch [s]; eval_s: one evaluation [s].
        factors: the bigger runs' batch multiples; small_updates: the run length asked [updates].
        evaluations: evaluations a run [1].
    """
    kept = sorted(factors)
    while kept:
        for n in range(small_updates, min(MIN_QUALITY_UPDATES, small_updates) - 1, -1):
            if quality_cost(n, update_s, eval_s, kept, evaluations) <= seconds:
                return n, tuple(kept)
        kept.pop()
    return None

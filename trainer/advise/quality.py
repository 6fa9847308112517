"""Steps to a fixed quality against the global batch: McCandlish et al. 2018's S(B) (pure functions, no torch).

"An Empirical Model of Large-Batch Training" (McCandlish, Kaplan, Amodei et al. 2018), eq. 2.11:
the optimizer updates needed to reach a given loss with global batch ``B`` are

    S(B) = S_min (1 + B_noise / B)

where ``S_min`` is the number of updates with an infinite batch and ``B_noise`` the critical batch, fitted by
the advisor's quality probe (``trainer.advise.critical_batch``). The simple noise scale ``B_simple`` a run measures
while training (``trainer.learn.noise_scale``) is only a noisy lower bound on it (1.5x-15x below on two clips,
docs/scaling.md), so speedups from it are lower bounds. Below
``B_noise`` doubling the batch almost halves the updates; far above it, more crops per update buy
almost nothing. Combined with the advisor's step-time model (``trainer.advise.costmodel``), the time
to quality is ``S(B) x step_time(B)``.
"""

from __future__ import annotations

from typing import Mapping, Sequence


def steps_to_quality(s_min: float, b_noise: float, batch: float) -> float:
    """``S(B) = S_min (1 + B_noise / B)`` [optimizer updates] (eq. 2.11).

    Args:
        s_min: updates to the quality with an infinite batch [updates], > 0.
        b_noise: the critical batch (the quality probe's; B_simple gives a lower bound) [crops], >= 0.
        batch: global batch per optimizer update [crops], > 0.

    Raises:
        ValueError: a value out of range (named).
    """
    if not s_min > 0 or not b_noise >= 0 or not batch > 0:
        raise ValueError(f"S(B) needs s_min > 0, b_noise >= 0, batch > 0; got {s_min}, {b_noise}, {batch}")
    return s_min * (1.0 + b_noise / batch)


def least_squares_in_inverse_batch(batches: Sequence[float], steps: Sequence[float]) -> tuple[float, float]:
    """The least-squares line ``steps = a + b / B`` through the points, unchecked: ``(a, b)`` [updates,
    updates x crops]; S(B) has ``a = S_min`` and ``b = S_min B_noise`` (:func:`fit_steps_curve` checks them).

    Raises:
        ValueError: fewer than two distinct batches, or the lengths differ.
    """
    if len(batches) != len(steps) or len(set(batches)) < 2:
        raise ValueError(f"need >= 2 distinct batches with one step count each, got {list(batches)}, {list(steps)}")
    xs = [1.0 / float(b) for b in batches]
    n = len(xs)
    mx, my = sum(xs) / n, sum(steps) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, steps)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def fit_steps_curve(batches: Sequence[float], steps: Sequence[float]) -> tuple[float, float]:
    """Least-squares fit of ``S(B) = S_min + S_min B_noise / B`` (linear in ``1/B``) to measured points.

    Args:
        batches: global batches [crops], at least two distinct values.
        steps: updates each batch needed to reach the same quality [updates].

    Returns:
        ``(S_min, B_noise)`` [updates, crops].

    Raises:
        ValueError: fewer than two distinct batches, lengths differ, or the fit is not a decreasing curve
            (S_min <= 0 or B_noise < 0: the points are too noisy to fit).
    """
    s_min, slope = least_squares_in_inverse_batch(batches, steps)
    if not s_min > 0 or slope < 0:
        raise ValueError(f"S(B) fit gives S_min={s_min:.3g}, S_min*B_noise={slope:.3g}: not a decreasing curve")
    return s_min, slope / s_min


def time_to_quality_speedup(s_min: float, b_noise: float, batch: float, step_s: float,
                            base_batch: float, base_step_s: float) -> float:
    """How many times sooner ``batch`` at ``step_s`` seconds per update reaches the quality than
    ``base_batch`` at ``base_step_s`` [1]: ``S(base) base_step_s / (S(batch) step_s)``.

    Raises:
        ValueError: non-positive step times, or what :func:`steps_to_quality` raises.
    """
    if not step_s > 0 or not base_step_s > 0:
        raise ValueError(f"step times must be > 0 seconds, got {step_s}, {base_step_s}")
    return (steps_to_quality(s_min, b_noise, base_batch) * base_step_s
            / (steps_to_quality(s_min, b_noise, batch) * step_s))


def prediction_speedups(noise_scale: float, batch: int, rows: Sequence[tuple[int, float]]) -> list[float]:
    """Time-to-quality speedup of each advisor prediction against 1 rank at sync interval 1.

    A prediction at sync interval ``k`` updates once per ``k`` steps of global batch ``batch``, so its
    effective batch is ``k x batch`` crops and an update takes ``k x step_s`` seconds; 1 rank at k = 1
    is the first row with ``k == 1`` of world size 1 (``S_min`` cancels in the ratio).

    Args:
        noise_scale: ``B_noise`` [crops]: the quality probe's critical batch (``trainer.advise.critical_batch``), or
            an earlier run's B_simple (``trainer.learn.noise_scale``), a noisy lower bound on it.
        batch: global batch per step [crops].
        rows: ``(sync_interval, step_s)`` per prediction; the first one is the 1-rank, k = 1 baseline [1, s].

    Raises:
        ValueError: no rows, or what :func:`time_to_quality_speedup` raises.
    """
    if not rows:
        raise ValueError("no predictions to compare")
    base_k, base_step = rows[0]
    return [time_to_quality_speedup(1.0, noise_scale, k * batch, k * step, base_k * batch, base_k * base_step)
            for k, step in rows]


def format_quality_table(speedups: Mapping[tuple[int, int], float], chosen: tuple[int, int] | None = None) -> str:
    """Text table of time-to-quality speedups: one row per world size, one column per sync interval.

    Args:
        speedups: ``{(world_size, sync_interval): speedup}`` against 1 rank at sync interval 1 [1]
            (:func:`prediction_speedups`); a missing pair prints ``-``.
        chosen: ``(world_size, sync_interval)`` to mark with ``*`` (:func:`quality_recommendation`'s), or None.
    """
    sizes = sorted({n for n, _ in speedups})
    intervals = sorted({k for _, k in speedups})
    head = f"{'ranks':>5} |" + "|".join(f"{f'sync {k}':>9} " for k in intervals)
    rows = [head, "-" * len(head)]
    for n in sizes:
        cells = [f"{speedups[n, k]:>8.2f}x" if (n, k) in speedups else f"{'-':>9}" for k in intervals]
        rows.append(f"{n:>5} |" + "|".join(c + ("*" if (n, k) == chosen else " ") for c, k in zip(cells, intervals)))
    return "\n".join(rows)


def quality_recommendation(rows: Sequence[tuple[int, int, float]], tolerance: float = 0.05) -> tuple[int, int, str]:
    """The setting to recommend for time to quality: the fewest ranks, then the shortest sync interval, whose
    speedup is within ``tolerance`` of the best: the world size that minimises the time to the same quality, not
    the one that maximises images/s (docs/scaling.md, "Time to quality: the noise scale and the quality probe").

    Args:
        rows: ``(world_size, sync_interval, speedup)`` per prediction, speedups against 1 rank at sync 1 [1].
        tolerance: fraction of the best speedup a setting may fall short by [1].

    Returns:
        ``(world_size, sync_interval, line)``: the line says when more ranks stop helping.

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("no predictions to recommend from")
    best = max(s for _, _, s in rows)
    n, k, s = min((r for r in rows if r[2] >= (1.0 - tolerance) * best), key=lambda r: (r[0], r[1]))
    line = (f"recommended for time to quality: {n} rank(s), sync interval {k}: the same quality {s:.2f}x sooner "
            "than 1 rank")
    if max(r[0] for r in rows) > n:
        line += (f"; past {n} rank(s) the same quality takes more compute and is not sooner (at most "
                 f"{best / s:.2f}x, within {tolerance:.0%})")
    return n, k, line

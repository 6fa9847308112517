"""``cuetrain advise``: how many machines? A short measured probe plus the scaling model.

Usage::

    cuetrain advise --input IN --target GT [train args] [--max-world-size 8] [--sync-intervals 1 2 4 8]
                    [--bandwidth-gbps 10 --latency-us 100 | --measure-link] [--ranks-per-frame 1]
                    [--intra-bandwidth-gbps 20 --intra-latency-us 50] [--quality-probe | --noise-scale CROPS]
                    [--probe-budget 90s] [--progress bar|json|none]
    cuetrain advise link [--link-mb 16] [--repeats 5]

The probe (``trainer.advise.probe.run_probe``) times the real training step on this host; the
link is stated (``--bandwidth-gbps``, ``--latency-us``; defaults in ``trainer.advise.costmodel``) or
measured by ``cuetrain advise link`` (``measure_link``): run as two ranks of a gang (two farm
frames, or any two hosts with ``COPYCAT_*`` set) it measures the network between them; alone it
measures two local processes over loopback. The model, recommendation and table are
``trainer.advise.costmodel``; this module is the command line, and re-exports the API for the GUI:
``run_probe`` (on a worker thread: it takes seconds), then ``predict``, ``recommend``,
``format_table``.

``--ranks-per-frame L`` predicts frames of L ranks on one host, as ``cuetrain submit --ranks-per-frame
L`` runs them: world sizes L, 2L, ...; the probe times L processes at once; links inside a host
(``--intra-*``, or measured over loopback with ``--measure-link``) and between hosts (``--bandwidth-gbps``,
``--latency-us``) are modelled apart (``trainer.advise.costmodel``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from typing import Any, Sequence

from trainer.advise.costmodel import (DEFAULT_BANDWIDTH_GBPS, DEFAULT_INTRA_BANDWIDTH_GBPS, DEFAULT_INTRA_LATENCY_S,
                                  DEFAULT_LATENCY_S, Link, Prediction, Probe,
                                  allreduce_seconds, format_table, predict, recommend, recommendation_line)
from trainer.advise.budget import DEFAULT_PROBE_BUDGET_S, ProbeSettings, probe_confidence
from trainer.advise.link import measure_link
from trainer.advise.probe import run_probe
from trainer.advise.progress import JsonProgress, TerminalProgress
from trainer.core.budget import BudgetError, parse_time_budget
from trainer.core.config_args import add_train_arguments, config_from_args
from trainer.core.rankmemory import BUFFERS_MB, PROCESS_MB, rank_memory_mb

__all__ = ["Probe", "Prediction", "Link", "predict", "recommend", "format_table", "run_probe", "measure_link",
           "describe_probe", "describe_link", "memory_line", "main", "Basis", "basis_of"]

QUALITY_PROBE = "quality probe"  # --json's noise_scale_source when --quality-probe measured the critical batch
NOISE_SCALE_FLAG = "--noise-scale"  # --json's noise_scale_source when it is an earlier run's B_simple
#: How the probe lines name ``Probe.optimizer`` (``TrainConfig.optimizer_name``, as ``build_optimizer`` trains it).
OPTIMIZER_NAMES = {"adam": "Adam", "muon": "Muon"}
#: Share of ``--probe-budget`` the compute probe gets when ``--quality-probe`` trains after it [1].
COMPUTE_SHARE_WITH_QUALITY = 0.4

# ----------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cuetrain advise",
        description="Predict images/s and scaling efficiency for 1..N ranks and sync intervals from a short "
                    "probe on this host. 'cuetrain advise link' measures the network between two ranks.")
    add_train_arguments(p)
    g = p.add_argument_group("advisor")
    g.add_argument("--max-world-size", type=int, default=8, help="largest world size in the table (default 8)")
    g.add_argument("--sync-intervals", type=int, nargs="+", default=[1, 2, 4, 8],
                   help="sync intervals to compare (default 1 2 4 8)")
    g.add_argument("--bandwidth-gbps", type=float, default=DEFAULT_BANDWIDTH_GBPS,
                   help=f"link bandwidth between farm hosts in Gb/s (default {DEFAULT_BANDWIDTH_GBPS:g})")
    g.add_argument("--latency-us", type=float, default=DEFAULT_LATENCY_S * 1e6,
                   help=f"per-hop all-reduce latency in microseconds (default {DEFAULT_LATENCY_S * 1e6:g})")
    g.add_argument("--measure-link", action="store_true",
                   help="measure the link between 2 local processes over loopback: the link between hosts with "
                        "--ranks-per-frame 1, else the link inside a host (for farm hosts run 'cuetrain advise "
                        "link' as two ranks and pass --bandwidth-gbps and --latency-us)")
    g.add_argument("--link-mb", type=float, default=16.0, help="all-reduce size for --measure-link in MiB (default 16)")
    g.add_argument("--threads", type=int, default=1, help="torch threads per rank in the probe (default 1)")
    g.add_argument("--ranks-per-frame", "--ranks-per-host", dest="ranks_per_host", type=int, default=1,
                   help="ranks sharing one host (cuetrain submit --ranks-per-frame, or cuetrain local): world sizes "
                        "are multiples of it, the probe times this many processes at once, and links inside a host "
                        "are modelled apart from the network (default 1: one rank per farm host)")
    g.add_argument("--intra-bandwidth-gbps", type=float, default=DEFAULT_INTRA_BANDWIDTH_GBPS,
                   help="bandwidth between ranks of one host in Gb/s (default "
                        f"{DEFAULT_INTRA_BANDWIDTH_GBPS:g}; --measure-link measures it over loopback)")
    g.add_argument("--intra-latency-us", type=float, default=DEFAULT_INTRA_LATENCY_S * 1e6,
                   help=f"per-hop latency between ranks of one host in microseconds (default "
                        f"{DEFAULT_INTRA_LATENCY_S * 1e6:g})")
    g.add_argument("--warmup", type=int, default=3, help="untimed probe iterations per batch size (default 3)")
    g.add_argument("--iters", type=int, default=10, help="timed probe iterations per batch size (default 10)")
    g.add_argument("--probe-budget", default=f"{DEFAULT_PROBE_BUDGET_S:.0f}s", metavar="DURATION",
                   help="wall-clock budget of the probe (90s, 3m, 1m30s; default %(default)s, so the command ends "
                        "within two minutes): it plans its measurements to fit (fewer iterations, then fewer batch "
                        "sizes; with --quality-probe shorter trainings) and says how sure the answer is")
    g.add_argument("--progress", choices=("bar", "json", "none"), default="bar",
                   help="progress while probing: 'bar' (default: a bar on stderr, a line per tenth when stderr is not "
                        "a terminal), 'json' (one {\"progress\": ...} line per measurement on stdout: the submit "
                        "dialog's) or 'none'")
    g.add_argument("--min-efficiency", type=float, default=0.7,
                   help="lowest scaling efficiency to recommend (default 0.7)")
    g.add_argument("--noise-scale", type=float, default=None,
                   help="B_simple in crops: the simple gradient noise scale an earlier run measured (its "
                        "metrics.jsonl 'noise_scale'), a noisy lower bound on the critical batch (docs/scaling.md): "
                        "adds the time-to-quality speedup S(B) x step time (trainer/advise/quality.py) to the table "
                        "and --json, as lower bounds; --quality-probe measures the critical batch itself")
    g.add_argument("--quality-probe", action="store_true",
                   help="measure the critical batch for the time-to-quality column: short trainings from the same "
                        "weights at the global batch, 4x and 16x it on the frames (trainer/advise/critical_batch.py; "
                        "about a minute on a CPU, seconds on a GPU); in place of --noise-scale")
    g.add_argument("--json", action="store_true", help="end with one JSON line: the recommendation and every "
                   "prediction (the submit dialog reads it)")
    return p


def _link_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cuetrain advise link",
        description="Measure all-reduce bandwidth and latency. Run it as the ranks of a gang (COPYCAT_* set, e.g. "
                    "two farm frames on two hosts) to measure the network between them; without COPYCAT_* it "
                    "measures two local processes over loopback.")
    p.add_argument("--link-mb", type=float, default=16.0, help="all-reduce size in MiB (default 16)")
    p.add_argument("--repeats", type=int, default=5, help="timed large all-reduces (default 5)")
    p.add_argument("--timeout-s", type=float, default=120.0, help="rendezvous/collective timeout (default 120)")
    return p


def describe_probe(probe: Probe) -> str:
    """The probe's settings and measurements, as printed above the table."""
    fb = ", ".join(f"{b} crop{'s' if b > 1 else ''} {t * 1e3:.1f} ms" for b, t in probe.fb_s)
    optimizer = OPTIMIZER_NAMES.get(probe.optimizer, probe.optimizer)
    return "\n".join([
        f"model {probe.model_size} ({probe.parameters:,} parameters), crop {probe.crop_size} px, global batch "
        f"{probe.batch_size}, gradient compression {probe.compression}",
        f"probe on this host: {probe.device}, {probe.threads} thread(s) per rank, {probe.ranks_per_host} rank(s) "
        f"timed at once, {probe.warmup} warm-up + {probe.iters} timed iterations per batch size, medians",
        f"  data + forward + backward per rank: {fb}",
        f"  {optimizer} step {probe.optimizer_s * 1e3:.1f} ms (once per sync); rank-0 outputs "
        f"{probe.outputs_s * 1e3:.2f} ms/step (contact sheet {probe.contact_sheet_s * 1e3:.1f} ms every "
        f"{probe.contact_sheet_interval} steps, checkpoint {probe.checkpoint_s * 1e3:.1f} ms every "
        f"{probe.checkpoint_interval})",
        f"  gradient sync: {probe.sync_bytes:,} bytes in {probe.sync_calls} all-reduce call(s)"
        + (" (after PowerSGD's plain warm-up)" if probe.compression == "powersgd" else ""),
    ])


def describe_link(link: Link, probe: Probe | None = None) -> str:
    """One line: bandwidth, latency, source, and (with ``probe``) the 2-rank all-reduce time it implies."""
    line = f"link: {link.bandwidth_gbps:.3g} Gb/s, {link.latency_s * 1e6:.0f} us per hop ({link.source})"
    if probe is not None:
        t = allreduce_seconds(2, probe.sync_bytes, probe.sync_calls, link.bandwidth_gbps, link.latency_s)
        line += f"; one 2-rank gradient sync: {t * 1e3:.2f} ms"
    return line


def memory_line(data_cache_mb: int, device: str) -> str:
    """What each rank needs in memory (``trainer.core.rankmemory``): the figure to reserve per rank (``memory_mb``)."""
    gpu = device == "cuda"
    return (f"memory per rank: about {rank_memory_mb(data_cache_mb, gpu)} MiB to reserve (trainer process "
            f"~{PROCESS_MB['gpu' if gpu else 'cpu']} MiB + --data-cache-mb {data_cache_mb} + decode buffers "
            f"{BUFFERS_MB} MiB); the host's decoded copy of the shot is on local scratch, outside it")


def main(argv: Sequence[str]) -> int:
    """``cuetrain advise`` (prints the table) and ``cuetrain advise link``. Returns the exit code."""
    argv = list(argv)
    if argv and argv[0] == "link":
        from trainer.core.envvars import read_dist_env

        a = _link_parser().parse_args(argv[1:])
        env = read_dist_env()
        link = measure_link(env, a.link_mb, a.repeats, a.timeout_s)
        if env.is_main:
            print(describe_link(link))
            print(f"use: cuetrain advise ... --bandwidth-gbps {link.bandwidth_gbps:.3g} "
                  f"--latency-us {link.latency_s * 1e6:.0f}")
        return 0
    parser = _parser()
    ns = parser.parse_args(argv)
    if ns.max_world_size < 1 or min(ns.sync_intervals) < 1:
        parser.error("--max-world-size and --sync-intervals must be >= 1")
    if not ns.bandwidth_gbps > 0 or ns.latency_us < 0 or not ns.intra_bandwidth_gbps > 0 or ns.intra_latency_us < 0:
        parser.error("--bandwidth-gbps and --intra-bandwidth-gbps must be > 0, "
                     "--latency-us and --intra-latency-us >= 0")
    if ns.noise_scale is not None and not ns.noise_scale >= 0:
        parser.error(f"--noise-scale {ns.noise_scale} must be >= 0 crops")
    if ns.noise_scale is not None and ns.quality_probe:
        parser.error("give --noise-scale (an earlier run's) or --quality-probe (measure it now), not both")
    per_frame = ns.ranks_per_host
    if per_frame < 1 or per_frame > ns.max_world_size:
        parser.error(f"--ranks-per-frame {per_frame} must be in 1..--max-world-size ({ns.max_world_size})")
    ns.run_dir = ns.run_dir or tempfile.gettempdir()  # not written: the advisor needs no run directory
    cfg = config_from_args(ns)
    sizes = range(per_frame, ns.max_world_size + 1, per_frame)
    started = time.monotonic()
    budget_s = _budget_seconds(parser, ns.probe_budget)
    if ns.threads < 1 or ns.warmup < 0 or ns.iters < 1:
        parser.error(f"--threads {ns.threads} and --iters {ns.iters} must be >= 1, --warmup {ns.warmup} >= 0")
    settings = ProbeSettings(ns.threads, ns.warmup, ns.iters, per_frame,
                             budget_s * (COMPUTE_SHARE_WITH_QUALITY if ns.quality_probe else 1.0))
    progress = _progress(ns.progress, budget_s)
    try:
        probe = run_probe(cfg, sorted({1, *sizes}), settings=settings, progress=progress)
    finally:
        if progress is not None:
            progress.close()
    link = Link(ns.bandwidth_gbps, ns.latency_us * 1e-6, "stated; 'cuetrain advise link' measures it")
    intra = Link(ns.intra_bandwidth_gbps, ns.intra_latency_us * 1e-6, "stated")
    if ns.measure_link and per_frame == 1:
        link = measure_link(None, ns.link_mb)
    elif ns.measure_link:
        intra = measure_link(None, ns.link_mb)
    predictions = predict(probe, sizes, ns.sync_intervals, link.bandwidth_gbps, link.latency_s,
                          ranks_per_frame=per_frame, intra=intra)
    chosen = recommend(predictions, ns.min_efficiency)
    print(describe_probe(probe))
    print(confidence_line(probe))
    print(describe_link(link, probe))
    if per_frame > 1:
        print(f"inside a host ({per_frame} ranks per frame): " + describe_link(intra).removeprefix("link: "))
    if ns.max_world_size > cfg.batch_size:
        print(f"world sizes above the global batch ({cfg.batch_size}) are left out: every rank needs a crop")
    print()
    print(format_table(predictions, chosen))
    print()
    print(_images_per_s_line(ns, chosen))
    print(memory_line(cfg.data_cache_mb, probe.device))
    every = [p for p in predictions if p.sync_interval == 1]
    if chosen.sync_interval != 1 and every:
        plain = recommend(every, ns.min_efficiency)
        print(f"at sync interval 1 (the effective batch you chose): {plain.world_size} rank(s), "
              f"{plain.images_per_s:.1f} images/s, efficiency {plain.efficiency:.2f}")
    _time_to_quality(ns, cfg, probe, predictions, chosen, budget_s - (time.monotonic() - started),
                     _progress(ns.progress, budget_s))
    return 0


def _budget_seconds(parser: argparse.ArgumentParser, text: str) -> float:
    """``--probe-budget``'s duration [s] (``trainer.core.budget.parse_time_budget``; a deadline is refused)."""
    try:
        budget = parse_time_budget(text)
    except BudgetError as exc:
        parser.error(str(exc).replace("--time-budget", "--probe-budget"))
    if budget.seconds is None:
        parser.error(f"--probe-budget {text!r} must be a duration (e.g. 90s, 3m), not a deadline")
    return budget.seconds


def _progress(kind: str, budget_s: float) -> JsonProgress | TerminalProgress | None:
    """The ``--progress`` reporter (``trainer.advise.progress``), or None for ``none``."""
    if kind == "json":
        return JsonProgress(budget_s)
    return TerminalProgress(budget_s) if kind == "bar" else None


def confidence_line(probe: Probe) -> str:
    """How sure the probe's figures are (``trainer.advise.budget.probe_confidence``), as printed under the probe."""
    return f"how sure: {probe_confidence(probe).statement}"


def _images_per_s_line(ns: argparse.Namespace, chosen: Prediction) -> str:
    """The images/s recommendation; where it is the default one (neither ``--quality-probe`` nor ``--noise-scale``),
    ending with what it rests on (:func:`basis_of`)."""
    line = recommendation_line(chosen, ns.min_efficiency)
    return line if ns.quality_probe or ns.noise_scale is not None else f"{line}; {basis_of(None, None).phrase}"


@dataclasses.dataclass(frozen=True)
class Basis:
    """The figure behind the default recommendation (``--json``'s ``recommended``), and how it is said.

    Attributes:
        kind: ``critical_batch`` (the quality probe's fit, ``trainer.advise.critical_batch``), ``b_simple`` (an
            earlier run's simple gradient noise scale, ``--noise-scale``) or ``none`` (images/s alone).
        crops: the figure [crops], or None for ``none``.
        phrase: what the printed recommendation line ends with ("from ...").
        sentence: the same in one plain-English sentence (``--json``'s ``recommendation_basis``).
    """

    kind: str
    crops: float | None
    phrase: str
    sentence: str


def basis_of(noise_scale: float | None, source: str | None) -> Basis:
    """The :class:`Basis` of a recommendation from ``noise_scale`` [crops] given by ``source``
    (:data:`QUALITY_PROBE`, :data:`NOISE_SCALE_FLAG` or None). B_simple is never called the critical batch: on two
    clips it was 1.5x-15x below the critical batch the quality probe fits (docs/scaling.md, "Time to quality")."""
    if noise_scale is None:
        return Basis("none", None, "from images/s alone (no critical batch: --quality-probe measures it)",
                     "Recommended from images/s alone, without a critical batch; run --quality-probe to measure it "
                     "for time to quality.")
    if source == QUALITY_PROBE:
        return Basis("critical_batch", noise_scale, f"from the quality probe's critical batch {noise_scale:.3g} crops",
                     f"Recommended for time to quality from the quality probe's critical batch of {noise_scale:.3g} "
                     "crops.")
    return Basis("b_simple", noise_scale,
                 f"from B_simple {noise_scale:.3g} crops (an earlier run's simple noise scale: a noisy lower bound on "
                 "the critical batch, so more ranks may pay off; run --quality-probe for the critical batch)",
                 f"Recommended for time to quality from B_simple of {noise_scale:.3g} crops, an earlier run's simple "
                 "noise scale and a noisy lower bound on the critical batch (more ranks may pay off); run "
                 "--quality-probe to measure the critical batch.")


def _quality_heading(basis: Basis) -> str:
    """The line above the time-to-quality table: which B_noise S(B) uses."""
    if basis.kind == "critical_batch":
        used = f"the quality probe's critical batch {basis.crops:.3g} crops"
    else:
        used = (f"B_simple {basis.crops:.3g} crops from {NOISE_SCALE_FLAG} in place of the critical batch: a noisy "
                "lower bound on it, so these speedups are lower bounds")
    return f"\ntime to the same quality, x 1 rank at sync interval 1 (S(B) with {used}):"


def _time_to_quality(ns: argparse.Namespace, cfg: Any, probe: Probe, predictions: list[Prediction],
                     chosen: Prediction, left_s: float, progress: Any = None) -> None:
    """The time-to-quality table and recommendation (from the ``--quality-probe`` it runs, or an earlier run's
    B_simple, ``--noise-scale``; ``trainer.advise.quality``, ``trainer.advise.critical_batch``) and the ``--json``
    line. With either figure the JSON's ``recommended`` is the time-to-quality choice (the one the submit dialog
    applies) and ``recommended_for_images_per_s`` the images/s one; without, both are the images/s choice. The
    printed default recommendation ends with its :class:`Basis`, which ``--json`` adds as ``basis`` and
    ``recommendation_basis``. The quality probe gets ``left_s`` seconds of the budget and reports to ``progress``."""
    noise_scale, source, measured = ns.noise_scale, NOISE_SCALE_FLAG if ns.noise_scale is not None else None, None
    skipped = None
    if ns.quality_probe:
        from trainer.advise.critical_batch import OverBudget, measure_critical_batch, probe_frames

        try:
            measured = measure_critical_batch(cfg, probe_frames(cfg), budget_s=max(left_s, 1.0), progress=progress)
            noise_scale, source = measured.critical_batch, QUALITY_PROBE
            print(measured.line())
        except OverBudget as exc:
            print(f"quality probe: {exc}")
            skipped = str(exc)
        finally:
            if progress is not None:
                progress.close()
    quality = _quality_speedups(noise_scale, cfg.batch_size, predictions)
    basis = basis_of(noise_scale if quality else None, source)
    line = recommendation_line(chosen, ns.min_efficiency)
    by_speed = chosen
    if quality:
        from trainer.advise.quality import format_quality_table, quality_recommendation

        print(_quality_heading(basis))
        cells = {(p.world_size, p.sync_interval): q for p, q in zip(predictions, quality)}
        n, k, line = quality_recommendation([(*cell, q) for cell, q in cells.items()])
        print(format_quality_table(cells, (n, k)))
        chosen = next(p for p in predictions if (p.world_size, p.sync_interval) == (n, k))
        print(f"{line}; {basis.phrase}")
    if ns.json:
        rows = [{**dataclasses.asdict(p), "time_to_quality_speedup": quality[i] if quality else None}
                for i, p in enumerate(predictions)]
        chosen_quality = quality[predictions.index(chosen)] if quality else None
        print(json.dumps({"recommended": {**dataclasses.asdict(chosen), "time_to_quality_speedup": chosen_quality,
                                          "line": line},
                          "recommended_for_images_per_s": {**dataclasses.asdict(by_speed),
                                                           "line": recommendation_line(by_speed, ns.min_efficiency)},
                          "predictions": rows, "noise_scale": noise_scale, "noise_scale_source": source,
                          "quality_probe": _probe_record(measured) or ({"skipped": skipped} if skipped else None),
                          "confidence": dataclasses.asdict(probe_confidence(probe)),
                          "probe_budget_s": probe.budget_s, "probe_seconds": probe.seconds,
                          "rank_memory_mb": rank_memory_mb(cfg.data_cache_mb, probe.device == "cuda"),
                          "basis": basis.kind, "recommendation_basis": basis.sentence}))


def _probe_record(probe: Any) -> dict[str, Any] | None:
    """The quality probe's figures for ``--json`` (its curves left out), or None without one."""
    if probe is None:
        return None
    return {"batches": list(probe.batches), "updates": list(probe.updates), "level_l1": probe.level,
            "critical_batch": probe.critical_batch, "seconds": probe.seconds, "truncated": probe.truncated}


def _quality_speedups(noise_scale: float | None, batch: int, predictions: Sequence[Any]) -> list[float]:
    """Time-to-quality speedup per prediction (empty without a noise scale); see trainer.advise.quality."""
    from trainer.advise.quality import prediction_speedups

    if noise_scale is None or not predictions:
        return []
    rows = sorted(predictions, key=lambda p: (p.world_size, p.sync_interval))
    base = rows[0]
    ordered = [base, *[p for p in predictions if p is not base]]
    values = prediction_speedups(noise_scale, batch, [(p.sync_interval, p.step_s) for p in ordered])
    by_id = {id(p): v for p, v in zip(ordered, values)}
    return [by_id[id(p)] for p in predictions]

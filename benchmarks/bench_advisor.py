"""Validate ``cuetrain advise``: predicted vs measured images/s of real trainer runs, one run.

(a) loopback: the advisor's probe + a measured loopback link, against ``cuetrain train`` (1 rank)
    and ``cuetrain local`` (2 ranks), sync intervals 1 and 4. The two ranks share this host, so
    their prediction uses a probe of 2 processes at once (``--ranks-per-host 2``);
(b) network namespaces: the 2 ranks in two namespaces joined by a veth pair capped with
    ``tc ... tbf rate R`` (default 100 Mb/s), predicted from the stated rate and from the link
    measured across the namespaces by ``cuetrain advise link``.

Each repeat runs the probe again and then every variant (interleaved); the reported figures are
medians over repeats. One thread per rank (the advisor's default). Target: |error| <= 25%.

Run: .venv/bin/python benchmarks/bench_advisor.py [--repeats 3] [--steps 150] [--rate-mbit 100] [--no-netns]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from common import demo_data, run_cuetrain
from lib import netns

from trainer.advise.advisor import describe_link, describe_probe, measure_link, run_probe
from trainer.advise.budget import ProbeSettings
from trainer.advise.costmodel import DEFAULT_LATENCY_S, Link, predict
from trainer.core.config import TrainConfig

BATCH, CROP, MODEL = 8, 64, "small"
VARIANTS = [(1, 1), (1, 4), (2, 1), (2, 4)]  # (world size, sync interval)


def predicted(probes: list, link: Link, world: int, sync: int) -> float:
    """Median over the repeats' probes of the predicted images/s for (world, sync) on ``link``."""
    return statistics.median(
        next(p.images_per_s for p in predict(probe, [world], [sync], link.bandwidth_gbps, link.latency_s))
        for probe in probes)


def table(title: str, rows: list[tuple[str, float, float]]) -> list[str]:
    out = [title, f"  {'setting':<36} {'predicted':>10} {'measured':>10} {'error':>8}"]
    for name, pred, meas in rows:
        out.append(f"  {name:<36} {pred:>10.1f} {meas:>10.1f} {100 * (pred - meas) / meas:>+7.1f}%")
    worst = max(abs(p - m) / m for _, p, m in rows)
    out.append(f"  worst |error|: {100 * worst:.1f}%  (target <= 25%)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rate-mbit", type=float, default=100.0)
    ap.add_argument("--no-netns", action="store_true", help="skip the network-namespace part")
    a = ap.parse_args()
    report: list[str] = [f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)"]
    with tempfile.TemporaryDirectory() as tmp:
        data = demo_data(Path(tmp) / "data")
        cfg = TrainConfig(str(data[0]), str(data[1]), str(Path(tmp) / "unused"), batch_size=BATCH, crop_size=CROP,
                          model_size=MODEL, log_interval=25)
        loop = measure_link(None, mb=16)
        print(describe_link(loop), flush=True)
        probes: dict[int, list] = {1: [], 2: []}  # ranks per host -> one probe per repeat
        measured: dict[tuple[int, int], list[float]] = {v: [] for v in VARIANTS}
        for rep in range(a.repeats):
            for r in probes:
                probes[r].append(run_probe(cfg, [1, 2], ProbeSettings(warmup=5, iters=20, ranks_per_host=r, budget_s=600)))
                print(f"repeat {rep + 1}: probe ({r} at once) "
                      f"{[(b, round(t * 1e3, 1)) for b, t in probes[r][-1].fb_s]} ms", flush=True)
            for world, sync in VARIANTS:
                extra = ["--sync-interval", str(sync)] if world > 1 else []
                env = {"COPYCAT_SYNC_INTERVAL": str(sync)} if world == 1 else None
                measured[(world, sync)].append(run_cuetrain(data, world, BATCH, a.steps, extra, env))
                print(f"  {world} rank(s), sync {sync}: {measured[(world, sync)][-1]:.1f} images/s", flush=True)
        report += ["", describe_probe(probes[2][-1]), describe_link(loop, probes[2][-1]), ""]
        rows = [(f"{w} rank(s), sync {k}", predicted(probes[w], loop, w, k), statistics.median(measured[(w, k)]))
                for w, k in VARIANTS]
        report += table(f"(a) loopback, {MODEL} model, crop {CROP}, global batch {BATCH}, {a.steps} steps, "
                        f"median of {a.repeats} [images/s]; probe with as many ranks at once as the run has", rows)
        report += ["  for comparison, 2-rank runs predicted from a 1-process probe (one rank per host, farm-style):"]
        report += [f"  {f'2 rank(s), sync {k}':<36} {predicted(probes[1], loop, 2, k):>10.1f} "
                   f"{statistics.median(measured[(2, k)]):>10.1f}" for k in (1, 4)]
        why = None if a.no_netns else netns.unavailable()
        if a.no_netns or why:
            report += ["", f"(b) network namespaces: skipped ({why or '--no-netns'})"]
        else:
            report += [""] + netns_part(a, data, probes[2])
    report.append(f"load average at end: {os.getloadavg()[0]:.2f}")
    print("\n".join(report))


def netns_part(a: argparse.Namespace, data: tuple[Path, Path], probes: list) -> list[str]:
    with netns.veth_pair(a.rate_mbit) as pair:
        gbps, latency = netns.measure_link_netns(pair, mb=2, repeats=3)
        link = Link(gbps, latency, "measured across the namespaces by 'cuetrain advise link'")
        stated = Link(a.rate_mbit / 1000, DEFAULT_LATENCY_S, "stated tc rate, default latency")
        print(describe_link(link), flush=True)
        got: dict[int, list[float]] = {1: [], 4: []}
        for _ in range(a.repeats):
            for sync in got:
                got[sync].append(netns.run_cuetrain_netns(pair, data, BATCH, a.steps, sync))
                print(f"  netns 2 ranks, sync {sync}: {got[sync][-1]:.1f} images/s", flush=True)
    rows = []
    for sync, values in got.items():
        meas = statistics.median(values)
        rows.append((f"2 ranks, sync {sync}, measured link", predicted(probes, link, 2, sync), meas))
        rows.append((f"2 ranks, sync {sync}, stated {a.rate_mbit:g} Mb/s", predicted(probes, stated, 2, sync), meas))
    return [describe_link(link, probes[-1]), describe_link(stated, probes[-1])] + table(
        f"(b) 2 ranks in network namespaces, veth + tc tbf {a.rate_mbit:g} Mb/s each way, median of {a.repeats} "
        "[images/s]", rows)


if __name__ == "__main__":
    main()

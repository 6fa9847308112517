"""A randomized, seeded fault soak of cuetrain's recovery (issue 48).

``python benchmarks/soak.py --faults N --seed S [--paths local,farm,netns,elastic]`` draws N faults over several tiny
runs (:func:`soak_plan.schedule`: each fault a kind and a training step drawn from ``random.Random(S)``), injects each
when its run reaches that step, and waits for the recovery. The fault kinds and their limits: :mod:`soak_plan`;
the paths: :mod:`soak_local` (``cuetrain local``, 2 ranks), :mod:`soak_farm` (the Cuebot double with real RQDs),
:mod:`soak_netns` (the 2-host network-namespace bed: one frame per host, a host's link cut off and back),
:mod:`soak_elastic` (elastic 3-frame jobs on the farm: a frame's host lost, the gang shrinks to 2 and grows back).

After each run it checks (:mod:`soak_checks`): the run ended ``succeeded`` (a supervisor that a fault ended must
have ended with that fault's expected exit and run.json state; the soak then starts it again with ``--resume``, as an
operator or the farm's retry would); the model's held-out gain (the demo's carphone clip, every 6th frame held
out) is within 0.3 dB of a fault-free run of the same path, seed and steps; no fault lost more than its checkpoint
intervals or took longer than its documented bound (:func:`soak_plan.resolve_limit_s`: a hang); no process of the
run outlived it (an orphan); no ``*.tmp`` file; ``run.json``'s attempts match the faults.

Output: one line per fault, a table per fault kind (count, median and worst seconds to training again, worst steps
lost), then exactly one summary line ``N faults, H hangs, L lost runs, O orphans, worst steps lost W``. Exit 0 only
when H, L and O are 0.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from common import ROOT  # noqa: F401 - puts the checkout on sys.path
from lib.soak_checks import check_gain, check_run
from lib.soak_local import LocalDriver, root_unavailable, run_filesystem, wait_quiet
from lib.soak_plan import (ELASTIC_MIN_STEPS, ELASTIC_WORLD_SIZE, KINDS, FaultOutcome, PlannedRun, RunConfig,
                            schedule)
from lib.soak_run import RunOutcome, soak_run
from lib.soak_watch import Watcher
from trainer.record.rundir import RunPaths

log = logging.getLogger("soak")
PATHS = ("local", "farm", "netns", "elastic")


def available_kinds(paths: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The kinds each asked path can do here, and one note per thing left out."""
    notes: list[str] = []
    no_root = root_unavailable()
    if no_root:
        notes.append(f"local: {no_root}")
    kinds: dict[str, list[str]] = {}
    for path in paths:
        names = [k.name for k in KINDS.values() if path in k.paths and not (k.root and no_root)]
        if path in ("farm", "elastic"):
            from lib.soak_farm import farm_unavailable

            if (why := farm_unavailable()) is not None:
                notes.append(f"{path}: skipped: {why}")
                names = []
        if path == "farm" and names:
            notes.append("farm: sigterm_agent not drawn (a frame preempted twice spends the layer's one Cuebot "
                         "retry; tests/cue_plugin/test_e2e_recovery.py covers one); elastic has a path of its own")
        if path == "netns":
            from lib.soak_netns import netns_unavailable

            if (why := netns_unavailable()) is not None:
                notes.append(f"netns: skipped: {why}")
                names = []
        kinds[path] = names
    return kinds, notes


def make_driver(path: str, cfg: RunConfig, data: tuple[Path, Path], run_dir: Path, out_dir: Path, farm):
    """The path's driver for one run."""
    if path == "farm":
        from lib.soak_farm import FarmDriver

        return FarmDriver(cfg, data, run_dir, out_dir, farm)
    if path == "netns":
        from lib.soak_netns import NetnsDriver

        return NetnsDriver(cfg, data, run_dir, out_dir, farm)
    if path == "elastic":
        from lib.soak_elastic import ElasticFarmDriver

        return ElasticFarmDriver(cfg, data, run_dir, out_dir, farm)
    return LocalDriver(cfg, data, run_dir, out_dir)


def holdout_gain(run_dir: Path, data_root: Path) -> float | None:
    """The run's model's held-out PSNR gain [dB] (model output vs Input, against the Ground Truth), None without a
    model."""
    from trainer.demo import extract, holdout_psnr

    if not (run_dir / "model.pt").exists():
        return None
    before, after = holdout_psnr(run_dir, extract(data_root))
    return after - before


def stray_children(baseline: set[int]) -> list[psutil.Process]:
    """The soak's live descendants that are not in ``baseline`` (pids: the farm's RQDs), after a run."""
    out = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.pid not in baseline and child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
    return out


def one_run(planned: PlannedRun, cfg: RunConfig, data_root: Path, work: Path, reference: float | None,
            farm=None, keep: bool = False, baseline: frozenset[int] = frozenset()
            ) -> tuple[RunOutcome, float | None, list[str], list[str]]:
    """Run ``planned``; returns its outcome, held-out gain, problems and orphans (processes naming the run directory
    or descending from the soak, other than ``baseline``, still alive 10 s after the run; they are killed)."""
    from trainer.demo import extract

    d = extract(data_root)
    folder = work / f"{planned.path}_{planned.index:03d}"
    own_fs = planned.path == "local" and root_unavailable() is None
    with run_filesystem(folder / "fs", own_fs, folder / "run" if keep else None) as run_dir, \
            _pycue_for(planned.path, farm):
        (folder / "out").mkdir(parents=True, exist_ok=True)
        driver = make_driver(planned.path, cfg, (d.train_input, d.train_target), run_dir, folder / "out", farm)
        watcher = Watcher(RunPaths.of(run_dir))
        try:
            outcome = soak_run(driver, planned, cfg, watcher)
        finally:
            watcher.close()
        left = {p.pid: p for p in [*wait_quiet(driver), *stray_children(set(baseline))]}
        orphans = []
        for p in left.values():
            with contextlib.suppress(psutil.Error):
                orphans.append(f"{p.pid} {' '.join(p.cmdline())[:100]}")
                p.kill()
        driver.kill_all()
        problems = [] if outcome.hang else check_run(RunPaths.of(run_dir), cfg, outcome.faults, driver.extra_attempts)
        problems += [n.removeprefix("PROBLEM: ") for n in outcome.notes if n.startswith("PROBLEM: ")]
        gain = None if outcome.hang else holdout_gain(run_dir, data_root)
        if not outcome.hang and (why := check_gain(gain, reference)):
            problems.append(why)
    return outcome, gain, problems, orphans


def _pycue_for(path: str, farm) -> contextlib.AbstractContextManager:
    """pycue pointed at the bed's double for a netns run (the farm path's double is pycue's otherwise)."""
    if path != "netns":
        return contextlib.nullcontext()
    from lib.soak_netns import pycue_at

    return pycue_at(farm)


def kind_table(faults: list[FaultOutcome]) -> list[str]:
    """The per-kind table (markdown): count, median and worst seconds to training again, worst steps lost."""
    lines = ["| path | fault kind | count | median s to training again | worst s | steps lost (median / worst) |",
             "|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[FaultOutcome]] = {}
    for f in faults:
        groups.setdefault((f.path, f.fault.kind), []).append(f)
    for (path, kind), group in sorted(groups.items()):
        secs = [f.seconds for f in group if f.seconds is not None]
        lost = [f.steps_lost for f in group]
        med = f"{statistics.median(secs):.1f}" if secs else "-"
        worst = f"{max(secs):.1f}" if secs else "-"
        lines.append(f"| {path} | {kind} | {len(group)} | {med} | {worst} | "
                     f"{statistics.median(lost):g} / {max(lost)} |")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; an unknown path or kind, or --faults < 1, is a usage error (exit 2) naming it."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--faults", type=int, required=True, help="faults in all")
    p.add_argument("--seed", type=int, default=0, help="schedule seed (default 0)")
    p.add_argument("--paths", default="local", help="comma-separated: local, farm, netns, elastic (default local)")
    p.add_argument("--steps", type=int, default=RunConfig.steps, help=f"steps per run (default {RunConfig.steps})")
    p.add_argument("--kinds", help="comma-separated fault kinds to draw from (default: every kind a path can do)")
    p.add_argument("--work-dir", help="make the soak's folder here (removed at the end unless --keep)")
    p.add_argument("--keep", action="store_true", help="keep the soak's folder (run directories, supervisor output)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every fault as it resolves")
    args = p.parse_args(argv)
    args.paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    args.kinds = [x.strip() for x in args.kinds.split(",") if x.strip()] if args.kinds else None
    if bad := [x for x in args.paths if x not in PATHS]:
        p.error(f"--paths {','.join(bad)}: unknown path; use {', '.join(PATHS)}")
    if bad := [x for x in args.kinds or () if x not in KINDS]:
        p.error(f"--kinds {','.join(bad)}: unknown kind; use {', '.join(KINDS)}")
    if args.faults < 1:
        p.error(f"--faults {args.faults} must be >= 1")
    if "elastic" in args.paths and args.steps < ELASTIC_MIN_STEPS:
        p.error(f"--steps {args.steps} is too few for elastic runs (the shrunk gang must outlast its grow-back): "
                f"give at least {ELASTIC_MIN_STEPS}, or leave elastic out of --paths")
    return args


def main(argv: list[str] | None = None) -> int:
    """Draw the schedule, run the soak in a folder of its own; returns 0 when nothing hung, was lost or orphaned."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO if args.verbose else logging.WARNING)
    cfg = RunConfig(steps=args.steps)
    kinds, notes = available_kinds(args.paths)
    if args.kinds:
        kinds = {path: [k for k in names if k in args.kinds] for path, names in kinds.items()}
    for note in notes:
        print(f"note: {note}")
    try:
        plan = schedule(args.faults, args.seed, kinds, cfg.steps, cfg.interval, cfg.world_size)
    except ValueError as exc:
        print(f"soak.py: error: {exc}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="cuetrain-soak-", dir=args.work_dir))
    try:
        return soak(plan, cfg, work, [p for p in args.paths if kinds.get(p)], args.keep)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def soak(plan: list[PlannedRun], cfg: RunConfig, work: Path, paths: list[str], keep: bool = False) -> int:
    """Run the reference of each path, then every planned run; print the table and the summary line."""
    from contextlib import ExitStack

    t0 = time.monotonic()
    data_root = work / "data"
    faults: list[FaultOutcome] = []
    hangs = lost = orphans = 0
    with ExitStack() as stack:
        farms: dict[str, object] = {}
        if "farm" in paths or "elastic" in paths:  # one farm for both; an elastic job's 3 frames need 3 RQDs
            from lib.soak_farm import started_farm

            farm = stack.enter_context(started_farm(work / "farm", ELASTIC_WORLD_SIZE if "elastic" in paths else 2))
            farms.update(farm=farm, elastic=farm)
        if "netns" in paths:
            from lib.soak_netns import started_bed

            farms["netns"] = stack.enter_context(started_bed())
        baseline = frozenset(c.pid for c in psutil.Process().children(recursive=True))  # the farms' RQDs
        references: dict[str, float | None] = {}
        for path in paths:
            outcome, gain, problems, left = one_run(PlannedRun(path, 999, ()), cfg.for_path(path), data_root, work,
                                                    None, farms.get(path), keep, baseline)
            references[path] = gain
            print(f"{path} reference (no fault): held-out gain {gain if gain is None else f'{gain:+.3f}'} dB"
                  + (f"; PROBLEMS: {'; '.join(problems)}" if problems else ""), flush=True)
            hangs, lost, orphans = hangs + bool(outcome.hang), lost + bool(problems), orphans + len(left)
        for planned in plan:
            outcome, gain, problems, left = one_run(planned, cfg.for_path(planned.path), data_root, work,
                                                    references[planned.path], farms.get(planned.path), keep, baseline)
            faults += outcome.faults
            hangs, lost = hangs + bool(outcome.hang), lost + bool(problems or outcome.hang)
            orphans += len(left)
            print(run_line(planned, outcome, gain, problems, left), flush=True)
    print("\n".join(kind_table(faults)))
    worst = max((f.steps_lost for f in faults), default=0)
    print(f"soak took {time.monotonic() - t0:.0f} s")
    print(f"{len(faults)} faults, {hangs} hangs, {lost} lost runs, {orphans} orphans, worst steps lost {worst}")
    return 0 if hangs == lost == orphans == 0 else 1


def run_line(planned: PlannedRun, outcome: RunOutcome, gain: float | None, problems: list[str],
             orphans: list[str]) -> str:
    """One line per run: its faults with seconds and steps lost, gain, and whatever went wrong."""
    done = ", ".join(f"{f.fault.kind}@{f.fault.step}:"
                     f"{'-' if f.seconds is None else f'{f.seconds:.1f}s'}/{f.steps_lost}" for f in outcome.faults)
    text = f"run {planned.index} ({planned.path}): {done}; gain {'-' if gain is None else f'{gain:+.3f}'} dB"
    extra = [f"HANG: {outcome.hang}"] if outcome.hang else []
    extra += [f"LOST: {p}" for p in problems] + [f"ORPHAN: {o}" for o in orphans]
    extra += [n for n in outcome.notes if not n.startswith("PROBLEM: ")]
    return text + "".join(f"\n    {e}" for e in extra)


if __name__ == "__main__":
    sys.exit(main())

"""The advisor watches the clock (issue 50): the probe plans to ``--probe-budget`` and stops at it, reports progress,
and says how sure its answer is, plainly when the budget cut it short (trainer/advise/budget.py)."""

from __future__ import annotations

import io
import json
import multiprocessing as mp
import threading
import time

import numpy as np
import pytest
import torch

from tests.trainer.advise.test_advisor import FakeClock, make_probe
from trainer.advise import advisor as advise
from trainer.advise import probe as advise_probe
from trainer.advise.budget import (MIN_TIMED, ProbeSettings, StepPlan, estimate, median_rse, plan_quality,
                                   plan_steps, probe_confidence)
from trainer.advise.costmodel import format_table, predict
from trainer.advise.progress import JsonProgress, TerminalProgress
from trainer.core.config import TrainConfig


def test_the_plan_keeps_what_was_asked_when_it_fits_then_cuts_iterations_then_batches():
    need, costs = [1, 2, 3, 4, 8], {1: 0.1, 8: 0.8}  # a step costs 0.1 s a crop: a round of all five 1.8 s
    assert estimate(costs, 4) == pytest.approx(0.4) and estimate({2: 0.2}, 8) == pytest.approx(0.8)
    assert plan_steps(need, costs, 13 * 1.8, 3, 10) == StepPlan((1, 2, 3, 4, 8), 3, 10, 5)
    fewer = plan_steps(need, costs, 6 * 1.8, 3, 10)  # 6 rounds: one warm-up, five timed
    assert (fewer.batches, fewer.warmup, fewer.iters) == ((1, 2, 3, 4, 8), 1, 5)
    thinned = plan_steps(need, costs, 4 * 1.3, 3, 10)  # the ends and one between fit 4 rounds
    assert thinned.batches[0] == 1 and thinned.batches[-1] == 8 and len(thinned.batches) == 3
    assert thinned.iters == MIN_TIMED and thinned.needed == 5
    ends = plan_steps(need, costs, 1.0, 3, 10)  # not even one round: the ends, one timed step, the loop stops early
    assert (ends.batches, ends.warmup, ends.iters) == ((1, 8), 0, 1)


def test_the_quality_probe_plans_shorter_runs_then_fewer_factors_then_none():
    assert plan_quality(1e6, 0.01, 0.05, (4, 16), 160, 40) == (160, (4, 16))
    n, factors = plan_quality(15.0, 0.01, 0.05, (4, 16), 160, 40)
    assert factors == (4, 16) and 40 <= n < 160
    assert plan_quality(5.0, 0.01, 0.05, (4, 16), 160, 40)[1] == (4,)
    assert plan_quality(0.5, 0.01, 0.05, (4, 16), 160, 40) is None


def test_confidence_says_how_many_steps_and_when_the_budget_cut_it_short():
    assert median_rse([1.0]) is None and median_rse([1.0, 1.0, 1.0]) == 0.0
    assert median_rse([1.0, 1.1, 0.9, 1.0, 5.0]) < 0.1  # one slowed step does not make the figure rough
    fb = ((1, 0.01), (2, 0.014), (4, 0.022), (8, 0.038))
    full = make_probe(fb_s=fb, fb_samples=(10,) * 4, fb_rse=(0.01, 0.02, 0.02, 0.03), needed_batches=4, budget_s=90)
    conf = probe_confidence(full)
    assert (conf.level, conf.measured_batches, conf.timed_steps, conf.truncated) == ("good", 4, 40, False)
    assert conf.statement.startswith("measured 4 of 4 world sizes' batches (40 timed steps")
    cut = make_probe(fb_s=fb[::3], fb_samples=(2, 2), fb_rse=(0.05, 0.2), needed_batches=4, truncated=True,
                     budget_s=5)
    conf = probe_confidence(cut)
    assert conf.level == "rough" and conf.truncated
    assert conf.statement.startswith("the 5 s budget cut the probe short: measured 2 of 4 world sizes' batches")
    assert "the answer is rough" in conf.statement
    # each row says what its figure rests on: timed steps and error, or "interp" between timed batches
    rows = {p.world_size: p for p in predict(cut, [1, 2, 8], [1])}
    assert (rows[1].timed_steps, rows[1].interpolated, rows[8].timed_steps) == (2, False, 2)
    assert rows[2].interpolated and rows[2].rel_error is not None and rows[2].rel_error <= 0.2
    table = format_table(list(rows.values()))
    assert "timed" in table.splitlines()[0] and "interp" in table


class _Costed:
    """Fake costs: every step ``step_s`` fake seconds, outputs 0.1 s; counts the steps."""

    def __init__(self, clock: FakeClock, step_s: float) -> None:
        self.clock, self.step_s, self.steps = clock, step_s, 0


def test_the_probe_never_overruns_its_budget_by_more_than_one_step(pairs, tmp_path, monkeypatch):
    """Against a fake clock (a step costs 1 s, the budget is 20 s, 10,000 iterations asked): the probe plans fewer,
    starts no step that would end past the budget, and says it was cut short."""
    from trainer.learn import run_writer as outputs

    clock = FakeClock()
    costed = _Costed(clock, 1.0)

    class CostedSampler(advise_probe.CropSampler):
        def batch(self, step):
            clock.now += costed.step_s
            costed.steps += 1
            return super().batch(step)

    monkeypatch.setattr(advise_probe, "device_now", clock)
    monkeypatch.setattr(advise_probe, "CropSampler", CostedSampler)
    monkeypatch.setattr(outputs.RunWriter, "contact_sheet", lambda *a, **k: setattr(clock, "now", clock.now + 0.1))
    monkeypatch.setattr(outputs.RunWriter, "checkpoint", lambda *a, **k: setattr(clock, "now", clock.now + 0.1))
    cfg = TrainConfig(str(pairs[0]), str(pairs[1]), str(tmp_path / "run"), batch_size=4, crop_size=16)
    gang = advise_probe._Gang(threading.Barrier(1), mp.get_context("spawn").Value("i", 1))
    reports = []
    probe = advise_probe._probe(cfg, [1, 2, 3, 4], ProbeSettings(iters=10_000, budget_s=20), time.time() + 20,
                                gang, lambda *r: reports.append(r))
    assert clock.now <= 20 + 1.0 + 0.2  # the budget, one step past it at most (outputs: at least one of each)
    assert costed.steps >= 15  # it used the budget: 3 planning steps and rounds of 3 batches
    assert probe.truncated and probe.iters < 10_000
    assert probe_confidence(probe).statement.startswith("the 20 s budget cut the probe short")
    steps = [r for r in reports if r[0] == "steps"]
    assert steps and [d for _, d, _ in steps] == list(range(1, len(steps) + 1))
    assert all(total == steps[0][2] for _, _, total in steps) and ("outputs", 1, 3) in reports


def test_the_real_probe_ends_within_a_small_budget(pairs, tmp_path):
    """The whole probe, spawned process included, on tiny frames with 10,000 iterations asked (minutes without a
    budget): a 5 s budget ends it within the budget and one measurement; a generous bound, not a speed test."""
    cfg = TrainConfig(str(pairs[0]), str(pairs[1]), str(tmp_path / "run"), batch_size=4, crop_size=16)
    reports = []
    t0 = time.monotonic()
    probe = advise_probe.run_probe(cfg, [1, 2, 3, 4], ProbeSettings(iters=10_000, budget_s=5),
                                   lambda *r: reports.append(r))
    elapsed = time.monotonic() - t0
    one = max(t for _, t in probe.fb_s) + probe.optimizer_s + probe.contact_sheet_s + probe.checkpoint_s
    # 10 s: spawning the probe and importing torch on a loaded 2-core CI (counted in the budget, but a start-up
    # longer than the budget still ends in one measurement) and its exit; 10,000 iterations would take minutes.
    # The exact bound (one measurement past the budget) is the fake-clock test's.
    assert elapsed < 5 + one + 10
    # Its seconds count the spawn (2-4 s of importing torch here), so they fall short of the wall time only by this
    # call's own set-up and return: under 1 s, or a tenth of the run on a host loaded past its cores.
    assert probe.truncated and elapsed - max(1.0, 0.1 * elapsed) <= probe.seconds <= elapsed
    assert sum(probe.fb_samples) >= 3 and any(r[0] == "steps" for r in reports)


def test_the_quality_probe_stops_at_its_budget(monkeypatch):
    """Too short a budget for even the shortest plan: not run, with what it needs. A plan that does not fit (the full
    one, forced; all three runs take over a second here): the deadline stops the runs, and the result says so."""
    import trainer.advise.budget as budget
    from tests.trainer.advise.test_critical_batch import _cfg, _net
    from trainer.advise.critical_batch import OverBudget, measure_critical_batch

    rng = np.random.default_rng(0)
    frame = (rng.random((32, 32, 3), np.float32), rng.random((32, 32, 3), np.float32))
    with pytest.raises(OverBudget, match="the quality probe needs about .* s here"):
        measure_critical_batch(_cfg(), [frame, frame], device=torch.device("cpu"), build=_net, budget_s=0.01)
    monkeypatch.setattr(budget, "plan_quality", lambda seconds, u, e, factors, n, evals: (n, tuple(factors)))
    seen = []
    t0 = time.perf_counter()
    probe = measure_critical_batch(_cfg(), [frame, frame], device=torch.device("cpu"), build=_net, budget_s=0.3,
                                   progress=lambda *r: seen.append(r))
    assert time.perf_counter() - t0 < 0.3 + 1.0  # one update and one evaluation at most past it (generous)
    assert seen and seen[-1][0] == "quality" and seen[-1][1] == seen[-1][2]
    assert probe.truncated and "the time budget cut it short" in probe.line()


def test_progress_as_json_lines_and_a_plain_line_per_tenth():
    out = io.StringIO()
    sink = JsonProgress(90.0, out)
    sink("steps", 2, 40)
    rec = json.loads(out.getvalue())["progress"]
    assert (rec["phase"], rec["done"], rec["total"], rec["budget_s"]) == ("steps", 2, 40, 90.0)
    plain = io.StringIO()  # not a terminal: a line at the first record, then at every tenth
    bar = TerminalProgress(90.0, plain)
    for done in range(1, 41):
        bar("steps", done, 40)
    lines = plain.getvalue().splitlines()
    assert len(lines) == 11 and lines[0].startswith("timing training steps (budget 90 s):   2%")
    assert lines[-1].startswith("timing training steps (budget 90 s): 100%") and " 40/40 " in lines[-1]


def test_cli_prints_the_confidence_and_takes_the_budget(pairs, capsys, monkeypatch):
    seen = []

    def fake_probe(cfg, sizes, **kw):
        seen.append(kw["settings"])
        return make_probe(batch_size=cfg.batch_size, fb_samples=(2, 2, 2, 2), fb_rse=(0.1,) * 4, needed_batches=6,
                          truncated=True, budget_s=kw["settings"].budget_s)

    monkeypatch.setattr(advise, "run_probe", fake_probe)
    assert advise.main(["--input", str(pairs[0]), "--target", str(pairs[1]), "--batch-size", "8",
                        "--probe-budget", "1m30s", "--progress", "none", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert seen[0].budget_s == 90.0
    assert "how sure: the 90 s budget cut the probe short: measured 4 of 6 world sizes' batches" in "\n".join(lines)
    out = json.loads(lines[-1])
    assert out["confidence"]["truncated"] and out["confidence"]["level"] == "rough"
    assert all("timed_steps" in row and "rel_error" in row for row in out["predictions"])
    with pytest.raises(SystemExit):
        advise.main(["--input", str(pairs[0]), "--target", str(pairs[1]), "--probe-budget", "2026-01-01T00:00+00:00"])
    assert "--probe-budget" in capsys.readouterr().err

"""benchmarks/bench_noise_scale.py: its learning-rate rules, the seed medians and the prediction table, without
training (the runs themselves are the benchmark's; their figures are in docs/studies/noise_scale.md), and which
optimizer a run builds (40 updates on noise frames)."""

from __future__ import annotations

import math
import sys

import pytest

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_noise_scale as ns  # noqa: E402


def test_lr_rules_agree_at_the_reference_batch_and_part_above_it():
    for rule in ("linear", "sqrt", "noise"):
        assert ns.lr_of(rule, 8, None) == ns.BASE_LR  # the probe's batch needs no noise scale
    assert ns.lr_of("linear", 32) == pytest.approx(4 * ns.BASE_LR)
    assert ns.lr_of("sqrt", 128) == pytest.approx(4 * ns.BASE_LR)
    # noise: the square-root rule while B << B_noise, a ceiling of sqrt(1 + B_noise / 8) once B >> B_noise
    assert ns.lr_of("noise", 32, 1e6) == pytest.approx(ns.lr_of("sqrt", 32), rel=1e-3)
    ceiling = ns.BASE_LR * math.sqrt(1 + 6 / 8)
    assert ns.lr_of("noise", 32, 6.0) < ns.lr_of("noise", 128, 6.0) < ns.lr_of("noise", 10**6, 6.0) <= ceiling
    assert ns.lr_of("noise", 10**6, 6.0) == pytest.approx(ceiling, rel=1e-4)
    with pytest.raises(ValueError, match="noise"):
        ns.lr_of("noise", 32, None)
    with pytest.raises(ValueError, match="'cubic'"):
        ns.lr_of("cubic", 32)


def test_a_seed_that_missed_the_target_counts_above_every_number_in_the_median():
    assert ns._median([100.0, None, 300.0]) == 300.0
    assert ns._median([100.0, None, None]) is None  # the median seed itself missed it
    assert ns._median([]) is None
    assert ns.crossing([(0, 0.0), (10, 0.4), (20, 1.2)], 0.8) == pytest.approx(15.0)
    assert ns.crossing([(0, 0.0), (10, 0.4)], 0.8) is None


def _result(batch, seed, updates, noise=None):
    return ns.RunResult(batch, seed, ns.lr_of("sqrt", batch), 450, updates, [], 1.0, noise)


def test_table_predicts_from_the_median_probe_and_compares_medians():
    results = [_result(8, 0, 400.0, 4.0), _result(32, 0, 200.0), _result(128, 0, 150.0),
               _result(8, 1, 300.0, 8.0), _result(32, 1, 240.0), _result(128, 1, None),
               _result(8, 2, 350.0, 6.0), _result(32, 2, 220.0), _result(128, 2, None)]
    lines = ns.table("sqrt", results)
    assert "median 6.0" in lines[0]  # the probes' B_noise 4, 8, 6
    predicted_32 = 350.0 * (1 + 6 / 32) / (1 + 6 / 8)  # the median S(8) and B_noise in S(B)
    row_32 = next(line for line in lines if line.startswith("| 32 |"))
    assert f"| 220 | {predicted_32:.0f} | {(predicted_32 - 220) / 220:+.0%} |" in row_32
    row_128 = next(line for line in lines if line.startswith("| 128 |"))
    assert "150 / >450 / >450 | - |" in row_128  # two of three missed: no median to compare


def test_probe_table_predicts_from_the_median_critical_batch():
    from trainer.advise.critical_batch import QualityProbe

    def probe(b_crit):
        return QualityProbe((8, 32, 128), (100.0, 60.0, 50.0), 0.05, b_crit, ((), (), ()), 30.0)

    results = [_result(8, 0, 200.0), _result(32, 0, 110.0), _result(128, 0, 100.0),
               _result(8, 1, 180.0), _result(32, 1, 100.0), _result(128, 1, 90.0),
               _result(8, 2, 160.0), _result(32, 2, 95.0), _result(128, 2, None)]
    lines = ns.probe_table(results, {0: probe(8.0), 1: probe(12.0), 2: probe(20.0)})
    assert "8.0, 12.0, 20.0 crops (median 12.0" in lines[0] and "batches 8/32/128" in lines[0]
    row_32 = next(line for line in lines if line.startswith("| 32 |"))
    predicted_32 = 180.0 * (1 + 12 / 32) / (1 + 12 / 8)  # the median S(8) and the median critical batch
    assert row_32.startswith(f"| 32 | 100 | {predicted_32:.0f} | {(predicted_32 - 100) / 100:+.0%} |")
    own_0 = 200.0 * (1 + 8 / 32) / (1 + 8 / 8)  # seed 0's own S(8) and critical batch
    assert f"{(own_0 - 110) / 110:+.0%} / " in row_32
    row_128 = next(line for line in lines if line.startswith("| 128 |"))
    assert row_128.endswith(" / -  |") or row_128.rstrip().endswith("/ - |")  # seed 2 missed the target


def test_runs_train_the_trainers_muon_when_asked(monkeypatch):
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    frames = [(rng.random((64, 72, 3), dtype=np.float32), rng.random((64, 72, 3), dtype=np.float32)) for _ in range(2)]
    built: list[str] = []

    class Spy(ns.MuonAdam):
        def __init__(self, net, lr, betas):
            built.append(f"muon {lr:.0e} {betas}")
            super().__init__(net, lr, betas)

    monkeypatch.setattr(ns, "MuonAdam", Spy)
    results = {}
    for optimizer in ("adam", "muon"):
        s = ns.Setup(frames, frames[:1], 0.0, 99.0, 0, torch.device("cpu"), "v3", 2e-3, 0.9, None, optimizer)
        results[optimizer] = ns.run(8, "sqrt", 0, 40, s)  # one evaluation: every 40 updates at batch 8
    assert built == ["muon 2e-03 (0.9, 0.9)"]  # only the muon run built it, at the batch-8 peak and the betas
    assert results["adam"].updates_to_target is None and len(results["muon"].curve) > 1
    assert results["adam"].curve != results["muon"].curve  # another update, another held-out curve

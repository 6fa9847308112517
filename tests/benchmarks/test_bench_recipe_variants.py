"""benchmarks/bench_recipe.py variants (benchmarks/lib/variants.py): its two options do what they say, and nothing
outside the run changes."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"))
from lib import variants as brv  # noqa: E402
import bench_time_to_quality as ttq  # noqa: E402


def _pairs(n: int = 2, size: int = 32) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [(rng.random((size, size, 3), dtype=np.float32), rng.random((size, size, 3), dtype=np.float32))
            for _ in range(n)]


def test_zero_init_clipping_and_transposed_crops_reach_the_run_and_nothing_outside_it(monkeypatch):
    seen: list[dict[str, object]] = []
    real_train = ttq.train_averages

    def spy(recipe, train, held, scale, evals, precision, **kw):
        net = kw["build"](recipe.size, recipe.architecture, recipe.skip_init)  # as train_averages builds it
        blocks = [m for m in net.modules() if isinstance(m, brv.model_mod.ResBlock)]
        p = torch.nn.Parameter(torch.ones(4))
        opt = kw["adam"]([p], lr=0.0)
        p.grad = torch.full((4,), 10.0)  # L2 norm 20
        opt.step()
        seen.append({"zeroed": bool(blocks) and all(not b.conv2.weight.any() and not b.conv2.bias.any() for b in blocks),
                     "norm": float(p.grad.norm()), "sampler": kw["sampler"], "fre": type(kw["build"]("fre"))})
        return real_train(recipe, train, held, scale, evals, precision, **kw)

    monkeypatch.setattr(ttq, "train_averages", spy)
    adam_before = torch.optim.Adam
    recipe = ttq.Recipe("v2", "small", 4, batch=2, crop=16, skip_init=True)
    curve = brv.run_variant(brv.Variant(recipe, clip=0.1, transpose=True), _pairs(), _pairs(1), evals=1)
    brv.run_variant(brv.Variant(recipe), _pairs(), _pairs(1), evals=1)
    clipped, plain = seen
    assert clipped["zeroed"] is True and abs(clipped["norm"] - 0.1) < 1e-6  # clipped from 20 to 0.1 before the step
    assert clipped["sampler"] is brv.TransposingSampler and clipped["fre"] is brv.FullResEnds
    assert plain["norm"] == pytest.approx(20.0) and plain["sampler"] is brv.CropSampler  # no clip, no transpose
    assert [step for _, step, _ in curve] == [0, 4]
    assert torch.optim.Adam is adam_before  # nothing global was patched
    net = brv.model_mod.build_model("small", "v2")  # outside the run: the product's initialisation
    assert any(m.conv2.weight.any() for m in net.modules() if isinstance(m, brv.model_mod.ResBlock))


def test_transposed_crops_are_the_samplers_own_crops_half_of_them_transposed():
    frames = _pairs(3, 40)
    plain = ttq.CropSampler(frames, 16, 64, seed=3)
    views = brv.TransposingSampler(frames, 16, 64, seed=3)
    a, b = plain.batch(5), views.batch(5)
    same = [torch.equal(x, y) for x, y in zip(a.input, b.input)]
    turned = [torch.equal(x.transpose(-1, -2), y) for x, y in zip(a.input, b.input)]
    assert all(s or t for s, t in zip(same, turned)) and 16 < sum(turned) < 48  # each crop one or the other
    assert all(torch.equal(x.transpose(-1, -2) if t else x, y) for x, y, t in zip(a.target, b.target, turned))
    assert torch.equal(views.batch(5).input, b.input)  # the same views for the same step


def test_variant_networks_are_registered_only_when_the_benchmark_runs():
    from lib.baselines import MODEL_SIZES_V2
    from trainer.learn.model import ARCHITECTURES

    assert not set(brv.VARIANT_SIZES) & set(MODEL_SIZES_V2)  # importing it changes nothing, not even baselines
    assert not any(set(brv.VARIANT_SIZES) & set(sizes) for sizes in ARCHITECTURES.values())  # nor the product


def test_full_resolution_ends_start_as_the_identity_at_any_size():
    net = brv.FullResEnds()
    x = torch.rand(2, 3, 37, 50)
    assert torch.equal(net(x), x)  # its last conv is zero, as every cuetrain network starts
    assert sum(p.numel() for p in net.parameters()) == 1_043_091


def test_summary_compares_each_seed_with_its_own_v1_in_steps():
    # seed 0: v1 ends at 24 dB at step 300, the variant reaches 24 at step 150; seed 1: v1 ends at 23, the
    # variant never gets there; medians over the two seeds
    runs = {"v1": {"0": [(0.0, 0, 20.0), (1.0, 150, 22.0), (2.0, 300, 24.0)],
                   "1": [(0.0, 0, 20.0), (1.0, 150, 21.0), (2.0, 300, 23.0)]},
            "fast": {"0": [(0.0, 0, 20.0), (3.0, 150, 24.0), (6.0, 300, 25.0)],
                     "1": [(0.0, 0, 20.0), (3.0, 150, 21.5), (6.0, 300, 22.0)]}}
    assert brv.at_step(runs["v1"]["0"], 75) == pytest.approx(21.0)
    assert brv.at_step(runs["v1"]["0"], 999) == 24.0
    assert brv.steps_to(runs["fast"]["0"], 24.0) == pytest.approx(150.0)
    assert brv.steps_to(runs["fast"]["0"], 22.0) == pytest.approx(75.0)
    assert brv.steps_to(runs["fast"]["1"], 23.0) is None
    lines = brv.summary("clip", {"input_psnr": 20.0, "runs": runs})
    assert "2 seed(s), v1 final gain median +3.50 dB at 300 steps" in lines[0]
    fast = next(line for line in lines if line.strip().startswith("fast")).split()
    # gains at steps 100, 150, 200, 300: medians of (22.67, 21.0), (24, 21.5), (24.33, 21.67), (25, 22)
    assert fast[1:5] == ["+1.83", "+2.75", "+3.00", "+3.50"]
    assert fast[5:7] == ["inf", "(0.50-inf)"]  # seed 0 at half of v1's steps, seed 1 never
    assert float(fast[7]) == pytest.approx(20.0)  # 6 s over 300 steps


def test_merge_joins_seeds_of_parallel_runs_and_reads_single_seed_files():
    a = {"c": {"input_psnr": 20.0, "runs": {"v1": {"0": [(0.0, 0, 20.0)]}}}}
    b = {"c": {"input_psnr": 20.0, "runs": {"v1": {"1": [(0.0, 0, 21.0)]}, "x": {"1": [(0.0, 0, 22.0)]}}}}
    old = {"c": {"input_psnr": 20.0, "curves": {"y": [(0.0, 0, 23.0)]}}}
    merged = brv.merge([a, b, old])["c"]["runs"]
    assert sorted(merged["v1"]) == ["0", "1"] and list(merged["x"]) == ["1"] and list(merged["y"]) == ["0"]


def test_a_seed_draws_other_weights_and_crops_and_the_same_seed_repeats():
    recipe = ttq.Recipe("v3", "small", 3, batch=2, crop=16)
    train, held = _pairs(), _pairs(1)
    runs = [ttq.train_recipe(recipe, train, held, 1.0, 1, "fp32", seed=s) for s in (0, 0, 1)]
    finals = [c[-1][2] for c in runs]
    assert finals[0] == finals[1] and finals[0] != finals[2]

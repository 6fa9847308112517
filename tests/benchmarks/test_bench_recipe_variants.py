"""benchmarks/bench_recipe_variants.py: its two options do what they say, and nothing outside the run changes."""

from __future__ import annotations

import sys

import numpy as np
import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_recipe_variants as brv  # noqa: E402
import bench_time_to_quality as ttq  # noqa: E402


def _pairs(n: int = 2, size: int = 32) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [(rng.random((size, size, 3), dtype=np.float32), rng.random((size, size, 3), dtype=np.float32))
            for _ in range(n)]


def test_zero_init_and_gradient_clipping_apply_inside_the_run_only(monkeypatch):
    seen: dict[str, object] = {}
    real_train = ttq.train_recipe

    def spy(recipe, train, held, scale, evals, precision):
        net = ttq.build_model(recipe.size, recipe.architecture)
        blocks = [m for m in net.modules() if isinstance(m, brv.model_mod.ResBlock)]
        seen["zeroed"] = bool(blocks) and all(not b.conv2.weight.any() and not b.conv2.bias.any() for b in blocks)
        p = torch.nn.Parameter(torch.ones(4))
        opt = torch.optim.Adam([p], lr=0.0)
        p.grad = torch.full((4,), 10.0)  # L2 norm 20
        opt.step()
        seen["norm"] = float(p.grad.norm())
        return real_train(recipe, train, held, scale, evals, precision)

    monkeypatch.setattr(ttq, "train_recipe", spy)
    build_before, adam_before = ttq.build_model, torch.optim.Adam
    variant = brv.Variant(ttq.Recipe("v2", "small", 4, batch=2, crop=16), zero=True, clip=0.1)
    curve = brv.run_variant(variant, _pairs(), _pairs(1), evals=1)
    assert seen["zeroed"] is True and abs(seen["norm"] - 0.1) < 1e-6  # clipped from 20 to 0.1 before the step
    assert [step for _, step, _ in curve] == [0, 4]
    assert ttq.build_model is build_before and torch.optim.Adam is adam_before  # restored after the run
    net = ttq.build_model("small", "v2")  # outside the run: the product's initialisation again
    assert any(m.conv2.weight.any() for m in net.modules() if isinstance(m, brv.model_mod.ResBlock))


def test_variant_networks_are_registered_only_when_the_benchmark_runs():
    from trainer.model import MODEL_SIZES_V2

    assert not set(brv.VARIANT_SIZES) & set(MODEL_SIZES_V2)  # importing it changes nothing in the product


def test_full_resolution_ends_start_as_the_identity_at_any_size():
    net = brv.FullResEnds()
    x = torch.rand(2, 3, 37, 50)
    assert torch.equal(net(x), x)  # its last conv is zero, as every cuetrain network starts
    assert sum(p.numel() for p in net.parameters()) == 1_043_091

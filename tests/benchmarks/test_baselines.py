"""benchmarks/lib/baselines.py: the ESPCN upres baseline and the v2 network (v3's class with a 2x space-to-depth stem),
which left the product (issue 49) but stay what the time-to-quality benchmarks compare with."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from lib import baselines  # noqa: E402
from lib.baselines import build_espcn  # noqa: E402
from trainer.core.channels import ChannelPlan  # noqa: E402
from trainer.learn.model import count_parameters, model_config_from_dict, network  # noqa: E402

from tests.trainer.learn.test_model_upres import bilinear, nudge  # noqa: E402

RGBA_OUT = ChannelPlan(("R", "G", "B"), ("R", "G", "B", "A"))
#: trainer/learn/model.py at commit 42a93984, when v2 was a product architecture (tests/trainer/learn/
#: test_model_channels.py checks the kept copy against that commit).
REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "model_before_channels_42a93984.py.txt"


@pytest.fixture(scope="module")
def old_model():
    """The model.py of when v2 was a product architecture, imported as its own module."""
    name = "_model_with_v2"
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader=None))
    sys.modules[name] = module  # dataclasses look their module up by name
    exec(compile(REFERENCE.read_text(encoding="utf-8"), f"<{REFERENCE.name}>", "exec"), module.__dict__)
    yield module
    sys.modules.pop(name, None)


@pytest.mark.parametrize("scale", [1, 2])
def test_v2_is_the_v2_network_the_product_had(old_model, scale):
    """Same parameter names, init draws and outputs as the product's v2 before it left (and the same recorded
    config): benchmark results stay comparable with docs/studies/time_to_quality.md's."""
    torch.manual_seed(7)
    old = old_model.build_model("small", "v2", scale=scale)
    torch.manual_seed(7)
    new = baselines.build_model("small", "v2", scale=scale)
    a, b = old.state_dict(), new.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    x = torch.rand(2, 3, 13, 17)
    with torch.no_grad():
        assert torch.equal(nudge(old).eval()(x), nudge(new).eval()(x))
    old_cfg = dataclasses.asdict(old_model.model_config("small", "v2", scale))
    assert {k: v for k, v in dataclasses.asdict(baselines.MODEL_SIZES_V2["small"]).items() if k in old_cfg} == {
        **old_cfg, "scale": 1}


@pytest.mark.parametrize("size,params", [("small", 1_012_204), ("medium", 9_499_740), ("large", 68_418_252)])
def test_v2_parameter_counts_identity_and_odd_sizes(size, params):
    net = baselines.build_model(size, "v2")
    assert count_parameters(net) == params
    if size == "small":
        x = torch.rand(1, 3, 37, 51)
        assert torch.equal(net(x), x)  # zero-initialised tail: the untrained v2 network is the identity too
        assert net.tail.out_channels == 3 * 2 ** 2  # the stem packs 2x2: Cout stem^2
        assert baselines.build_model("small", "v2", scale=2).tail.out_channels == 3 * 4 ** 2  # (stem scale)^2


def test_v2_records_round_trip_and_other_architectures_are_the_products():
    cfg = dataclasses.asdict(baselines.MODEL_SIZES_V2["small"])
    assert type(network(model_config_from_dict(cfg))) is type(baselines.build_model("small", "v2"))
    assert count_parameters(baselines.build_model("small", "v3")) == 252_627
    with pytest.raises(ValueError, match="model size 'huge'"):
        baselines.build_model("huge", "v2")


@pytest.mark.parametrize("scale", [0, -2, 1.5, True, "2"])
def test_a_bad_scale_is_refused(scale):
    with pytest.raises(ValueError, match="whole number >= 1"):
        build_espcn(scale)
    with pytest.raises(ValueError, match="whole number >= 1"):
        baselines.build_model("small", "v2", scale=scale)


@pytest.mark.parametrize("scale", [2, 4])
def test_espcn_baseline_starts_bilinear_and_scripts(scale):
    net = build_espcn(scale)
    x = torch.rand(1, 3, 9, 14)
    assert torch.equal(net(x), bilinear(x, scale))
    nudge(net)
    y = net(x)
    assert y.shape == (1, 3, 9 * scale, 14 * scale)
    torch.testing.assert_close(torch.jit.script(net)(x), y, rtol=1e-5, atol=1e-5)
    # Shi et al. 2016's layers: 5x5x3->64, 3x3x64->32, 3x3x32->3 s^2, with biases
    assert count_parameters(net) == (5 * 5 * 3 * 64 + 64) + (3 * 3 * 64 * 32 + 32) + (3 * 3 * 32 + 1) * 3 * scale ** 2


@pytest.mark.parametrize("scale", [1, 2])
def test_espcn_baseline_takes_a_plan(scale):
    net = build_espcn(scale, plan=RGBA_OUT).eval()
    x = torch.rand(1, 3, 5, 6)
    with torch.no_grad():
        y = net(x)
    base = x if scale == 1 else F.interpolate(x, scale_factor=float(scale), mode="bilinear", align_corners=False)
    assert y.shape == (1, 4, 5 * scale, 6 * scale)
    assert torch.equal(y[:, :3], base) and torch.equal(y[:, 3], torch.full_like(y[:, 3], 0.5))
    assert build_espcn(scale).tail.out_channels == 3 * scale ** 2  # the RGB baseline as before

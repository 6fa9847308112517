"""Exports of models with named channels (issue 40): model.pt and model.onnx take Cin channels and return Cout, agree
with each other, load at the libtorch floor; model.json records channels_in/channels_out/task; model_nuke.nk names
the channels as Nuke does (trainer.export.formats, compat, nuke_script; trainer.learn.run_writer.export_model)."""

from __future__ import annotations

import dataclasses
import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.export.test_nuke_script import parse_nodes
from trainer.core.channels import ChannelPlan
from trainer.export.compat import check_torchscript
from trainer.export.formats import onnx_bytes, onnx_description, torchscript_bytes, torchscript_description
from trainer.export.nuke_script import nuke_channel, nuke_script
from trainer.learn.model import build_model, model_config, network
from trainer.learn.run_writer import export_model
from trainer.record.rundir import RunPaths

MATTE = ChannelPlan(("R", "G", "B"), ("A",))
RGBA_OUT = ChannelPlan(("R", "G", "B"), ("R", "G", "B", "A"))
LAYER_MATTE = ChannelPlan(("R", "G", "B"), ("matte.A",))
PLANS = {"matte": MATTE, "colour+alpha": RGBA_OUT}


def trained_like(architecture: str, scale: int, plan: ChannelPlan) -> torch.nn.Module:
    """A small network with every weight moved off its init (a zero tail would hide the head's sigmoid and adds)."""
    if architecture == "v3-stem2":  # a space-to-depth stem (an old v2 run's model_config builds one)
        net = network(dataclasses.replace(model_config("small", "v3", scale, plan), stem=2))
    else:
        net = build_model("small", architecture, scale=scale, channels=plan)
    g = torch.Generator().manual_seed(scale)
    with torch.no_grad():
        for p in net.parameters():
            p += 0.03 * torch.randn(p.shape, generator=g)
    return net.eval()


def scripted(net: torch.nn.Module) -> torch.jit.ScriptModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return torch.jit.load(io.BytesIO(torchscript_bytes(net))).eval()


@pytest.mark.onnx
@pytest.mark.parametrize("architecture,scale", [("v3", 1), ("v3", 2), ("v3-stem2", 2)])
@pytest.mark.parametrize("task", sorted(PLANS))
def test_torchscript_and_onnx_agree_for_named_channels(architecture, scale, task):
    import onnx
    import onnxruntime as ort

    plan = PLANS[task]
    net = trained_like(architecture, scale, plan)
    ts = scripted(net)
    data = onnx_bytes(net)
    proto = onnx.load_from_string(data)
    assert {n.domain for n in proto.graph.node} <= {"", "ai.onnx"} and not proto.functions
    assert "Sigmoid" in {n.op_type for n in proto.graph.node}
    cout = len(plan.targets)
    shapes = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (proto.graph.input[0], proto.graph.output[0])]
    out_hw = ["H", "W"] if scale == 1 else [f"{scale}*H", f"{scale}*W"]
    assert shapes == [[1, 3, "H", "W"], [1, cout, *out_hw]]
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(scale)
    for h, w in [(37, 50), (1, 1), (5, 9), (16, 24)]:
        x = rng.random((1, 3, h, w), dtype=np.float32) * 1.5
        (y,) = session.run(["y"], {"x": x})
        with torch.no_grad():
            expected, eager = ts(torch.from_numpy(x)).numpy(), net(torch.from_numpy(x)).numpy()
        assert y.shape == expected.shape == (1, cout, scale * h, scale * w)
        assert np.abs(y - expected).max() < 1e-4 and np.abs(expected - eager).max() < 1e-4, (h, w)
        alpha = y[:, -1]
        assert alpha.min() >= 0 and alpha.max() <= 1  # the matte: a sigmoid
        assert alpha.std() > 0 or h * w == 1  # not a constant


@pytest.mark.parametrize("scale", [1, 2, 4])
@pytest.mark.parametrize("plan", [MATTE, RGBA_OUT, ChannelPlan(("R", "G", "B"), ("G", "A", "Z"))],
                         ids=["matte", "rgba", "other"])
@pytest.mark.parametrize("architecture", ["v1", "v3-stem2", "v3"])
def test_named_channel_models_load_at_the_floor(architecture, plan, scale, tmp_path):
    path = tmp_path / "model.pt"
    net = trained_like(architecture, scale, plan)
    path.write_bytes(torchscript_bytes(net))
    report = check_torchscript(path)
    assert report.missing == (), f"libtorch 1.12 lacks {report.missing}"
    assert {"aten::sigmoid", "aten::cat"} <= set(report.used)
    x = torch.rand(1, 3, 7, 11)
    with torch.no_grad():
        torch.testing.assert_close(scripted(net)(x), net(x), rtol=0, atol=1e-5)


def test_descriptions_name_the_channels_in_and_out():
    assert torchscript_description()["input"] == {"shape": [1, 3, "H", "W"], "dtype": "float32",
                                                  "channels": ["R", "G", "B"]}
    assert torchscript_description(2, MATTE)["output"] == {"shape": [1, 1, "2*H", "2*W"], "dtype": "float32",
                                                           "channels": ["A"]}
    onnx = onnx_description(1, RGBA_OUT)
    assert onnx["input"]["name"] == "x" and onnx["input"]["shape"] == [1, 3, "H", "W"]
    assert onnx["output"] == {"name": "y", "shape": [1, 4, "H", "W"], "dtype": "float32",
                              "channels": ["R", "G", "B", "A"]}


@pytest.mark.parametrize("plan,knob_out", [
    (None, "rgba.red, rgba.green, rgba.blue"),
    (MATTE, "rgba.alpha"),
    (RGBA_OUT, "rgba.red, rgba.green, rgba.blue, rgba.alpha"),
    (LAYER_MATTE, "matte.alpha"),
], ids=["colour", "matte", "colour+alpha", "exr-layer"])
def test_export_model_records_the_channels_in_model_json_and_the_nuke_script(tmp_path, plan, knob_out):
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    meta = {"step": 0, "channels": 3} if plan is None else {"step": 0, "channels": plan.to_dict()}
    export_model(paths, build_model("small", "v3", channels=plan), meta, onnx=False)
    record = json.loads(paths.model_meta.read_text())
    expected = plan or ChannelPlan()
    assert record["channels_in"] == ["R", "G", "B"] and record["channels_out"] == list(expected.targets)
    assert record["task"] == expected.task and record["channels"] == 3  # the Input count, for older readers
    assert record["exports"]["model.pt"]["output"]["shape"][1] == len(expected.targets)
    creator = dict(parse_nodes(paths.model_nuke.read_text()))["CatFileCreator"]
    assert creator["channelsIn"] == "rgba.red, rgba.green, rgba.blue" and creator["channelsOut"] == knob_out


@pytest.mark.parametrize("name,nuke", [
    ("R", "rgba.red"), ("G", "rgba.green"), ("B", "rgba.blue"), ("A", "rgba.alpha"),
    ("matte.A", "matte.alpha"), ("beauty.R", "beauty.red"), ("beauty.B", "beauty.blue"),
    ("depth.Z", "depth.Z"), ("matte.alpha", "matte.alpha"), ("Y", "Y"),
])
def test_nuke_channel_names(name, nuke):
    assert nuke_channel(name) == nuke


def test_nuke_script_writes_the_channel_knobs():
    nodes = dict(parse_nodes(nuke_script(Path("/show/run/model.pt"), "run", 2, ("R", "G", "B", "A"),
                                         ("beauty.R", "beauty.G", "beauty.B", "matte.A"))))
    creator = nodes["CatFileCreator"]
    assert creator["channelsIn"] == "rgba.red, rgba.green, rgba.blue, rgba.alpha"
    assert creator["channelsOut"] == "beauty.red, beauty.green, beauty.blue, matte.alpha"
    assert creator["outputScale"] == "2"
    with pytest.raises(ValueError, match="channel names are needed"):
        nuke_script(Path("/x/model.pt"), "run", 1, (), ("A",))

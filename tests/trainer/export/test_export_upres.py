"""model.pt and model.onnx of upres models (scale 2 and 4, trainer.export.formats): any H, W in, (sH, sW) out,
named ``s*H`` and ``s*W`` in the ONNX graph, the two files within 1e-4 of each other and of the eager network."""

from __future__ import annotations

import dataclasses
import io
import warnings

import numpy as np
import pytest
import torch

from trainer.export.formats import (ONNX_OPSET, onnx_bytes, onnx_description, output_shape, torchscript_bytes,
                                    torchscript_description)
from trainer.learn.model import build_model, model_config, network

pytestmark = pytest.mark.onnx
#: (H, W): odd, tiny, a multiple of 8, wide.
SIZES = [(37, 50), (1, 1), (5, 9), (16, 24), (8, 130)]


def trained_like(architecture: str, scale: int) -> torch.nn.Module:
    """A small network with every weight moved off its init (a zero tail would hide the sub-pixel path)."""
    if architecture == "v3-stem2":  # a space-to-depth stem (an old v2 run's model_config builds one)
        net = network(dataclasses.replace(model_config("small", "v3", scale), stem=2))
    else:
        net = build_model("small", architecture, scale=scale)
    g = torch.Generator().manual_seed(scale)
    with torch.no_grad():
        for p in net.parameters():
            p += 0.03 * torch.randn(p.shape, generator=g)
    return net.eval()


@pytest.mark.parametrize("architecture,scale", [("v3", 2), ("v3", 4), ("v3-stem2", 2)])
def test_upres_torchscript_and_onnx_agree_at_any_size(architecture, scale):
    import onnx
    import onnxruntime as ort

    net = trained_like(architecture, scale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.load(io.BytesIO(torchscript_bytes(net))).eval()
    data = onnx_bytes(net)
    proto = onnx.load_from_string(data)
    assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) == ONNX_OPSET
    assert {n.domain for n in proto.graph.node} <= {"", "ai.onnx"} and not proto.functions
    assert "Resize" in {n.op_type for n in proto.graph.node}  # the bilinear base image
    shapes = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (proto.graph.input[0], proto.graph.output[0])]
    assert shapes == [[1, 3, "H", "W"], [1, 3, f"{scale}*H", f"{scale}*W"]]
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(scale)
    for h, w in SIZES:
        x = rng.random((1, 3, h, w), dtype=np.float32) * 1.5  # scene-linear values above 1
        (y,) = session.run(["y"], {"x": x})
        with torch.no_grad():
            expected = scripted(torch.from_numpy(x)).numpy()
            eager = net(torch.from_numpy(x)).numpy()
        assert y.shape == expected.shape == (1, 3, scale * h, scale * w) and y.dtype == np.float32
        assert np.abs(y - expected).max() < 1e-4, (h, w)
        assert np.abs(expected - eager).max() < 1e-4, (h, w)


def test_descriptions_name_the_upres_output():
    assert output_shape(1) == [1, 3, "H", "W"] and output_shape(4) == [1, 3, "4*H", "4*W"]
    assert onnx_description()["output"]["shape"] == [1, 3, "H", "W"]
    assert onnx_description(2)["output"]["shape"] == [1, 3, "2*H", "2*W"]
    assert torchscript_description(2)["output"]["shape"] == [1, 3, "2*H", "2*W"]
    assert torchscript_description(2)["input"]["shape"] == [1, 3, "H", "W"]

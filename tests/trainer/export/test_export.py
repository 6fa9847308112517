"""The host contracts of model.pt and model.onnx (trainer.export.formats), on a model a real `cuetrain train` wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import numpy as np
import pytest
import torch
from packaging.requirements import Requirement

from tests.conftest import run_cli
from trainer.core.envvars import EnvError, read_export_onnx
from trainer.export.formats import ONNX_OPSET
from trainer.record.rundir import RunPaths, read_json

pytestmark = pytest.mark.onnx
#: (H, W) the exports must take: odd, tiny, a multiple of 4, the demo's size, wide.
SIZES = [(37, 50), (1, 1), (5, 9), (64, 64), (144, 176), (8, 130)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> RunPaths:
    """A run directory from 6 real training steps, with model.onnx (CUETRAIN_EXPORT_ONNX=1)."""
    from tests.conftest import make_pairs

    root = tmp_path_factory.mktemp("export")
    inp, tgt = make_pairs(root / "data")
    run = root / "run"
    result = run_cli("train", "--input", str(inp), "--target", str(tgt), "--run-dir", str(run), "--steps", "6",
                     "--batch-size", "4", "--crop-size", "16", "--lr", "1e-2", "--warmup-steps", "0",
                     env={"CUETRAIN_EXPORT_ONNX": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    return RunPaths.of(run)


def torch_only_path(tmp: Path) -> Path:
    """A folder holding links to torch and the packages torch requires (recursively), nothing else."""
    folder = tmp / "torch_only"
    folder.mkdir()
    todo, seen = ["torch"], set()
    while todo:
        name = todo.pop()
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        if dist.metadata["Name"].lower() in seen:
            continue
        seen.add(dist.metadata["Name"].lower())
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith(("..", "/"))}
        for top in tops:
            source = Path(dist.locate_file(top))
            if not top.endswith((".dist-info", ".pth")) and not (folder / top).exists() and source.exists():
                (folder / top).symlink_to(source)
        todo += [r.name for r in map(Requirement, dist.requires or []) if r.marker is None]
    return folder


def test_model_pt_loads_and_runs_in_a_python_that_has_only_torch(trained, tmp_path):
    script = f"""
import sys, json
sys.path.insert(0, {str(torch_only_path(tmp_path))!r})
for absent in ("numpy", "trainer", "OpenImageIO", "cue_plugin"):
    try:
        __import__(absent)
        raise SystemExit(absent + " is importable: the interpreter is not isolated")
    except ImportError:
        pass
import torch
model = torch.jit.load({str(trained.model)!r}).eval()
out = {{}}
for h, w in {SIZES!r}:
    g = torch.Generator().manual_seed(h * 1000 + w)
    x = torch.rand(1, 3, h, w, generator=g)
    with torch.no_grad():
        y = model(x)
    out[f"{{h}}x{{w}}"] = [list(y.shape), str(y.dtype), y.double().sum().item()]
print(json.dumps(out))
"""
    # -I: no PYTHONPATH, user site or cwd; -S: no site-packages; the path has torch and its requirements only
    result = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True, text=True, timeout=120,
                            env={"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    here = torch.jit.load(str(trained.model)).eval()
    for h, w in SIZES:
        shape, dtype, total = got[f"{h}x{w}"]
        assert shape == [1, 3, h, w] and dtype == "torch.float32"
        x = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(h * 1000 + w))
        with torch.no_grad():
            assert total == pytest.approx(here(x).double().sum().item(), rel=1e-6, abs=1e-6)


def test_model_onnx_matches_torchscript_within_1e_4_at_any_size(trained):
    import onnx
    import onnxruntime as ort

    proto = onnx.load(str(trained.model_onnx))
    assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) == ONNX_OPSET >= 17
    # every node in the default ONNX domain: no custom/ms-domain op that Houdini's ONNX Runtime might lack
    assert {n.domain for n in proto.graph.node} <= {"", "ai.onnx"}, {n.op_type: n.domain for n in proto.graph.node}
    assert not proto.functions  # no local functions (their ops would sit in a custom domain)
    dims = [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert (proto.graph.input[0].name, dims) == ("x", [1, 3, "H", "W"])
    session = ort.InferenceSession(str(trained.model_onnx), providers=["CPUExecutionProvider"])
    scripted = torch.jit.load(str(trained.model)).eval()
    rng = np.random.default_rng(3)
    for h, w in SIZES:
        x = rng.random((1, 3, h, w), dtype=np.float32) * 1.5  # values above 1, as scene-linear plates have
        (y,) = session.run(["y"], {"x": x})
        with torch.no_grad():
            expected = scripted(torch.from_numpy(x)).numpy()
        assert y.shape == (1, 3, h, w) and y.dtype == np.float32
        assert np.abs(y - expected).max() < 1e-4, (h, w)
        assert np.abs(expected - x).max() > 1e-3  # trained: not the identity the untrained model is


def test_model_json_lists_both_exports(trained):
    meta = read_json(trained.model_meta)
    assert set(meta["exports"]) == {"model.pt", "model.onnx"}
    assert meta["exports"]["model.onnx"]["opset"] == meta["onnx_opset"] == ONNX_OPSET
    assert (trained.root / "model_nuke.nk").is_file()  # beside model.pt, for the Runs panel's file list
    assert meta["exports"]["model.pt"]["signature"] == "forward(x: Tensor) -> Tensor"
    assert meta["min_libtorch"] == meta["exports"]["model.pt"]["min_libtorch"] == "1.12.0"  # Nuke 14's PyTorch


def test_the_trained_model_pt_loads_at_the_floor(trained):
    from trainer.export.compat import check_torchscript

    report = check_torchscript(trained.model)
    assert report.missing == () and "aten::pad" not in report.used


def test_export_onnx_switch():
    assert read_export_onnx({}) is True
    assert read_export_onnx({"CUETRAIN_EXPORT_ONNX": "0"}) is False
    with pytest.raises(EnvError, match="CUETRAIN_EXPORT_ONNX='maybe'"):
        read_export_onnx({"CUETRAIN_EXPORT_ONNX": "maybe"})

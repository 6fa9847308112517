"""model.onnx written after the run from model.pt (trainer.export.deferred, ``cuetrain export``): the same files
rank 0 writes in one go, a pending mark while it runs, nothing overwritten when another run took the folder."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.trainer.export.test_channels_export import MATTE, scripted, trained_like
from trainer.core.channels import ChannelPlan
from trainer.export.deferred import PENDING_KEY, export_onnx_of_run
from trainer.learn.model import model_config, model_config_from_dict, network
from trainer.learn.run_writer import export_model
from trainer.record.rundir import RunPaths


def build(config) -> torch.nn.Module:
    return network(model_config_from_dict(config))


def exported(folder: Path, net: torch.nn.Module, plan: ChannelPlan, scale: int, onnx: bool) -> RunPaths:
    """A run folder holding ``net``'s exports as rank 0 writes them (``run_writer.export_model``)."""
    import dataclasses

    paths = RunPaths.of(folder)
    paths.create()
    meta = {"model_size": "small", "architecture": "v3", "scale": scale, "channels": plan.to_dict(),
            "model_config": dataclasses.asdict(model_config("small", "v3", scale, plan))}
    export_model(paths, net, meta, onnx=onnx)
    return paths


def _without_times(meta: dict) -> dict:
    return {k: v for k, v in meta.items() if k not in ("exported_at",)}


@pytest.mark.onnx
@pytest.mark.parametrize("plan,scale", [(ChannelPlan(), 1), (MATTE, 2)])
def test_a_later_export_writes_what_rank_0_writes_in_one_go(tmp_path, plan, scale):
    import onnxruntime as ort

    net = trained_like("v3", scale, plan)
    later = exported(tmp_path / "later", net, plan, scale, onnx=False)
    at_once = exported(tmp_path / "at_once", net, plan, scale, onnx=True)
    assert "model.onnx" not in json.loads(later.model_meta.read_text())["exports"]
    assert export_onnx_of_run(later, build) == 0
    got, want = (json.loads(p.model_meta.read_text()) for p in (later, at_once))
    assert _without_times(got) == _without_times(want) and PENDING_KEY not in got
    x = np.random.default_rng(1).random((1, 3, 37, 50), dtype=np.float32)
    (y,) = ort.InferenceSession(str(later.model_onnx), providers=["CPUExecutionProvider"]).run(["y"], {"x": x})
    with torch.no_grad():
        expected = scripted(net)(torch.from_numpy(x)).numpy()
    assert np.abs(y - expected).max() < 1e-4


def test_a_model_json_without_model_config_clears_the_mark_and_says_why(tmp_path, caplog):
    paths = exported(tmp_path / "run", trained_like("v3", 1, ChannelPlan()), ChannelPlan(), 1, onnx=False)
    meta = json.loads(paths.model_meta.read_text())
    del meta["model_config"]
    paths.model_meta.write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="trainer.export.deferred"):
        assert export_onnx_of_run(paths, build) == 1
    assert "model.onnx not written" in caplog.text and "model_config" in caplog.text
    assert PENDING_KEY not in json.loads(paths.model_meta.read_text()) and not paths.model_onnx.exists()


def test_nothing_is_written_when_another_run_replaced_model_pt_meanwhile(tmp_path, caplog):
    paths = exported(tmp_path / "run", trained_like("v3", 1, ChannelPlan()), ChannelPlan(), 1, onnx=False)

    def build_while_another_run_exports(config) -> torch.nn.Module:
        net = build(config)
        paths.model.write_bytes(paths.model.read_bytes() + b"")  # another run's model.pt (a new mtime)
        st = paths.model.stat()
        os.utime(paths.model, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        paths.model_meta.write_text(json.dumps({"exports": {"model.pt": {}}, "theirs": True}))
        return net

    with caplog.at_level(logging.WARNING, logger="trainer.export.deferred"):
        assert export_onnx_of_run(paths, build_while_another_run_exports) == 1
    assert "changed during the export" in caplog.text and not paths.model_onnx.exists()
    assert json.loads(paths.model_meta.read_text()) == {"exports": {"model.pt": {}}, "theirs": True}

"""Precision choice, memory format and the device-agnostic data path (no GPU needed)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

from trainer.learn import precision as prec
from trainer.core.config import ConfigError, TrainConfig
from trainer.core.config_args import add_train_arguments, config_from_args
from trainer.data.crops import CropSampler
from trainer.learn.model import build_model

CPU = torch.device("cpu")


@pytest.mark.parametrize("fast, expected", [(True, "bf16"), (False, "fp32")])
def test_auto_on_cpu_picks_bf16_only_with_avx512_bf16_or_amx(monkeypatch, fast, expected):
    monkeypatch.setattr(prec, "cpu_has_fast_bf16", lambda: fast)
    p = prec.resolve_precision("auto", CPU)
    assert (p.name, p.requested, p.device_type) == (expected, "auto", "cpu")
    assert ("AVX512-BF16" in p.reason)


@pytest.mark.parametrize("capability, expected", [((9, 0), "bf16"), ((8, 0), "bf16"), ((7, 5), "fp16"),
                                                  ((7, 0), "fp16"), ((6, 1), "fp32")])
def test_auto_on_cuda_follows_compute_capability(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    p = prec.resolve_precision("auto", torch.device("cuda", 0))
    assert p.name == expected and f"{capability[0]}.{capability[1]}" in p.reason


def test_explicit_precision_wins_and_bad_names_are_refused():
    assert prec.resolve_precision("fp16", CPU).name == "fp16"
    with pytest.raises(ValueError, match="precision='half' is not one of auto, fp32, bf16, fp16"):
        prec.resolve_precision("half", CPU)
    with pytest.raises(ConfigError, match="precision='half' is not one of"):
        TrainConfig("i", "t", "r", precision="half")
    with pytest.raises(ConfigError, match="memory_format='nhwc' is not one of channels_last, contiguous"):
        TrainConfig("i", "t", "r", memory_format="nhwc")


def test_grad_scaler_only_for_fp16_and_autocast_only_for_mixed():
    x = torch.rand(2, 3, 8, 8)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    for name, scaled, dtype in (("fp32", False, torch.float32), ("bf16", False, torch.bfloat16),
                                ("fp16", True, torch.float16)):
        p = prec.Precision(name, name, "cpu", "test")
        assert p.grad_scaler().is_enabled() is scaled
        with p.autocast():
            assert conv(x).dtype == dtype
        assert conv.weight.dtype == torch.float32  # master weights untouched


def test_cli_flags_round_trip_through_to_argv():
    ap = argparse.ArgumentParser()
    add_train_arguments(ap)
    ns = ap.parse_args(["--input", "i", "--target", "t", "--run-dir", "r", "--precision", "bf16",
                        "--memory-format", "contiguous", "--compile"])
    c = config_from_args(ns)
    assert (c.precision, c.memory_format, c.compile) == ("bf16", "contiguous", True)
    assert config_from_args(ap.parse_args(c.to_argv())) == c
    assert "--precision" not in TrainConfig("i", "t", "r").to_argv()  # defaults are omitted


def test_cudnn_benchmark_is_switched_on_for_cuda_only(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    prec.configure_backends(CPU)
    assert torch.backends.cudnn.benchmark is False
    prec.configure_backends(torch.device("cuda", 0))
    assert torch.backends.cudnn.benchmark is True


def test_compile_is_opt_in(monkeypatch):
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda m: compiled.append(m) or m)
    net = torch.nn.Linear(2, 2)
    assert prec.maybe_compile(net, False) is net and not compiled
    assert prec.maybe_compile(net, True) is net and compiled == [net]


def test_exported_copy_is_float32_contiguous_on_cpu():
    net = build_model("small", "v1").to(memory_format=torch.channels_last)
    plain = prec.float32_contiguous(net)
    assert any(not p.is_contiguous() for p in net.parameters())  # channels_last conv weights
    assert all(p.dtype == torch.float32 and p.is_contiguous() and p.device.type == "cpu" for p in plain.parameters())
    x = torch.rand(1, 3, 20, 24)
    assert torch.allclose(plain(x), net(x), atol=1e-6)


def _frames(n: int = 3, h: int = 20, w: int = 30) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [(rng.random((h, w, 3)).astype(np.float16), rng.random((h, w, 3)).astype(np.float16)) for _ in range(n)]


def _numpy_cut(frames, crop: int, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: slice, flip (h: columns, v: rows) and stack in numpy, as cuetrain did before."""
    out = ([], [])
    for f, y, x, fh, fv in rows.tolist():
        for k in (0, 1):
            a = frames[f][k][y:y + crop, x:x + crop]
            a = a[:, ::-1] if fh else a
            out[k].append(a[::-1] if fv else a)
    return tuple(torch.from_numpy(np.stack(o).astype(np.float32)).permute(0, 3, 1, 2) for o in out)


@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_crops_cut_by_one_gather_equal_the_numpy_reference(fmt):
    f = _frames()
    s = CropSampler(f, 8, 16, seed=1, device="cpu", memory_format=fmt)
    for step in range(4):
        rows = s.coords(step)
        assert {0, 1} <= set(rows[:, 3].tolist()) and {0, 1} <= set(rows[:, 4].tolist())  # both flips drawn
        batch, (ref_in, ref_tgt) = s.cut(rows), _numpy_cut(f, 8, rows)
        assert torch.equal(batch.input, ref_in) and torch.equal(batch.target, ref_tgt)
        assert batch.input.dtype == torch.float32 and batch.input.is_contiguous(memory_format=fmt)


def test_template_precision_applies_unless_the_config_chose_one(tmp_path):
    from cue_plugin.submit import templates
    from cue_plugin.submit.spec import FarmError

    (tmp_path / "ampere.toml").write_text('world_size = 2\nprecision = "bf16"\n')
    people = dict(show="demo", shot="sh010", user="artist", folders=[tmp_path])
    train = TrainConfig("i", "t", str(tmp_path / "run"))
    assert templates.make_job(train, template="ampere", **people).train.precision == "bf16"
    chosen = TrainConfig("i", "t", str(tmp_path / "run"), precision="fp32")
    assert templates.make_job(chosen, template="ampere", **people).train.precision == "fp32"
    (tmp_path / "bad.toml").write_text('world_size = 2\nprecision = "fp8"\n')
    with pytest.raises(FarmError, match=r"bad.toml: precision='fp8' is not one of auto, fp32, bf16, fp16"):
        templates.load_template("bad", [tmp_path])


@pytest.mark.parametrize("forced, expected", [("0", "fp32"), ("1", "bf16")])
def test_the_cpu_bf16_test_hook_turns_auto_either_way_in_a_child_process(forced, expected):
    """The suite's ``--cpu-bf16`` option (tests/conftest.py) reaches the trainers the tests start."""
    import os
    import subprocess
    import sys

    from tests.conftest import CHILD_PYTHONPATH, ROOT

    code = "import torch; from trainer.learn.precision import resolve_precision as r; print(r('auto', torch.device('cpu')).name)"
    env = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, "CUETRAIN_TEST_CPU_BF16": forced}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == [expected], out.stderr

"""model.pt against the floor's operator list (trainer.export.compat), for every network build_model makes."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainer.export.formats import torchscript_bytes
from trainer.export.compat import FLOOR_OPS_FILE, MIN_LIBTORCH, check_torchscript, load_op_list, main
from trainer.learn.model import ARCHITECTURES, MODEL_SIZES, build_model


class _FPadReplicate(nn.Module):
    """The padding of 69d6e89's pad_to_multiple: F.pad(mode="replicate"), i.e. aten::pad."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, [0, 3, 0, 1], mode="replicate")


class _RmsNorm(nn.Module):
    """An operator newer than the floor: aten::rms_norm arrived in torch 2.4."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, [x.shape[-1]])


def _save(module: nn.Module, path) -> None:
    path.write_bytes(torchscript_bytes(module))


def test_fixture_names_its_source_release_and_commit():
    header = "".join(line for line in FLOOR_OPS_FILE.read_text().splitlines(keepends=True) if line.startswith("#"))
    assert MIN_LIBTORCH == "1.12.0"
    assert "67ece03c8cd632cce9523cd96efde6f2d1cc8121/aten/src/ATen/native/native_functions.yaml" in header
    ops = load_op_list()
    assert {"aten::conv2d", "aten::cat", "aten::slice.Tensor", "aten::size", "prim::RaiseException"} <= ops
    assert "aten::rms_norm" not in ops and all(re.fullmatch(r"(aten|prim)::\w+(\.\w+)?", op) for op in ops)


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
@pytest.mark.parametrize("size", sorted(MODEL_SIZES))
def test_every_model_size_loads_at_the_floor(size, architecture, tmp_path):
    path = tmp_path / "model.pt"
    _save(build_model(size, architecture), path)
    report = check_torchscript(path)
    assert report.missing == (), f"{architecture} {size}: libtorch {MIN_LIBTORCH} lacks {report.missing}"
    assert "aten::pad" not in report.used and "aten::conv2d" in report.used
    assert ("aten::cat" in report.used) == (architecture in ("v1", "unet"))  # concatenated skips; v3 adds them
    assert ("aten::pixel_shuffle" in report.used) == (architecture == "v3")  # v3's way up
    assert ("aten::max_pool2d" in report.used) == (architecture == "unet")  # unet's way down
    assert report.archive_version <= 3  # the record 1.12 reads (issue 21: the demo's archive had 3)


def test_the_69d6e89_padding_is_flagged_when_the_release_lacks_aten_pad(tmp_path, capsys):
    path = tmp_path / "old.pt"
    _save(_FPadReplicate(), path)
    report = check_torchscript(path)
    assert "aten::pad" in report.used
    without_pad = load_op_list() - {"aten::pad"}  # e.g. libtorch 1.10 (pytorch/pytorch#90301)
    assert check_torchscript(path, without_pad).missing == ("aten::pad",)
    ops_file = tmp_path / "ops.txt"
    ops_file.write_text("\n".join(sorted(without_pad)))
    assert main([str(path), "--ops", str(ops_file)]) == 1
    assert "MISSING aten::pad" in capsys.readouterr().out


def test_an_operator_newer_than_the_floor_fails(tmp_path):
    path = tmp_path / "new.pt"
    _save(_RmsNorm(), path)
    assert check_torchscript(path).missing == ("aten::rms_norm",)
    assert main([str(path)]) == 1


@pytest.mark.parametrize("scale", [2, 4])
@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_upres_models_load_at_the_floor(architecture, scale, tmp_path):
    """The bilinear upsample and the sub-pixel shuffle of an upres model are libtorch 1.12 operators."""
    path = tmp_path / "model.pt"
    _save(build_model("small", architecture, scale=scale), path)
    report = check_torchscript(path)
    assert report.missing == (), f"{architecture} scale {scale}: libtorch {MIN_LIBTORCH} lacks {report.missing}"
    assert {"aten::upsample_bilinear2d.vec", "aten::pixel_shuffle"} <= set(report.used)
    assert "aten::pad" not in report.used and report.archive_version <= 3

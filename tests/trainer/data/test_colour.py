"""Colour management (trainer.data.colour): OCIO conversions, training in the working space, inference back."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from tests.conftest import run_cli
from trainer.data.colour import ColourError, ColourSpec, to_display, working_pairs
from trainer.core.config import ConfigError, TrainConfig
from trainer.data.images import read_image, write_image
from trainer.record.rundir import RunPaths, read_json

LINEAR = "Linear Rec.709 (sRGB)"
LOG = ColourSpec(LINEAR, "ACEScct")


def hdr_ramp() -> np.ndarray:
    """(6, 8, 3) scene-linear values from 0 to 16."""
    return np.linspace(0.0, 16.0, 6 * 8 * 3, dtype=np.float32).reshape(6, 8, 3)


def test_linear_to_acescct_and_back():
    rgb = hdr_ramp()
    log = LOG.to_working(rgb)
    assert 0.0 < log.max() < 1.0 < rgb.max()  # ACEScct keeps 16.0 below 1
    np.testing.assert_allclose(LOG.from_working(log), rgb, rtol=1e-4, atol=1e-4)
    assert ColourSpec().active is False and np.array_equal(ColourSpec().to_working(rgb), rgb)


def test_display_values_tone_map_highlights():
    shown = to_display(hdr_ramp(), LINEAR)
    assert shown.max() <= 1.05 and np.all(np.diff(shown[..., 1].ravel()) >= -1e-6)  # monotone, ~0..1


def test_unknown_spaces_and_half_given_pairs_are_refused():
    with pytest.raises(ColourError, match="'ACEScc t' is not in .*use one of: .*ACEScct"):
        ColourSpec(LINEAR, "ACEScc t").check()
    with pytest.raises(ConfigError, match="--colorspace and --working-space go together"):
        TrainConfig(input_dir="i", target_dir="t", run_dir="r", colorspace=LINEAR)


def test_working_pairs_converts_both_sides_in_float16():
    pair = (hdr_ramp().astype(np.float16), (hdr_ramp() / 2).astype(np.float16))
    ((a, b),) = working_pairs([pair], LOG)
    assert a.dtype == np.float16 and b.dtype == np.float16
    np.testing.assert_allclose(a, LOG.to_working(pair[0]), atol=1e-3)
    assert working_pairs([pair], ColourSpec())[0] is pair


def save_clamp_model(run: RunPaths, colour: ColourSpec) -> None:
    """A TorchScript model that clamps at 1 (as a display-referred network would), with its model.json."""
    class Clamp(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.clamp(x, max=1.0)

    run.root.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(Clamp()), str(run.model))
    run.model_meta.write_text(json.dumps({"colour": colour.to_dict()}))


@pytest.mark.parametrize("colour", [LOG, ColourSpec()], ids=["ACEScct", "none"])
def test_infer_converts_to_the_recorded_working_space_and_back(tmp_path, colour):
    run = RunPaths.of(tmp_path / "run")
    save_clamp_model(run, colour)
    (tmp_path / "in").mkdir()
    write_image(tmp_path / "in" / "plate.1001.exr", hdr_ramp(), like=None)
    result = run_cli("infer", "--model", str(run.model), "--input", str(tmp_path / "in"), "--output",
                     str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr[-2000:]
    out, src = read_image(tmp_path / "out" / "plate.1001.exr"), read_image(tmp_path / "in" / "plate.1001.exr")
    if colour.active:  # the model saw ACEScct values (all < 1): nothing clamped, linear values come back
        np.testing.assert_allclose(out, src, rtol=2e-3, atol=2e-3)
    else:  # the model saw linear values: highlights clamped at 1
        assert out.max() == 1.0 and np.array_equal(out, np.minimum(src, 1.0))


def test_training_runs_in_the_working_space_and_records_it(pairs, tmp_path):
    run = RunPaths.of(tmp_path / "run")
    result = run_cli("train", "--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir", str(run.root),
                     "--steps", "2", "--batch-size", "2", "--crop-size", "16", "--colorspace",
                     "sRGB Encoded Rec.709 (sRGB)", "--working-space", "ACEScct")
    assert result.returncode == 0, result.stderr[-2000:]
    meta = read_json(run.model_meta)
    assert meta["colour"] == {"colorspace": "sRGB Encoded Rec.709 (sRGB)", "working_space": "ACEScct",
                              "config": ColourSpec().config}
    bad = run_cli("train", "--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir", str(tmp_path / "r2"),
                  "--steps", "1", "--colorspace", LINEAR, "--working-space", "nope")
    assert bad.returncode == 2 and "colour space 'nope' is not in" in bad.stderr

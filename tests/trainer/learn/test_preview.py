"""Preview frames (``--preview``, issue 40): which frames are read, how the model's output on them is drawn, where
rank 0 writes it, and the warning for a preview frame that is a training frame."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import torch

from trainer.core.channels import ChannelPlan
from trainer.data.colour import ColourSpec
from trainer.data.images import DataError, read_image, write_image
from trainer.learn.preview import (MIN_CELL, PREVIEW_GAP, PREVIEW_HEADER, check_outside_data, load_preview_frames,
                                   preview_files, render_preview)
from trainer.learn.run_writer import RunWriter
from trainer.record.rundir import RunPaths

RGB = ChannelPlan()
MATTE = ChannelPlan.parse("R,G,B", "A")


def _frames(folder, count: int, height: int = 8, width: int = 12) -> list:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(1, count + 1):
        path = folder / f"plate.{i:04d}.png"
        write_image(path, np.full((height, width, 3), i / 255.0, np.float32))
        paths.append(path)
    return paths


class Scale(torch.nn.Module):
    """A stand-in network: ``gain`` x the input (repeated ``scale`` x), ``out`` channels; records its mode."""

    def __init__(self, gain: float = 0.5, out: int = 3, scale: int = 1) -> None:
        super().__init__()
        self.gain, self.out, self.scale, self.modes = gain, out, scale, []
        self.w = torch.nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.modes.append((self.training, torch.is_grad_enabled()))
        y = (x[:, :1].expand(-1, self.out, -1, -1) if self.out != x.shape[1] else x) * self.gain * self.w
        return y.repeat_interleave(self.scale, dim=-2).repeat_interleave(self.scale, dim=-1)


def _ink(band: np.ndarray) -> np.ndarray:
    return (band.max(axis=2) > 0.6).any(axis=0)


# ----------------------------------------------------------------------------------------------
# Which frames


def test_a_folder_gives_up_to_limit_frames_evenly_spread_first_and_last_included(tmp_path):
    paths = _frames(tmp_path / "preview", 9)
    (tmp_path / "preview" / ".plate.0005.png").write_bytes(b"hidden")  # a hidden file is no frame
    (tmp_path / "preview" / "notes.txt").write_text("not an image")
    assert preview_files(tmp_path / "preview", 4) == [paths[i] for i in (0, 3, 5, 8)]
    assert preview_files(tmp_path / "preview", 1) == [paths[0]]
    assert preview_files(tmp_path / "preview", 20) == paths
    assert preview_files(paths[4]) == [paths[4]]  # one frame: that frame


def test_load_preview_frames_reads_the_plans_input_channels_in_the_working_space(tmp_path):
    paths = _frames(tmp_path / "preview", 3)
    frames = load_preview_frames(str(tmp_path / "preview"), RGB, ColourSpec(), limit=4)
    assert [name for name, _ in frames] == [str(p) for p in paths]
    for (_, pixels), path in zip(frames, paths):
        assert pixels.shape == (8, 12, 3) and pixels.dtype == np.float16
        assert np.allclose(pixels, read_image(path), atol=1e-3)


def test_load_preview_frames_keeps_only_the_input_channels_a_matte_plan_names(tmp_path):
    write_image(tmp_path / "f.0001.png", np.full((4, 6, 3), 0.2, np.float32))
    (_, pixels), = load_preview_frames(str(tmp_path / "f.0001.png"), MATTE, ColourSpec())
    assert pixels.shape == (4, 6, 3)


@pytest.mark.parametrize("make, expect", [
    (lambda d: d / "missing", "does not exist"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "holds no images"),
    (lambda d: (d / "bad.0001.png").write_bytes(b"not a png") and d / "bad.0001.png", "cannot read image"),
])
def test_a_bad_preview_path_fails_naming_the_path_and_the_fix(tmp_path, make, expect):
    path = make(tmp_path)
    with pytest.raises(DataError) as err:
        load_preview_frames(str(path), RGB, ColourSpec())
    assert str(path) in str(err.value) and expect in str(err.value) and "--preview" in str(err.value)


# ----------------------------------------------------------------------------------------------
# The rendered image


def test_render_preview_draws_a_labelled_row_per_frame_and_restores_the_models_mode(tmp_path):
    frames = [("/shots/a/plate.0001.exr", np.full((40, 120, 3), 0.8, np.float16)),
              ("/shots/a/plate.0009.exr", np.full((16, 16, 3), 0.6, np.float16))]
    model = Scale(gain=0.5)
    model.train()
    image = render_preview(model, frames, "cpu", torch.autocast("cpu", enabled=False), RGB, step=300)
    assert model.training and model.modes == [(False, False), (False, False)]  # eval and no_grad, then back
    assert image.dtype == np.float32 and image.min() >= 0.0 and image.max() <= 1.0
    w1, w2 = 120, MIN_CELL  # the small frame is enlarged so its label fits
    h1, h2 = 40, MIN_CELL
    assert image.shape == (2 * PREVIEW_HEADER + h1 + h2 + PREVIEW_GAP, 2 * w1 + PREVIEW_GAP, 3)
    y2 = 2 * PREVIEW_HEADER + h1 + PREVIEW_GAP
    for y, w, h, value in ((PREVIEW_HEADER, w1, h1, 0.8), (y2, w2, h2, 0.6)):
        assert np.allclose(image[y:y + h, :w], value, atol=2e-3)  # Input
        assert np.allclose(image[y:y + h, w + PREVIEW_GAP:2 * w + PREVIEW_GAP], value / 2, atol=2e-3)  # Output
        for x in (0, w + PREVIEW_GAP):
            assert _ink(image[y - PREVIEW_HEADER // 2:y, x:x + w]).sum() > 10  # Input, Output labels
        assert _ink(image[y - PREVIEW_HEADER:y - PREVIEW_HEADER // 2, :w]).sum() > 10  # step and frame name
    assert np.all(image[y2:, 2 * w2 + PREVIEW_GAP:] == 1.0)  # a narrower row is padded with white


def test_a_matte_preview_shows_the_matte_over_the_input_and_in_grey():
    frames = [("plate.0001.png", np.full((20, 200, 3), 0.4, np.float16))]
    model = Scale(gain=2.5, out=1)  # the matte: 2.5 x 0.4 = 1
    image = render_preview(model, frames, "cpu", torch.autocast("cpu", enabled=False), MATTE)
    w = 200
    assert image.shape == (PREVIEW_HEADER + 20, 3 * w + 2 * PREVIEW_GAP, 3)
    cells = [image[PREVIEW_HEADER:, x * (w + PREVIEW_GAP):x * (w + PREVIEW_GAP) + w] for x in range(3)]
    assert np.allclose(cells[0], 0.4, atol=2e-3)
    assert np.allclose(cells[1], [0.7, 0.2, 0.2], atol=2e-3)  # half red over the Input where the matte is 1
    assert np.allclose(cells[2], 1.0, atol=2e-3)  # the matte in grey


def test_a_preview_row_fits_the_max_width_and_an_upres_output_sets_the_cell_size():
    wide = [("wide.png", np.full((50, 3000, 3), 0.5, np.float16))]
    image = render_preview(Scale(), wide, "cpu", torch.autocast("cpu", enabled=False), RGB, max_width=1024)
    w = (1024 - PREVIEW_GAP) // 2
    assert image.shape == (PREVIEW_HEADER + round(50 * w / 3000), 2 * w + PREVIEW_GAP, 3)
    small = [("small.png", np.full((60, 100, 3), 0.5, np.float16))]
    image = render_preview(Scale(scale=2), small, "cpu", torch.autocast("cpu", enabled=False), RGB)
    assert image.shape == (PREVIEW_HEADER + 120, 2 * 200 + PREVIEW_GAP, 3)  # the Output's size: 2 x the Input


def test_an_active_colour_space_is_shown_through_the_display_view():
    pytest.importorskip("PyOpenColorIO")
    from trainer.data.colour import to_display

    colour = ColourSpec(colorspace="Linear Rec.709 (sRGB)", working_space="ACEScct")
    plate = np.full((8, 100, 3), 0.18, np.float32)
    frames = [("plate.exr", colour.to_working(plate).astype(np.float16))]
    image = render_preview(Scale(gain=1.0), frames, "cpu", torch.autocast("cpu", enabled=False), RGB, colour)
    shown = to_display(plate, colour.colorspace)[0, 0]
    assert np.allclose(image[PREVIEW_HEADER:, :100], shown, atol=5e-3)
    assert not np.allclose(shown, frames[0][1][0, 0].astype(np.float32), atol=0.05)  # not the working space values


# ----------------------------------------------------------------------------------------------
# Writing it, and the warning


def test_the_writer_queues_an_atomic_preview_png_listed_by_step(tmp_path):
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    assert paths.previews.is_dir() and paths.list_previews() == []
    image = np.random.default_rng(0).random((30, 40, 3), dtype=np.float32)
    writer = RunWriter(paths, enabled=True, keep_checkpoints=1)
    writer.preview(100, image)
    writer.preview(20, image)
    writer.flush()
    assert paths.list_previews() == [(20, paths.previews / "step_000020.png"), (100, paths.preview(100))]
    assert np.allclose(read_image(paths.preview(100)), image, atol=1 / 255)
    assert sorted(os.listdir(paths.previews)) == ["step_000020.png", "step_000100.png"]  # no temp file left
    RunWriter(paths, enabled=False, keep_checkpoints=1).preview(200, image)  # other ranks write nothing
    assert len(paths.list_previews()) == 2


def test_a_preview_frame_from_the_training_input_is_warned_about(tmp_path, caplog):
    inputs = _frames(tmp_path / "input", 3)
    outside = _frames(tmp_path / "elsewhere", 1)[0]
    link = tmp_path / "link.png"
    link.symlink_to(inputs[1])
    with caplog.at_level(logging.WARNING, logger="trainer.learn.preview"):
        assert check_outside_data([str(outside)], tmp_path / "input") == []
        assert not caplog.records
        assert check_outside_data([str(inputs[0]), str(link), str(outside)], tmp_path / "input") == \
            [str(inputs[0]), str(link)]
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 2
    assert str(inputs[0]) in caplog.records[0].getMessage() and str(link) in caplog.records[1].getMessage()

"""Contact sheets read on their own: column labels and the step drawn in the PNG's header band."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.core.channels import ChannelPlan
from trainer.data.images import read_image, write_image
from trainer.learn.run_writer import SHEET_GAP, SHEET_HEADER, contact_sheet_image, sheet_scale


def _ink(band: np.ndarray) -> np.ndarray:
    """Columns of ``band`` (H, W, 3) holding text (pixels much brighter than the dark background)."""
    return (band.max(axis=2) > 0.6).any(axis=0)


def test_sheet_has_labelled_columns_and_the_step(tmp_path):
    crops = [torch.full((2, 3, 16, 16), v) for v in (0.1, 0.5, 0.9)]
    with_step = contact_sheet_image(*crops, step=1200)
    without = contact_sheet_image(*crops)
    cell = 16 * sheet_scale(16)
    assert with_step.shape == (SHEET_HEADER + 2 * cell + SHEET_GAP, 3 * cell + 2 * SHEET_GAP, 3)
    for col, value in enumerate((0.1, 0.5, 0.9)):  # the crops, enlarged by whole factors, unchanged
        x = col * (cell + SHEET_GAP)
        assert np.allclose(with_step[SHEET_HEADER:SHEET_HEADER + cell, x:x + cell], value)
        label_row = with_step[SHEET_HEADER // 2:SHEET_HEADER, x:x + cell]
        assert _ink(label_row).sum() > 10  # a label over every column
    step_text = with_step[:SHEET_HEADER // 2, :cell]
    assert _ink(step_text).sum() > 10 and _ink(without[:SHEET_HEADER // 2, :cell]).sum() == 0
    path = tmp_path / "sheet.png"
    write_image(path, with_step)
    assert read_image(path).shape == with_step.shape


# ----------------------------------------------------------------------------------------------
# Sheets per task (issue 40). The RGB sheet is pinned against a frozen copy of the function as it was before
# channels could be named (commit 42a9398), so the default path stays bit for bit what it was.

def _sheet_before_channels(inp, out, tgt, step=None) -> np.ndarray:
    """trainer.learn.run_writer.contact_sheet_image and _header at 42a9398, verbatim but for the names."""
    from PIL import Image, ImageDraw, ImageFont

    n, c = inp.shape[0], tgt.shape[-1]
    cell, g = c * max(1, -(-96 // c)), 2
    sheet = np.ones((30 + n * cell + (n - 1) * g, 3 * cell + 2 * g, 3), np.float32)
    for row in range(n):
        for col, t in enumerate((inp, out, tgt)):
            y, x = 30 + row * (cell + g), col * (cell + g)
            crop = t[row].detach().float().cpu().permute(1, 2, 0).numpy()
            k = cell // crop.shape[0]
            sheet[y:y + cell, x:x + cell] = crop.repeat(k, axis=0).repeat(k, axis=1)
    band = Image.new("RGB", (sheet.shape[1], 30), (40, 40, 40))
    draw = ImageDraw.Draw(band)
    font = ImageFont.load_default()
    if step is not None:
        draw.text((3, 1), f"step {step}", fill=(255, 210, 80), font=font)
    for col, label in enumerate(("Input", "Output", "Ground Truth")):
        left, _, right, _ = draw.textbbox((0, 0), label, font=font)
        x = col * (cell + g) + max(0, (cell - (right - left)) // 2)
        draw.text((x, 30 // 2 + 1), label, fill=(235, 235, 235), font=font)
    sheet[:30] = np.asarray(band, dtype=np.float32) / 255.0
    return np.clip(sheet, 0.0, 1.0)


def _crops(n: int, channels: int, side: int, seed: int) -> torch.Tensor:
    """(n, channels, side, side) float32 in -0.2..1.2 (values out of range must clip as before)."""
    return torch.rand((n, channels, side, side), generator=torch.Generator().manual_seed(seed)) * 1.4 - 0.2


@pytest.mark.parametrize("crop, scale, step", [(16, 1, 1200), (64, 1, None), (8, 2, 7), (24, 4, 100)])
def test_the_rgb_sheet_is_bit_for_bit_the_sheet_before_channels(crop, scale, step):
    inp = _crops(3, 3, crop, 1)
    out, tgt = _crops(3, 3, crop * scale, 2), _crops(3, 3, crop * scale, 3)
    before = _sheet_before_channels(inp, out, tgt, step)
    for plan in (None, ChannelPlan(), ChannelPlan.parse("R,G,B", "R,G,B")):
        now = contact_sheet_image(inp, out, tgt, step, plan=plan)
        assert now.dtype == before.dtype and now.shape == before.shape
        assert np.array_equal(now, before)


def _cell(sheet: np.ndarray, n_cols: int) -> int:
    """Cell side of a sheet with ``n_cols`` columns [pixels] (long labels widen cells past sheet_scale's)."""
    return (sheet.shape[1] - (n_cols - 1) * SHEET_GAP) // n_cols


def _cells(sheet: np.ndarray, n_cols: int, cell: int, row: int = 0) -> list[np.ndarray]:
    y = SHEET_HEADER + row * (cell + SHEET_GAP)
    return [sheet[y:y + cell, col * (cell + SHEET_GAP):col * (cell + SHEET_GAP) + cell] for col in range(n_cols)]


def _half_matte(n: int, side: int) -> torch.Tensor:
    """(n, 1, side, side): 1 on the left half, 0 on the right half."""
    m = torch.zeros((n, 1, side, side))
    m[..., : side // 2] = 1.0
    return m


def test_a_matte_sheet_shows_the_input_the_output_over_it_and_both_mattes_in_grey():
    plan = ChannelPlan.parse("R,G,B", "A")
    inp = torch.rand((2, 3, 16, 16), generator=torch.Generator().manual_seed(0))
    out = _half_matte(2, 16) * 0.9 + 0.05  # soft values: the grey column shows them as they are
    tgt = torch.rand((2, 1, 16, 16), generator=torch.Generator().manual_seed(1))
    sheet = contact_sheet_image(inp, out, tgt, step=5, plan=plan)
    cell = _cell(sheet, 4)
    assert cell % 16 == 0 and cell >= 16 * sheet_scale(16)
    assert sheet.shape == (SHEET_HEADER + 2 * cell + SHEET_GAP, 4 * cell + 3 * SHEET_GAP, 3)
    for row in range(2):
        k = cell // 16
        big = lambda t: t[row].permute(1, 2, 0).numpy().repeat(k, axis=0).repeat(k, axis=1)  # noqa: E731
        shown, over, out_grey, tgt_grey = _cells(sheet, 4, cell, row)
        assert np.array_equal(shown, big(inp))
        for grey, matte in ((out_grey, big(out)), (tgt_grey, big(tgt))):
            assert np.allclose(grey, np.repeat(matte, 3, axis=2))  # R = G = B = the matte
        rgb, a = big(inp), big(out)
        assert np.allclose(over, rgb * (1 - 0.5 * a) + np.array([1.0, 0, 0]) * 0.5 * a, atol=1e-6)
        left, right = slice(0, cell // 2), slice(cell // 2, cell)
        # tinted red where the matte is ~1 (0.95): red kept or raised, green and blue about halved
        assert (over[:, left, 0] >= rgb[:, left, 0]).all() and (over[:, left, 1:] <= 0.53 * rgb[:, left, 1:] + 1e-6).all()
        assert np.allclose(over[:, right], rgb[:, right] * 0.975 + np.array([0.025, 0, 0]), atol=1e-6)
    for x in range(4):  # a label over every column
        assert _ink(sheet[SHEET_HEADER // 2:SHEET_HEADER, x * (cell + SHEET_GAP):x * (cell + SHEET_GAP) + cell]).sum() > 10


def test_the_overlay_is_the_input_where_the_matte_is_zero_and_half_red_where_it_is_one():
    from trainer.learn.preview import overlay

    rgb = np.random.default_rng(0).random((4, 4, 3), dtype=np.float32)
    matte = np.zeros((4, 4), np.float32)
    matte[:2] = 1.0
    over = overlay(rgb, matte)
    assert np.array_equal(over[2:], rgb[2:])
    assert np.allclose(over[:2], 0.5 * rgb[:2] + np.array([0.5, 0, 0]))


def test_an_upres_matte_sheet_enlarges_the_input_under_the_overlay_by_whole_factors():
    plan = ChannelPlan.parse("R,G,B", "A")
    inp = torch.rand((1, 3, 8, 8), generator=torch.Generator().manual_seed(0))
    out, tgt = torch.zeros((1, 1, 16, 16)), torch.ones((1, 1, 16, 16))  # --scale 2: the matte is 2x the Input
    sheet = contact_sheet_image(inp, out, tgt, plan=plan)
    cell = _cell(sheet, 4)
    shown, over, out_grey, tgt_grey = _cells(sheet, 4, cell)
    big = inp[0].permute(1, 2, 0).numpy().repeat(cell // 8, axis=0).repeat(cell // 8, axis=1)
    assert np.array_equal(shown, big) and np.array_equal(over, big)  # matte 0: the Input, in blocks of 2x the Output's
    assert np.all(out_grey == 0.0) and np.all(tgt_grey == 1.0)


def test_a_colour_and_alpha_sheet_shows_rgb_and_alpha_of_output_and_ground_truth():
    plan = ChannelPlan.parse("R,G,B", "R,G,B,A")
    assert plan.task == "colour+alpha"
    inp = torch.rand((1, 3, 16, 16), generator=torch.Generator().manual_seed(0))
    out = torch.cat([torch.full((1, 3, 16, 16), 0.3), torch.ones((1, 1, 16, 16))], dim=1)
    tgt = torch.cat([torch.full((1, 3, 16, 16), 0.7), torch.zeros((1, 1, 16, 16))], dim=1)
    sheet = contact_sheet_image(inp, out, tgt, plan=plan)
    cell = _cell(sheet, 5)  # labels like "Ground Truth alpha over Input" widen the cells
    assert sheet.shape[1] == 5 * cell + 4 * SHEET_GAP and cell % 16 == 0 and cell >= 16 * sheet_scale(16)
    shown, out_rgb, out_over, tgt_rgb, tgt_over = _cells(sheet, 5, cell)
    big = inp[0].permute(1, 2, 0).numpy().repeat(cell // 16, axis=0).repeat(cell // 16, axis=1)
    assert np.array_equal(shown, big) and np.array_equal(tgt_over, big)  # Ground Truth alpha 0: the Input
    assert np.allclose(out_rgb, 0.3) and np.allclose(tgt_rgb, 0.7)
    assert np.allclose(out_over, 0.5 * big + np.array([0.5, 0, 0]))  # alpha 1: half red
    for x in range(5):
        left = x * (cell + SHEET_GAP)
        assert _ink(sheet[SHEET_HEADER // 2:SHEET_HEADER, left:left + cell]).sum() > 10


def test_the_input_rgb_is_found_by_name_or_shown_as_the_grey_of_its_first_channel():
    layered = ChannelPlan.parse("depth.Z,beauty.R,beauty.G,beauty.B", "matte.A")
    assert layered.task == "matte"
    inp = torch.stack([torch.full((16, 16), v) for v in (0.9, 0.1, 0.2, 0.3)])[None]  # Z first, then R, G, B
    matte = torch.zeros((1, 1, 16, 16))
    sheet = contact_sheet_image(inp, matte, matte, plan=layered)
    shown = _cells(sheet, 4, _cell(sheet, 4))[0]
    assert np.allclose(shown, [0.1, 0.2, 0.3])
    grey_plan = ChannelPlan.parse("Y", "A")
    sheet = contact_sheet_image(inp[:, :1], matte, matte, plan=grey_plan)
    shown = _cells(sheet, 4, _cell(sheet, 4))[0]
    assert np.allclose(shown, 0.9)

"""Contact sheets read on their own: column labels and the step drawn in the PNG's header band."""

from __future__ import annotations

import numpy as np
import torch

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

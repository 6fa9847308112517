"""Contact sheets: a labelled grid of Input, Output and Ground Truth crops, and the PNG bytes rank 0 writes.

Drawn on the training thread from crops already on the CPU (``trainer.learn.run_writer.RunWriter.contact_sheet``);
:func:`png_bytes` encodes a sheet or a preview in memory, so the write itself is one atomic
``trainer.record.rundir.atomic_write_bytes`` whose error keeps its errno (a full disk is told from other failures,
``trainer.record.storage``).
"""

from __future__ import annotations

import io
from typing import Sequence

import numpy as np
import torch

from trainer.core.channels import ChannelPlan
from trainer.learn.preview import cell, columns, header_band, label_width

SHEET_GAP = 2  # pixels between contact-sheet cells


SHEET_LABELS = ("Input", "Output", "Ground Truth")
SHEET_MIN_CELL = 96  # pixels: crops are enlarged (nearest neighbour, whole factors) to at least this width
SHEET_HEADER = 30  # pixels: the band above the grid holding the step and the column labels


def sheet_scale(crop: int) -> int:
    """Whole enlargement factor of a ``crop``-pixel cell so that its label fits (>= 1)."""
    return max(1, -(-SHEET_MIN_CELL // crop))


def contact_sheet_image(inp: torch.Tensor, out: torch.Tensor, tgt: torch.Tensor, step: int | None = None,
                        plan: ChannelPlan | None = None) -> np.ndarray:
    """Labelled grid of crops: rows = crops, columns = what the task shows, under a header band that names the
    columns and the step, so the PNG reads on its own.

    Columns (``trainer.learn.preview.columns``): Input | Output | Ground Truth for colour tasks (``plan`` None or
    RGB -> RGB: exactly the sheet cuetrain always drew); a matte: Input | Output over Input (the matte as a
    translucent red over the Input, Nuke's matte overlay) | Output matte | Ground Truth matte (grey);
    colour+alpha: Input | Output RGB | Output alpha over Input | Ground Truth RGB | Ground Truth alpha over Input.

    Args: (n, Cin, c, c) ``inp`` and (n, Cout, sc, sc) ``out`` and ``tgt`` (s = the ``--scale``, 1 for repair), their
    channels named by ``plan`` (None: R, G, B); ``step``: training step written in the header (omitted when None).
    Returns (SHEET_HEADER + n*C + (n-1)*gap, k*C + (k-1)*gap, 3) float32 clipped to 0..1 for k columns, where C =
    sc * :func:`sheet_scale` (sc), or more when a label needs it (cells enlarged by whole factors, nearest neighbour,
    so no pixel is invented: an upres run's Input is shown at the Output's size, its pixels as blocks).
    """
    cols = columns(plan)
    labels = [col.label for col in cols]
    n, c = inp.shape[0], tgt.shape[-1]
    cell_px, g = c * max(sheet_scale(c), -(-(label_width(labels) + 4) // c)), SHEET_GAP
    sheet = np.ones((SHEET_HEADER + n * cell_px + (n - 1) * g, len(cols) * cell_px + (len(cols) - 1) * g, 3),
                    np.float32)
    for row in range(n):
        sides = {side: t[row].detach().float().cpu().permute(1, 2, 0).numpy()  # (C, c, c) -> (c, c, C)
                 for side, t in (("input", inp), ("output", out), ("truth", tgt))}
        for col, column in enumerate(cols):
            y, x = SHEET_HEADER + row * (cell_px + g), col * (cell_px + g)
            img = cell(column, sides, plan)
            k = cell_px // img.shape[0]  # whole factor: the Input of an upres run is enlarged s times more
            sheet[y:y + cell_px, x:x + cell_px] = img.repeat(k, axis=0).repeat(k, axis=1)
    sheet[:SHEET_HEADER] = _header(sheet.shape[1], cell_px, g, step, labels)
    return np.clip(sheet, 0.0, 1.0)


def _header(width: int, cell_px: int, gap: int, step: int | None, labels: Sequence[str] = SHEET_LABELS) -> np.ndarray:
    """(SHEET_HEADER, width, 3) float32: dark band, the step top left, a label centred over each column
    (``trainer.learn.preview.header_band``: Pillow's built-in font, no font file is needed)."""
    return header_band(width, cell_px, gap, labels, "" if step is None else f"step {step}", SHEET_HEADER)


def png_bytes(rgb: np.ndarray) -> bytes:
    """An 8-bit RGB PNG of ``rgb`` (H, W, 3) float, clipped to 0..1 (NaN -> 0) and rounded to the nearest code value,
    as ``trainer.data.images.write_image`` writes a ``.png``; encoded in memory by Pillow.

    Raises:
        ValueError: ``rgb`` is not (H, W, 3).
    """
    from PIL import Image

    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"png_bytes needs an (H, W, 3) array, got shape {rgb.shape}")
    codes = np.rint(np.clip(np.nan_to_num(rgb.astype(np.float32), nan=0.0), 0.0, 1.0) * 255.0).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(codes), "RGB").save(buf, format="PNG")
    return buf.getvalue()

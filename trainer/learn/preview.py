"""Review images: what the network makes of the shot, drawn for an artist's eye (rank 0 writes them).

Two products, both (H, W, 3) float32 0..1 images that rank 0's writer saves as PNGs in the run directory
(``trainer.record.rundir``):

- the columns of a **contact sheet** (``contact_sheets/``, drawn by ``trainer.learn.run_writer.contact_sheet_image``
  from training crops): :func:`columns` says which columns a task shows and :func:`cell` draws one;
- **preview frames** (``previews/``, ``--preview PATH``): whole frames from outside the data set, rendered by the
  model as it trains (:func:`load_preview_frames`, :func:`render_preview`), CopyCat's "preview" of a frame the
  network never saw.

A matte is shown the way roto is reviewed in Nuke: the Viewer's *Matte overlay* display (the channel selector
offers R, G, B, A, Luminance and Matte overlay; Foundry, "Using the Viewer Controls",
learn.foundry.com/nuke/content/getting_started/using_interface/using_viewer_controls.html) lays the alpha over the
image as a translucent red, so a matte's edge is judged against the plate it cuts. :func:`overlay` draws the same:
``rgb * (1 - OVERLAY_OPACITY * m) + OVERLAY_COLOUR * OVERLAY_OPACITY * m``, so where the matte is 0 the Input shows
unchanged and where it is 1 it is tinted half red. Beside it, the matte itself in grey shows its soft values.

Columns per task (:class:`trainer.core.channels.ChannelPlan`; Ground Truth columns only on contact sheets):

==============  ============================================================================================
task            columns
==============  ============================================================================================
colour, other   Input | Output | Ground Truth (the RGB of each side by name; a side with no R, G, B: its first
                channel in grey)
matte           Input | Output over Input | Output matte | Ground Truth matte (per matte channel)
colour+alpha    Input | Output RGB | Output alpha over Input | Ground Truth RGB | Ground Truth alpha over Input
==============  ============================================================================================
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ContextManager, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from trainer.core.channels import ChannelPlan
from trainer.data.colour import ColourSpec, colour_channels, to_display, to_working_channels
from trainer.data.images import IMAGE_EXTENSIONS, DataError, read_channels
from trainer.data.sequences import frame_number

log = logging.getLogger(__name__)

#: Colour (R, G, B, 0..1) and opacity [1] of the matte overlay (Nuke's Viewer: translucent red).
OVERLAY_COLOUR = np.array([1.0, 0.0, 0.0], np.float32)
OVERLAY_OPACITY = 0.5
#: Widest preview row [pixels]: cells shrink (antialiased) so that a row of columns fits.
PREVIEW_WIDTH = 1024
#: Height of the label band above each preview row [pixels], and the gap between cells and rows [pixels].
PREVIEW_HEADER, PREVIEW_GAP = 30, 2
#: Narrowest cell [pixels]: small frames are enlarged so that their label fits (as contact sheets do).
MIN_CELL = 96


@dataclass(frozen=True)
class Column:
    """One column of a contact sheet or preview row.

    Attributes:
        label: the text over the column.
        side: ``input``, ``output`` or ``truth`` (Ground Truth): whose pixels it shows.
        show: ``image`` (the side's RGB, :func:`rgb_of`), ``grey`` (channel ``channel`` in grey) or ``over``
            (channel ``channel`` as a red overlay on the Input's RGB, :func:`overlay`).
        channel: the side's channel index for ``grey`` and ``over``; -1 for ``image``.
    """

    label: str
    side: str
    show: str = "image"
    channel: int = -1


DEFAULT_COLUMNS = (Column("Input", "input"), Column("Output", "output"), Column("Ground Truth", "truth"))


def columns(plan: ChannelPlan | None, truth: bool = True) -> tuple[Column, ...]:
    """The columns a task shows (module table); ``truth=False`` leaves the Ground Truth ones out (previews)."""
    task = plan.task if plan is not None else "colour"
    cols = _matte_columns(plan) if task == "matte" else _alpha_columns(plan) if task == "colour+alpha" \
        else DEFAULT_COLUMNS
    return tuple(c for c in cols if truth or c.side != "truth")


def _matte_columns(plan: ChannelPlan) -> list[Column]:
    """Input, then per matte: Output over Input, Output and Ground Truth in grey (named when there are several)."""
    cols = [Column("Input", "input")]
    for i, name in enumerate(plan.targets):
        what = "matte" if len(plan.targets) == 1 else name
        over = "Output over Input" if len(plan.targets) == 1 else f"Output {name} over Input"
        cols += [Column(over, "output", "over", i), Column(f"Output {what}", "output", "grey", i),
                 Column(f"Ground Truth {what}", "truth", "grey", i)]
    return cols


def _alpha_columns(plan: ChannelPlan) -> list[Column]:
    """Input | Output RGB | its alpha over Input | Ground Truth RGB | its alpha over Input (colour+alpha)."""
    alphas = list(enumerate(plan.targets))[len(plan.inputs):]

    def over(side: str, whose: str) -> list[Column]:
        return [Column(f"{whose} {'alpha' if len(alphas) == 1 else name} over Input", side, "over", i)
                for i, name in alphas]

    return [Column("Input", "input"), Column("Output RGB", "output"), *over("output", "Output"),
            Column("Ground Truth RGB", "truth"), *over("truth", "Ground Truth")]


def rgb_of(img: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """(h, w, C) with channel ``names`` -> (h, w, 3) float32: its R, G, B by name (``R``, ``layer.R``;
    ``trainer.data.colour.colour_channels``), else its first channel in grey."""
    idx = list(colour_channels(names)) if len(names) == img.shape[-1] else []
    return img[..., idx] if idx else grey(img[..., 0])


def grey(matte: np.ndarray) -> np.ndarray:
    """(h, w) -> (h, w, 3) float32: the values in R, G and B."""
    return np.repeat(np.asarray(matte, np.float32)[..., None], 3, axis=-1)


def overlay(rgb: np.ndarray, matte: np.ndarray) -> np.ndarray:
    """(h, w, 3) ``rgb`` under (H, W) ``matte`` as a translucent red (module doc) -> (H, W, 3) float32 0..1.

    An ``rgb`` smaller than the matte by a whole factor (the Input of an upres run) is enlarged by it, nearest
    neighbour. Values are clipped to 0..1 first: where the matte is 0 the result is the (clipped) ``rgb``.
    Raises ValueError: the matte is not a whole multiple of ``rgb``'s size.
    """
    k, rest = divmod(matte.shape[0], rgb.shape[0])
    if k < 1 or rest or matte.shape[1] != rgb.shape[1] * k:
        raise ValueError(f"matte {matte.shape} is not a whole multiple of the image {rgb.shape[:2]}")
    rgb = np.clip(rgb, 0.0, 1.0).repeat(k, axis=0).repeat(k, axis=1)
    a = OVERLAY_OPACITY * np.clip(matte, 0.0, 1.0)[..., None]
    return (rgb * (1.0 - a) + OVERLAY_COLOUR * a).astype(np.float32)


def cell(col: Column, sides: dict[str, np.ndarray], plan: ChannelPlan | None) -> np.ndarray:
    """One cell: ``sides`` maps ``input`` to (h, w, Cin) and ``output``/``truth`` to (sh, sw, Cout) arrays ->
    (h', w', 3) float32 (the side's size; ``over``: the matte's)."""
    inputs, targets = (plan.inputs, plan.targets) if plan is not None else (("R", "G", "B"),) * 2
    img = sides[col.side]
    if col.show == "image":
        return rgb_of(img, inputs if col.side == "input" else targets)
    if col.show == "grey":
        return grey(img[..., col.channel])
    return overlay(rgb_of(sides["input"], inputs), img[..., col.channel])


def header_band(width: int, cell_width: int, gap: int, labels: Sequence[str], text: str = "",
                height: int = PREVIEW_HEADER) -> np.ndarray:
    """(height, width, 3) float32: dark band, ``text`` top left, each label centred over its column (columns
    ``cell_width`` wide, ``gap`` apart). Drawn with Pillow's built-in font (no font file is needed)."""
    from PIL import Image, ImageDraw, ImageFont

    band = Image.new("RGB", (width, height), (40, 40, 40))
    draw = ImageDraw.Draw(band)
    font = ImageFont.load_default()
    if text:
        draw.text((3, 1), text, fill=(255, 210, 80), font=font)
    for col, label in enumerate(labels):
        left, _, right, _ = draw.textbbox((0, 0), label, font=font)
        x = col * (cell_width + gap) + max(0, (cell_width - (right - left)) // 2)
        draw.text((x, height // 2 + 1), label, fill=(235, 235, 235), font=font)
    return np.asarray(band, dtype=np.float32) / 255.0


def label_width(labels: Sequence[str]) -> int:
    """Width of the widest label in Pillow's built-in font [pixels]."""
    from PIL import Image, ImageDraw, ImageFont

    draw, font = ImageDraw.Draw(Image.new("RGB", (1, 1))), ImageFont.load_default()
    return max((int(draw.textbbox((0, 0), s, font=font)[2]) for s in labels), default=0)


# ----------------------------------------------------------------------------------------------
# Preview frames (--preview)


def preview_files(path: str | os.PathLike[str], limit: int = 4) -> list[Path]:
    """The frames ``--preview`` names: the file itself, or up to ``limit`` images of a folder, evenly spread over
    its sequence (first and last included; by frame number, then name; hidden files skipped).

    Raises:
        DataError: the path is missing, or the folder holds no images (names the path and the fix).
        ValueError: ``limit`` < 1.
    """
    if limit < 1:
        raise ValueError(f"preview limit {limit} must be at least 1 frame")
    p = Path(path)
    if not p.exists():
        raise DataError(f"--preview {p} does not exist; give a frame, or a folder of a few frames, outside the "
                        "training data (or leave --preview empty)")
    if p.is_file():
        return [p]
    images = sorted((f for f in p.iterdir() if f.suffix.lower() in IMAGE_EXTENSIONS and not f.name.startswith(".")
                     and f.is_file()), key=lambda f: (frame_number(f.name) or 0, f.name))
    if not images:
        raise DataError(f"--preview folder {p} holds no images ({', '.join(IMAGE_EXTENSIONS)}); put a few frames "
                        "in it or give one frame's path")
    if len(images) <= limit:
        return images
    return [images[i] for i in np.linspace(0, len(images) - 1, limit).round().astype(int)]


def load_preview_frames(path: str, plan: ChannelPlan, colour: ColourSpec, limit: int = 4) -> list[tuple[str, np.ndarray]]:
    """Read the ``--preview`` frames (:func:`preview_files`) once, for :func:`render_preview` at every interval.

    Returns:
        ``[(frame path, (H, W, len(plan.inputs)) float16)]``: the plan's input channels
        (``trainer.data.images.read_channels``), colour channels in the working space (float16 halves the memory of
        the frames kept; 4 UHD frames of RGB take about 200 MB).

    Raises:
        DataError: missing path, a folder with no images, an unreadable frame or one without the input channels
            (the message names the file and the fix).
    """
    frames = []
    for f in preview_files(path, limit):
        try:
            pixels = read_channels(f, plan.inputs)
        except DataError as exc:
            raise DataError(f"--preview: {exc}") from exc
        frames.append((str(f), to_working_channels(colour, pixels, plan.inputs).astype(np.float16)))
    return frames


def check_outside_data(preview_paths: Sequence[str | os.PathLike[str]], input_dir: str | os.PathLike[str]) -> list[str]:
    """Log a WARNING for each preview frame that is also a training Input frame (the same file, links resolved):
    it then shows what the network memorised, not how it does on the rest of the shot.

    Returns the preview paths that are training frames (empty when none, or when ``input_dir`` is not a folder).
    """
    try:
        training = {f.resolve() for f in Path(input_dir).iterdir() if f.is_file()}
    except OSError:
        return []
    inside = [str(p) for p in preview_paths if Path(p).resolve() in training]
    for p in inside:
        log.warning("--preview frame %s is a training Input frame (in %s): its preview shows what the network "
                    "learnt from it, not how it does on frames it never saw; pick a frame outside the data set", p,
                    input_dir)
    return inside


def render_preview(model: torch.nn.Module, frames: Sequence[tuple[str, np.ndarray]], device: torch.device | str,
                   precision_ctx: ContextManager[Any], plan: ChannelPlan, colour: ColourSpec | None = None,
                   step: int | None = None, max_width: int = PREVIEW_WIDTH) -> np.ndarray:
    """The model on whole frames, one row per frame: Input | Output (a matte: Output over Input | Output matte;
    :func:`columns` without the Ground Truth), under a band naming the step, the frame and the columns.

    The model runs on each full frame in ``eval()`` mode under ``torch.no_grad()`` and ``precision_ctx`` (e.g.
    ``Precision.autocast()``), one frame at a time; its mode is restored after. Both sides are then shrunk
    (antialiased bilinear) so a row fits ``max_width``, or enlarged to at least :data:`MIN_CELL` and the labels'
    width. With an active ``colour``, colour channels go back from the working space to the plates' space and
    through the display view (``trainer.data.colour.to_display``); mattes are shown as they are.

    Args:
        frames: :func:`load_preview_frames`' ``[(path, (H, W, Cin))]``.
        device: where the model is.
    Returns:
        (H', W', 3) float32 0..1; rows of different widths are padded with white.
    Raises:
        ValueError: ``frames`` is empty.
    """
    if not frames:
        raise ValueError("render_preview needs at least one frame; check --preview")
    cols = columns(plan, truth=False)
    text = "" if step is None else f"step {step}  "
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), precision_ctx:
            rows = [_row(model, frame, torch.device(device), plan, colour, cols, text + Path(name).name, max_width)
                    for name, frame in frames]
    finally:
        model.train(was_training)
    width = max(r.shape[1] for r in rows)
    gap = np.ones((PREVIEW_GAP, width, 3), np.float32)
    padded = [np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0)), constant_values=1.0) for r in rows]
    return np.clip(np.concatenate([p for r in padded for p in (gap, r)][1:], axis=0), 0.0, 1.0)


def _row(model: torch.nn.Module, frame: np.ndarray, device: torch.device, plan: ChannelPlan,
         colour: ColourSpec | None, cols: tuple[Column, ...], text: str, max_width: int) -> np.ndarray:
    """One frame's labelled row: (PREVIEW_HEADER + h, n * w + (n - 1) * gap, 3) float32."""
    x = torch.from_numpy(np.ascontiguousarray(frame, np.float32)).permute(2, 0, 1)[None].to(device)  # (1, Cin, H, W)
    y = model(x)  # (1, Cout, sH, sW), s = --scale
    n, g = len(cols), PREVIEW_GAP
    need = max(MIN_CELL, label_width([c.label for c in cols]) + 4)
    w = max(1, min((max_width - (n - 1) * g) // n, max(y.shape[-1], need)))
    h = max(1, round(y.shape[-2] * w / y.shape[-1]))
    sides = {"input": _display(_fit(x, h, w), plan.inputs, colour),
             "output": _display(_fit(y, h, w), plan.targets, colour)}
    del x, y  # one frame on the device at a time
    row = np.ones((PREVIEW_HEADER + h, n * w + (n - 1) * g, 3), np.float32)
    for i, col in enumerate(cols):
        row[PREVIEW_HEADER:, i * (w + g):i * (w + g) + w] = cell(col, sides, plan)
    row[:PREVIEW_HEADER] = header_band(row.shape[1], w, g, [c.label for c in cols], text)
    return row


def _fit(t: torch.Tensor, h: int, w: int) -> np.ndarray:
    """(1, C, H, W) -> (h, w, C) float32 on the CPU, resampled (antialiased bilinear)."""
    t = F.interpolate(t.float(), size=(h, w), mode="bilinear", antialias=True, align_corners=False)
    return t[0].permute(1, 2, 0).cpu().numpy()


def _display(img: np.ndarray, names: Sequence[str], colour: ColourSpec | None) -> np.ndarray:
    """(h, w, C) in the working space -> the same with its colour channels as the display shows the plates."""
    idx = list(colour_channels(names))
    if colour is None or not colour.active or not idx:
        return img
    out = img.copy()
    out[..., idx] = to_display(colour.from_working(img[..., idx]), colour.colorspace, colour.config)
    return out


class Previews:
    """The run's ``--preview`` frames and their rendering, for the training loop.

    Every rank lists the frames (:func:`preview_files`), so a bad ``--preview`` fails the whole gang alike before
    training (bad input, exit 2); rank 0 (``enabled``) reads them once (:func:`load_preview_frames`), warns when one
    is a training frame (:func:`check_outside_data`) and renders them at every contact sheet (:meth:`render`).

    Raises:
        DataError: see :func:`load_preview_frames`.
    """

    def __init__(self, cfg: Any, colour: ColourSpec, enabled: bool) -> None:
        self.colour = colour
        self.plan: ChannelPlan = cfg.channels
        self.frames: list[tuple[str, np.ndarray]] = []
        if not cfg.preview:
            return
        preview_files(cfg.preview)  # every rank: a missing path fails the gang, not only rank 0
        if enabled:
            self.frames = load_preview_frames(cfg.preview, self.plan, colour)
            check_outside_data([p for p, _ in self.frames], cfg.input_dir)

    def render(self, step: int, model: torch.nn.Module, device: torch.device, precision: Any, writer: Any) -> None:
        """Render the frames with ``model`` (under ``precision.autocast()``) and queue ``previews/step_N.png``
        through ``writer`` (``RunWriter.preview``); nothing without frames."""
        if self.frames:
            image = render_preview(model, self.frames, device, precision.autocast(), self.plan, self.colour, step)
            writer.preview(step, image)

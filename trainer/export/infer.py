"""``cuetrain infer``: full-frame inference with an exported model, same file format out.

An upres model (``model.json`` ``scale`` s of 2 or 4, ``trainer.learn.model``) returns frames s times the input's
width and height; they are written at that size, with the input's format, bit depth, channels and metadata
(:func:`trainer.data.write_like.write_like` scales the windows and resizes the channels the model does not make).
"""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path

import numpy as np
import torch

from trainer.data.colour import ColourSpec
from trainer.data.images import DataError, find_sequence, read_image

log = logging.getLogger(__name__)


def load_model(path: str | Path, device: torch.device | None = None) -> torch.jit.ScriptModule:
    """Load an exported ``model.pt`` (TorchScript) in eval mode.

    Raises:
        DataError: missing file or not a TorchScript model (names the path).
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"model {p} does not exist; pass RUN_DIR/model.pt of a finished run")
    try:
        with warnings.catch_warnings():  # TorchScript is deprecated upstream from torch 2.10 (see README)
            warnings.simplefilter("ignore", DeprecationWarning)
            model = torch.jit.load(str(p), map_location=device or "cpu")
    except Exception as exc:  # torch raises RuntimeError/ValueError for non-TorchScript files
        raise DataError(f"{p} is not a cuetrain TorchScript model ({exc}); pass RUN_DIR/model.pt") from None
    return model.eval()


def apply_model(model: torch.nn.Module, rgb: np.ndarray, device: torch.device | None = None) -> np.ndarray:
    """Run the model on one full frame: (H, W, 3) float -> (sH, sW, 3) float32 (s: the model's upres factor, 1
    for a same-size model)."""
    x = torch.from_numpy(np.ascontiguousarray(rgb, dtype=np.float32)).permute(2, 0, 1)[None]  # (1, 3, H, W)
    with torch.no_grad():
        y = model(x.to(device or "cpu"))
    return y[0].permute(1, 2, 0).float().cpu().numpy()


def model_colour(model_path: str | Path) -> ColourSpec:
    """The colour spaces ``model.json`` beside ``model_path`` records (none if it has none or is missing).

    Raises:
        ColourError: a recorded colour space is unknown (or OpenColorIO is missing).
    """
    meta_path = Path(model_path).with_name("model.json")
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read {meta_path}: {exc}; re-export the model or remove the file") from None
    spec = ColourSpec.from_dict(meta.get("colour"))
    spec.check()
    if spec.active:
        log.info("colour: %s -> %s for the model, and back (%s)", spec.colorspace, spec.working_space, spec.config)
    return spec


def select_frames(frames: dict[int, Path], first: int | None = None, last: int | None = None) -> dict[int, Path]:
    """The frames numbered ``first..last`` (inclusive; None: unbounded) of an indexed sequence.

    A farm chunk passes Cuebot's ``#FRAME_START#``/``#FRAME_END#`` (the first and last frame of the
    chunk, DispatchSupportService.prepareRqdRunFrame); frames missing from the folder are skipped.

    Raises:
        DataError: no frame of the folder is in the range (names the range and what the folder holds).
    """
    picked = {n: p for n, p in frames.items() if (first is None or n >= first) and (last is None or n <= last)}
    if not picked:
        held = f"{min(frames)}-{max(frames)}" if frames else "none"
        raise DataError(f"no input frame is in {first if first is not None else ''}-{last if last is not None else ''} "
                        f"(the folder holds frames {held}); check --first/--last")
    return picked


def infer_sequence(model_path: str | Path, input_dir: str | Path, output_dir: str | Path,
                   first: int | None = None, last: int | None = None) -> list[Path]:
    """Apply the model to the frames ``first..last`` of ``input_dir`` (default all).

    Each output is ``output_dir/<same name>`` with the input's format, bit depth, channels and
    metadata (:func:`trainer.data.write_like.write_like`), at the model's output size (s x the input's width
    and height for an upres model); only R, G and B go through the model, other channels are resized to the
    output (alpha bilinearly, the rest nearest, ``trainer.data.write_like``). When
    ``model.json`` beside the model records colour spaces (``trainer.data.colour``), each frame is
    converted to the working space before the model and back after it.

    Returns:
        The written paths in frame order.

    Raises:
        DataError: bad model, input sequence or frame range (names the path), or a model whose output is not a
            whole multiple of the input's size (names the sizes).
    """
    from trainer.data.write_like import write_like

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = load_model(model_path, device)
    colour = model_colour(model_path)
    frames = select_frames(find_sequence(input_dir), first, last)
    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for number, src in frames.items():
        dst = out_dir / src.name
        frame = read_image(src)
        rgb = colour.from_working(apply_model(model, colour.to_working(frame), device))
        _check_output_size(frame.shape, rgb.shape, model_path, src)
        write_like(dst, rgb, like=src)
        written.append(dst)
    log.info("wrote %d frames to %s", len(written), out_dir)
    return written


def _check_output_size(in_shape: tuple[int, ...], out_shape: tuple[int, ...], model_path: str | Path,
                       src: Path) -> None:
    """Raises DataError: the model's (sH, sW, 3) output is not a whole multiple s >= 1 of the (H, W, 3) input."""
    factor = out_shape[0] // in_shape[0] if in_shape[0] else 0
    if factor < 1 or tuple(out_shape) != (factor * in_shape[0], factor * in_shape[1], 3):
        raise DataError(f"{model_path} returned {out_shape[1]}x{out_shape[0]} for {src} ({in_shape[1]}x"
                        f"{in_shape[0]}); a cuetrain model returns the input's size times its scale (1, 2 or 4): "
                        "re-export the model with this cuetrain")


def psnr(a: np.ndarray, b: np.ndarray, peak: float = 1.0) -> float:
    """Peak signal-to-noise ratio in dB of two same-shape images, values clipped to 0..peak:
    ``10 log10(peak^2 / MSE)`` (infinite for identical images)."""
    a = np.clip(a.astype(np.float64), 0, peak)
    b = np.clip(b.astype(np.float64), 0, peak)
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else 10.0 * np.log10(peak * peak / mse)

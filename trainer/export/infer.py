"""``cuetrain infer``: full-frame inference with an exported model, same file format out.

An upres model (``model.json`` ``scale`` s of 2 or 4, ``trainer.learn.model``) returns frames s times the input's
width and height; they are written at that size, with the input's format, bit depth, channels and metadata
(:func:`trainer.data.write_like.write_like` scales the windows and resizes the channels the model does not make).

A model with named channels (``model.json`` ``channels_in``/``channels_out``, ``trainer.core.channels``; a matte,
colour + alpha) reads those Input channels by name and writes each output file as its input file plus the model's
channels: a matte model on RGB PNG frames writes RGBA PNGs (the input's RGB and the predicted A), on RGB EXRs with
``matte.A`` it adds a ``matte.A`` channel (``trainer.data.write_like``, "Named channels").
"""

from __future__ import annotations

import json
import logging
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from trainer.core.channels import RGB, ChannelPlan
from trainer.data.colour import ColourSpec, from_working_channels, to_working_channels
from trainer.data.holdout import psnr  # noqa: F401  (its home is trainer.data.holdout; benchmarks import it here)
from trainer.data.images import DataError, read_channels, read_image
from trainer.data.sequences import find_sequence
from trainer.data.write_like import output_factor

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
        with warnings.catch_warnings():  # TorchScript is deprecated upstream from torch 2.10 (docs/hosts.md)
            warnings.simplefilter("ignore", DeprecationWarning)
            model = torch.jit.load(str(p), map_location=device or "cpu")
    except Exception as exc:  # torch raises RuntimeError/ValueError for non-TorchScript files
        raise DataError(f"{p} is not a cuetrain TorchScript model ({exc}); pass RUN_DIR/model.pt") from None
    return model.eval()


def apply_model(model: torch.nn.Module, rgb: np.ndarray, device: torch.device | None = None) -> np.ndarray:
    """Run the model on one full frame: (H, W, Cin) float -> (sH, sW, Cout) float32 (s: the model's upres factor,
    1 for a same-size model; Cin = Cout = 3 for a colour model)."""
    x = torch.from_numpy(np.ascontiguousarray(rgb, dtype=np.float32)).permute(2, 0, 1)[None]  # (1, Cin, H, W)
    with torch.no_grad():
        y = model(x.to(device or "cpu"))
    return y[0].permute(1, 2, 0).float().cpu().numpy()


def read_model_meta(model_path: str | Path) -> dict:
    """``model.json`` beside ``model_path`` ({} when there is none).

    Raises:
        DataError: it cannot be read or is not a JSON object (names the file and the fix).
    """
    meta_path = Path(model_path).with_name("model.json")
    try:
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read {meta_path}: {exc}; re-export the model or remove the file") from None
    if not isinstance(meta, dict):
        raise DataError(f"{meta_path} is not a JSON object; re-export the model or remove the file")
    return meta


def model_channels(model_path: str | Path) -> ChannelPlan:
    """The channels the model beside ``model.json`` reads and writes (``channels_in``, ``channels_out``; R, G, B
    when it does not say: models exported before channels were named).

    Raises:
        DataError: a recorded channel list is not a non-empty list of names (names the file and the fix).
    """
    meta = read_model_meta(model_path)
    lists = []
    for key in ("channels_in", "channels_out"):
        names = meta.get(key, list(RGB))
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise DataError(f"{Path(model_path).with_name('model.json')}: {key}={names!r} must be a list of channel "
                            "names such as [\"R\", \"G\", \"B\"]; re-export the model")
        lists.append(tuple(names))
    return ChannelPlan(lists[0], lists[1])


def model_colour(model_path: str | Path) -> ColourSpec:
    """The colour spaces ``model.json`` beside ``model_path`` records (none if it has none or is missing).

    Raises:
        ColourError: a recorded colour space is unknown (or OpenColorIO is missing).
        DataError: model.json cannot be read.
    """
    meta = read_model_meta(model_path)
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
    and height for an upres model); only the model's Input channels go through the model (R, G and B for a
    colour model; ``model.json`` ``channels_in``), its output goes into the channels ``channels_out`` names
    (added when the input lacks them: a matte model writes RGBA PNGs from RGB PNGs; an EXR gets ``matte.A``;
    a format without layers gets a layer's alpha in its A, logged), and the other channels are kept, resized to
    the output (alpha bilinearly, the rest nearest, ``trainer.data.write_like``). When ``model.json`` beside the
    model records colour spaces (``trainer.data.colour``), the R, G and B channels of each frame are converted
    to the working space before the model and back after it; a matte or any other channel never is.

    Returns:
        The written paths in frame order.

    Raises:
        DataError: bad model, input sequence or frame range (names the path), an input frame without the model's
            Input channels (names the file, the channel and the channels it has), a model whose output is not a
            whole multiple of the input's size or not its channel count (names both), or an output format that
            cannot hold the model's channels (``trainer.data.write_like``).
    """
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = load_model(model_path, device)
    colour = model_colour(model_path)
    plan = model_channels(model_path)
    if not plan.is_default:
        log.info("model channels: %s in, %s out (%s)", ",".join(plan.inputs), ",".join(plan.targets), plan.task)
    frames = select_frames(find_sequence(input_dir), first, last)
    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    workers = frame_workers(device, len(frames))

    def one(src: Path) -> Path:
        return infer_frame(model, src, out_dir / src.name, plan, colour, device, model_path)

    written = _in_parallel(one, list(frames.values()), workers)
    log.info("wrote %d frames to %s", len(written), out_dir)
    return written


def frame_workers(device: torch.device, frames: int) -> int:
    """How many frames :func:`infer_sequence` runs at once: on the CPU, one per thread torch would use
    (``torch.get_num_threads()``: ``OMP_NUM_THREADS`` or the cores), each frame on one thread; on a GPU one.

    Why: OpenMP's threads meet at every operator, so one core busy with other work (the background ONNX export,
    another process) stalls them all, while frames run side by side on one thread each never wait for each other.
    Measured on a 2-core VM busy with other processes (a 144x176 frame of the demo's small model, 8 frames, median
    of 4 interleaved rounds): 0.71 s a frame on 2 threads, 0.07 s on 1, 0.07 s a frame 2 at once on 1 thread each;
    ``benchmarks/bench_fixed_cost.py`` measures the demo's held-out frames. The outputs are the same to float
    rounding (1e-7)."""
    if device.type != "cpu":
        return 1
    return max(1, min(torch.get_num_threads(), frames))


def _in_parallel(fn: Callable[[Path], Path], items: list[Path], workers: int) -> list[Path]:
    """``[fn(item) for item in items]`` on ``workers`` threads, torch on one thread each; the first error (in
    item order) is raised after the frames not yet started are cancelled."""
    if workers <= 1:
        return [fn(item) for item in items]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # process-wide: restored below
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="infer")
    try:
        futures = [pool.submit(fn, item) for item in items]
        return [f.result() for f in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        torch.set_num_threads(threads)


def infer_frame(model: torch.nn.Module, src: Path, dst: Path, plan: ChannelPlan, colour: ColourSpec,
                device: torch.device | None = None, model_path: str | Path = "the model") -> Path:
    """One frame of :func:`infer_sequence`: read ``src``, run ``model``, write ``dst`` like ``src``; returns ``dst``.

    Raises:
        DataError: as :func:`infer_sequence` (``model_path`` names the model in the messages).
    """
    from trainer.data.write_like import write_like

    if plan.is_default:  # the colour path, exactly as before channels were named
        frame = read_image(src)
        rgb = colour.from_working(apply_model(model, colour.to_working(frame), device))
        _check_output_size(frame.shape, rgb.shape, model_path, src)
        write_like(dst, rgb, like=src)
        return dst
    frame = read_channels(src, plan.inputs, option="--input-channels when training the model, or infer on frames "
                                                   "that have its channels_in (model.json)")
    out = from_working_channels(colour, apply_model(model, to_working_channels(colour, frame, plan.inputs), device),
                                plan.targets)
    _check_output_size(frame.shape, out.shape, model_path, src, len(plan.targets))
    write_like(dst, out, like=src, channels=plan.targets)
    return dst


def _check_output_size(in_shape: tuple[int, ...], out_shape: tuple[int, ...], model_path: str | Path,
                       src: Path, channels: int = 3) -> None:
    """Raises DataError: the model's (sH, sW, C) output is not a whole multiple s >= 1 of the (H, W, Cin) input,
    or C is not the model's ``channels`` (model.json ``channels_out``)."""
    if not output_factor(in_shape, out_shape, channels):
        got = f" with {out_shape[-1]} channels, not {channels} (model.json channels_out)" \
            if out_shape[-1] != channels else ""
        raise DataError(f"{model_path} returned {out_shape[1]}x{out_shape[0]} for {src} ({in_shape[1]}x"
                        f"{in_shape[0]}){got}; a cuetrain model returns the input's size times its scale (1, 2 or 4): "
                        "re-export the model with this cuetrain")

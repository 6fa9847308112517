"""Rank 0's outputs: run.json, metrics, contact sheets, preview frames, checkpoints and the exported model.

Contact sheets, preview frames (rendered by ``trainer.learn.preview`` on the training thread) and checkpoints
are written by one background thread so training does not wait on disk: the training thread only copies tensors
to CPU memory (microseconds to milliseconds); encoding, ``torch.save`` and fsync happen off the training thread.
Every file is written atomically (temp file + rename, see ``trainer.record.rundir``), so a kill mid-write leaves
the previous checkpoint loadable.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import platform
import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np
import torch

from trainer.core.channels import ChannelPlan
from trainer.core.config import ConfigError, TrainConfig
from trainer.data.images import write_image
from trainer.learn.model import count_parameters, model_config
from trainer.learn.optim import optimizer_of
from trainer.learn.preview import cell, columns, header_band, label_width
from trainer.record import runrecord
from trainer.record.netcheck import network_mismatches, network_of, run_network
from trainer.record.rundir import RunPaths, append_metrics, atomic_write_bytes, atomic_write_json

log = logging.getLogger(__name__)

SHEET_GAP = 2  # pixels between contact-sheet cells


def versions() -> dict[str, str]:
    """Versions recorded in run.json and model.json."""
    import numpy

    return {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
            "cuetrain": _cuetrain_version()}


def _cuetrain_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cuetrain")
    except PackageNotFoundError:
        return "unknown"


def cpu_copy(obj: Any) -> Any:
    """Deep copy of a (nested) state dict with every tensor copied to CPU memory."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(cpu_copy(v) for v in obj)
    return obj


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


class RunWriter:
    """Writes rank 0's outputs. On other ranks (``enabled=False``) every method is a no-op.

    Args:
        paths: the run directory layout.
        enabled: True on rank 0.
        keep_checkpoints: how many checkpoints to keep [files].
    """

    def __init__(self, paths: RunPaths, enabled: bool, keep_checkpoints: int) -> None:
        self.paths = paths
        self.enabled = enabled
        self.keep = keep_checkpoints
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="run-writer") if enabled else None
        self._pending: list[Future[None]] = []

    def start(self, config: dict[str, Any], world_size: int, start_step: int, backend: str) -> None:
        """Record this attempt in run.json (state ``running``; ``attempts`` grows by one)."""
        if self.enabled:
            runrecord.start_attempt(self.paths, config=config, world_size=world_size, start_step=start_step,
                                    backend=backend, host=socket.gethostname(), pid=os.getpid(), versions=versions())

    def metrics(self, row: dict[str, Any]) -> None:
        """Append one metrics row (small; written on the training thread)."""
        if self.enabled:
            append_metrics(self.paths, [row])

    def contact_sheet(self, step: int, inp: torch.Tensor, out: torch.Tensor, tgt: torch.Tensor,
                      plan: ChannelPlan | None = None) -> None:
        """Queue ``contact_sheets/step_NNNNNN.png`` from (n, Cin, c, c) Input crops and (n, Cout, sc, sc) Output and
        Ground Truth crops (s = ``--scale``), drawn for ``plan``'s task (:func:`contact_sheet_image`)."""
        if self.enabled:
            sheet = contact_sheet_image(inp, out, tgt, step, plan)
            self._submit(write_image, self.paths.contact_sheet(step), sheet)

    def preview(self, step: int, image: np.ndarray) -> None:
        """Queue ``previews/step_NNNNNN.png``: ``image`` (H, W, 3) float32 0..1, ``trainer.learn.preview.render_preview``'s
        result (already on the CPU; written atomically off the training thread)."""
        if self.enabled:
            self._submit(write_image, self.paths.preview(step), image)

    def checkpoint(self, step: int, state: dict[str, Any]) -> None:
        """Queue ``checkpoints/step_NNNNNN.pt`` (``state`` must already be a CPU copy) and prune old ones."""
        if self.enabled:
            self._submit(self._write_checkpoint, step, state)

    def _write_checkpoint(self, step: int, state: dict[str, Any]) -> None:
        buf = io.BytesIO()
        torch.save(state, buf)
        atomic_write_bytes(self.paths.checkpoint(step), buf.getvalue())
        for _, old in self.paths.list_checkpoints()[:-self.keep]:
            old.unlink(missing_ok=True)

    def _submit(self, fn: Any, *args: Any) -> None:
        self._raise_failed()
        if self._pool is not None:
            self._pending.append(self._pool.submit(fn, *args))

    def _raise_failed(self) -> None:
        done = [f for f in self._pending if f.done()]
        self._pending = [f for f in self._pending if not f.done()]
        for f in done:
            f.result()  # re-raises a background write error (e.g. disk full) on the training thread

    def flush(self) -> None:
        """Wait for queued writes; re-raise the first error."""
        for f in self._pending:
            f.result()
        self._pending = []

    def finish(self, state: str, **fields: Any) -> None:
        """Flush, then record the final ``state`` (and ``fields``) in run.json."""
        if not self.enabled:
            return
        try:
            self.flush()
        finally:
            runrecord.update_record(self.paths, state=state, finished_at=runrecord.now_iso(), **fields)
            if self._pool is not None:
                self._pool.shutdown(wait=True)


def export_model(paths: RunPaths, model: torch.nn.Module, meta: dict[str, Any], onnx: bool | None = None) -> None:
    """Write ``model.pt`` (TorchScript), ``model_nuke.nk``, ``model.onnx`` and ``model.json`` (``meta`` + exports + versions), atomically.

    The contracts of both files are in ``trainer.export.formats``. ``meta["scale"]`` (default 1) is the model's
    upres factor: model.json records it as ``scale``, the exports' output shapes and the Nuke script's
    ``outputScale`` follow it. ``meta["channels"]`` is the run's ``ChannelPlan.to_dict()`` (``in``, ``out``,
    ``task``; an int or nothing: RGB in and out): model.json records ``channels_in`` and ``channels_out`` (the
    names, in the model's channel order), ``task``, and ``channels`` as the Input channel count (an int, as
    before, for older readers such as ``trainer.record.initsource``); the exports' shapes and channel lists and
    the Nuke script's ``channelsIn``/``channelsOut`` follow them. ``model.onnx`` is skipped (with a warning,
    and ``exports`` in model.json without it) when ``onnx`` is False (default:
    ``CUETRAIN_EXPORT_ONNX``) or the onnx packages are missing; a failed ONNX export is logged and
    skipped too, so a finished training run always leaves ``model.pt``.

    Raises:
        ExportError: the model cannot be scripted for model.pt.
        RunDirError: a file cannot be written.
    """
    from trainer.core.envvars import read_export_onnx
    from trainer.export.formats import ExportError, onnx_bytes, onnx_description, torchscript_bytes, torchscript_description

    from trainer.core.channels import ChannelPlan

    scale = meta.get("scale", 1)
    recorded = meta.get("channels")
    plan = ChannelPlan(tuple(recorded["in"]), tuple(recorded["out"])) if isinstance(recorded, dict) else ChannelPlan()
    channels = {"channels": len(plan.inputs), "channels_in": list(plan.inputs), "channels_out": list(plan.targets),
                "task": plan.task}
    atomic_write_bytes(paths.model, torchscript_bytes(model))
    from trainer.export.nuke_script import nuke_script

    atomic_write_bytes(paths.model_nuke, nuke_script(paths.model, paths.root.absolute().name, scale, plan.inputs,
                                                     plan.targets).encode())
    exports: dict[str, Any] = {"model.pt": torchscript_description(scale, plan)}
    if read_export_onnx() if onnx is None else onnx:
        try:
            atomic_write_bytes(paths.model_onnx, onnx_bytes(model, len(plan.inputs)))
            exports["model.onnx"] = onnx_description(scale, plan)
        except ExportError as exc:
            log.warning("model.onnx not written: %s", exc)
    from trainer.export.compat import MIN_LIBTORCH  # the oldest host libtorch model.pt loads in (Nuke 14)

    onnx_opset = {"onnx_opset": exports["model.onnx"]["opset"]} if "model.onnx" in exports else {}
    atomic_write_json(paths.model_meta, {**meta, **channels, "scale": scale, "format": "torchscript",
                                         "min_libtorch": MIN_LIBTORCH,
                                         **onnx_opset, "exports": exports, "versions": versions(),
                                         "exported_at": runrecord.now_iso()})


def load_latest_checkpoint(paths: RunPaths) -> dict[str, Any] | None:
    """Newest checkpoint that loads (``weights_only=True``: no code runs from the file), or None.

    A checkpoint that fails to load (truncated by a kill) is skipped with a warning.
    """
    for step, path in reversed(paths.list_checkpoints()):
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # corrupt/truncated files raise many types
            log.warning("skipping unreadable checkpoint %s: %s", path, exc)
    return None


def resume_optimizer(requested: str, resolved: str, ckpt: dict[str, Any]) -> str:
    """The optimizer a resumed run continues with: the one that wrote the checkpoint's state
    (``trainer.learn.optim.optimizer_of``) when ``--optimizer`` is ``auto`` (``requested``), so a run in flight when
    ``auto``'s choice changed (Adam, then Muon for colour) resumes as it started (``TrainConfig.optimizer``'s
    promise); else ``resolved`` (``TrainConfig.optimizer_name``), which :func:`check_resumable` holds to the
    checkpoint's."""
    return optimizer_of(ckpt.get("optimizer")) if requested == "auto" else resolved


def saved_channels(ckpt: dict[str, Any]) -> ChannelPlan:
    """The channel plan a checkpoint was trained with: its recorded config's ``input_channels`` and
    ``target_channels``; R,G,B for either that it lacks (checkpoints written before channels were named)."""
    config = ckpt.get("config") if isinstance(ckpt.get("config"), dict) else {}
    return ChannelPlan.parse(config.get("input_channels") or "R,G,B", config.get("target_channels") or "R,G,B")


def check_resumable(ckpt: dict[str, Any], path: os.PathLike | str, model_size: str, architecture: str,
                    optimizer: str = "adam", scale: int = 1, channels: ChannelPlan | None = None) -> None:
    """Refuse a checkpoint of another network than the run's ``--model-size`` / ``--architecture`` / ``--scale`` /
    Input and target channel counts (``trainer.record.netcheck.network_mismatches``, the check ``--init-from`` and
    the GUI use), of other ``--input-channels`` / ``--target-channels`` names (``channels``; None: R,G,B in and out),
    or of another ``--optimizer`` (its state cannot continue another optimizer's; pass :func:`resume_optimizer`'s
    choice).

    Checkpoints written before architectures were named are v1, before channels were named R,G,B
    (:func:`saved_channels`); the optimizer is read from the state (``trainer.learn.optim.optimizer_of``). Raises:
        ConfigError: the network, channels or optimizer differs, or the checkpoint is of an architecture the
            trainer no longer builds (names the file, both values and the fix).
    """
    plan, here = saved_channels(ckpt), channels or ChannelPlan()
    # channels: compared by name below (the counts follow)
    found = network_mismatches(network_of(ckpt), run_network(architecture, model_size, scale, None))
    if any(m.removed for m in found):
        raise ConfigError(f"checkpoint {path}: {'; '.join(str(m) for m in found if m.removed)}; start another "
                          "--run-dir")
    if found:
        flags = " ".join(f"--{m.key.replace('_', '-')} {m.there}" for m in found)
        raise ConfigError(f"checkpoint {path} is another network ({'; '.join(map(str, found))}): resume with "
                          f"{flags} or start another --run-dir")
    if plan != here:
        flags = lambda p: f"--input-channels {','.join(p.inputs)} --target-channels {','.join(p.targets)}"  # noqa: E731
        raise ConfigError(f"checkpoint {path} was trained with {flags(plan)}, but this run has {flags(here)}; resume "
                          f"with {flags(plan)} or start another --run-dir")
    trained = optimizer_of(ckpt.get("optimizer"))
    if trained != optimizer:
        raise ConfigError(f"checkpoint {path} was trained with --optimizer {trained}, but --optimizer is {optimizer}; "
                          f"resume with --optimizer {trained} (or auto) or start another --run-dir")


def config_record(cfg: TrainConfig) -> dict[str, Any]:
    """The config as run.json and model.pt record it, with what the defaults resolved to: ``base_lr`` (the lr when
    ``lr`` is None), ``optimizer_name`` (``optimizer`` ``auto``'s choice), ``beta2`` and ``architecture_name``
    (``architecture`` ``auto``'s choice)."""
    return {**cfg.to_dict(), "base_lr": cfg.base_lr, "optimizer_name": cfg.optimizer_name, "beta2": cfg.beta2,
            "architecture_name": cfg.architecture_name}


def model_config_record(cfg: TrainConfig, plan: ChannelPlan) -> dict[str, Any]:
    """The network's config as checkpoints and ``model.json`` record it (``trainer.learn.model.model_config``)."""
    return dataclasses.asdict(model_config(cfg.model_size, cfg.architecture_name, scale=cfg.scale, channels=plan))


def model_meta(cfg: TrainConfig, plan: ChannelPlan, net: torch.nn.Module, step: int, world_size: int,
               colour: Any, precision_name: str) -> dict[str, Any]:
    """What :func:`export_model` records of the model (``model.json``, ``trainer.export.metadata``): its size,
    architecture and network config, channels, input and output shapes, the training config, world size, colour
    (a ``trainer.data.colour.ColourSpec``) and the precision it trained in."""
    size = (lambda side: side) if cfg.scale == 1 else (lambda side: f"{cfg.scale}{side}")
    return {"model_size": cfg.model_size, "architecture": cfg.architecture_name,
            "model_config": model_config_record(cfg, plan),
            "scale": cfg.scale, "parameters": count_parameters(net), "step": step, "channels": plan.to_dict(),
            "input": f"(B, {len(plan.inputs)}, H, W) float32, any H and W",
            "output": f"(B, {len(plan.targets)}, {size('H')}, {size('W')}) float32",
            "config": config_record(cfg), "world_size": world_size, "colour": colour.to_dict(),
            "trained_precision": precision_name}


def wall_clock() -> float:
    """Monotonic seconds (for images/s and wall_s)."""
    return time.perf_counter()

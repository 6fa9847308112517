"""Rank 0's outputs: run.json, metrics, contact sheets, preview frames, checkpoints and the exported model.

Contact sheets, preview frames (rendered by ``trainer.learn.preview`` on the training thread) and checkpoints
are written by one background thread (``trainer.learn.background``) so training does not wait on disk: the
training thread only copies tensors to CPU memory (microseconds to milliseconds); encoding, ``torch.save`` and
fsync happen off the training thread. Every file is written atomically (temp file + rename, see
``trainer.record.rundir``), so a kill mid-write leaves the previous checkpoint loadable. A run directory that is
full for a while (ENOSPC, EDQUOT) is ridden out for up to ``--storage-full-grace-s`` (``trainer.record.storage``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import socket
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from trainer.core.channels import ChannelPlan
from trainer.core.config import ConfigError, TrainConfig
from trainer.learn.background import BackgroundWrites
from trainer.learn.contact_sheet import (SHEET_GAP, SHEET_HEADER, SHEET_LABELS,  # noqa: F401 (re-exported)
                                         SHEET_MIN_CELL, contact_sheet_image, sheet_scale)
from trainer.learn.model import count_parameters, model_config
from trainer.learn.optim import optimizer_of
from trainer.record import ckptcopies, runrecord
from trainer.record.netcheck import network_mismatches, network_of, run_network
from trainer.record.rundir import RunDirError, RunPaths, append_metrics, atomic_write_bytes
from trainer.record.storage import StorageFull, StorageWatch, describe_errno, unless_full

log = logging.getLogger(__name__)


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


#: Metrics rows held in memory while the run directory is full [rows]: a row is about 150-200 bytes, so at most
#: ~20 MB; at one row per --log-interval this outlasts any grace a run sets. More fails the run (StorageFull).
METRICS_HELD_ROWS = 100_000


class RunWriter:
    """Writes rank 0's outputs. On other ranks (``enabled=False``) every method is a no-op.

    A full run directory (ENOSPC, or EDQUOT: quota exceeded; ``trainer.record.storage``) does not stop training:
    metrics rows that could not be appended are held in memory (at most :data:`METRICS_HELD_ROWS`) and appended, in
    order, with the next row that can be, so ``metrics.jsonl`` ends complete and ordered; a checkpoint is held and
    retried off the training thread, a contact sheet or preview skipped (``trainer.learn.background``). One warning
    names the path and the errno when storage fills, one says when it recovered. A write still failing
    ``storage_full_grace_s`` after its first failure raises ``trainer.record.storage.StorageFull`` on the training
    thread (at the next metrics row or queued write, or in :meth:`flush`); any other write error is raised there as
    before.

    Args:
        paths: the run directory layout.
        enabled: True on rank 0.
        keep_checkpoints: how many checkpoints to keep [files].
        storage_full_grace_s: how long a write may keep failing for a full disk (``TrainConfig``) [s].
    """

    def __init__(self, paths: RunPaths, enabled: bool, keep_checkpoints: int,
                 storage_full_grace_s: float = 300.0) -> None:
        self.paths = paths
        self.enabled = enabled
        self.keep = keep_checkpoints
        self.storage = StorageWatch(storage_full_grace_s, "rank 0 holds its metrics rows and checkpoint in memory")
        self._writes = BackgroundWrites(paths, keep_checkpoints, self.storage) if enabled else None
        self._rows: list[dict[str, Any]] = []  # metrics rows not yet in metrics.jsonl (the disk was full)

    def start(self, config: dict[str, Any], world_size: int, start_step: int, backend: str) -> None:
        """Record this attempt in run.json (state ``running``; ``attempts`` grows by one)."""
        if self.enabled:
            runrecord.start_attempt(self.paths, config=config, world_size=world_size, start_step=start_step,
                                    backend=backend, host=socket.gethostname(), pid=os.getpid(), versions=versions())

    def metrics(self, row: dict[str, Any]) -> None:
        """Append one metrics row (small; written on the training thread) after the rows a full disk held back.

        Raises:
            StorageFull: the disk stayed full past the grace, or more than :data:`METRICS_HELD_ROWS` rows are held.
            RunDirError: any other write error (also one a background write met).
        """
        if self._writes is None:
            return
        self._writes.raise_failed()
        self._rows.append(row)
        try:
            append_metrics(self.paths, self._rows)
        except RunDirError as exc:
            if not self.storage.failed("metrics.jsonl", self.paths.metrics, exc):
                raise
            if len(self._rows) > METRICS_HELD_ROWS:
                raise StorageFull(f"storage full: {len(self._rows)} metrics rows held in memory, more than "
                                  f"{METRICS_HELD_ROWS}; free space on the run directory's storage, then resume the "
                                  "run with --resume") from exc
            return
        self._rows.clear()
        self.storage.cleared("metrics.jsonl", self.paths.metrics)

    def contact_sheet(self, step: int, inp: torch.Tensor, out: torch.Tensor, tgt: torch.Tensor,
                      plan: ChannelPlan | None = None) -> None:
        """Queue ``contact_sheets/step_NNNNNN.png`` from (n, Cin, c, c) Input crops and (n, Cout, sc, sc) Output and
        Ground Truth crops (s = ``--scale``), drawn for ``plan``'s task (:func:`contact_sheet_image`)."""
        if self._writes is not None:
            sheet = contact_sheet_image(inp, out, tgt, step, plan)
            self._writes.submit(self._writes.picture, "contact sheet", self.paths.contact_sheet(step), sheet)

    def preview(self, step: int, image: np.ndarray) -> None:
        """Queue ``previews/step_NNNNNN.png``: ``image`` (H, W, 3) float32 0..1, ``trainer.learn.preview.render_preview``'s
        result (already on the CPU; written atomically off the training thread)."""
        if self._writes is not None:
            self._writes.submit(self._writes.picture, "preview", self.paths.preview(step), image)

    def checkpoint(self, step: int, state: dict[str, Any]) -> None:
        """Queue ``checkpoints/step_NNNNNN.pt`` (``state`` must already be a CPU copy) and prune old ones."""
        if self._writes is not None:
            self._writes.submit(self._writes.checkpoint, step, state)

    def flush(self, wait_held: bool = True) -> None:
        """Wait for queued writes; re-raise the first error. ``wait_held``: also write the metrics rows and the
        checkpoint a full disk held back, trying again every ``RETRY_S`` for up to the grace.

        Raises:
            StorageFull: still full after the grace. RunDirError: any other write error.
        """
        if self._writes is None:
            return
        self._writes.flush(wait_held=False)
        if wait_held and self._rows:
            self.storage.patiently("metrics.jsonl", self.paths.metrics, lambda: append_metrics(self.paths, self._rows))
            self._rows.clear()
        self._writes.flush(wait_held)

    def finish(self, state: str, **fields: Any) -> None:
        """Flush, then record the final ``state`` (and ``fields``) in run.json. For any state but ``failed`` both
        wait for a full disk (up to the grace); a ``failed`` run tries once and logs what a full disk kept out (a write
        error is logged, not raised: the run's own error is the one that counts)."""
        if self._writes is None:
            return
        patient = state != "failed"
        try:
            self.flush(wait_held=patient)
        except (RunDirError, OSError) as exc:  # StorageFull is a RunDirError
            if patient:
                raise
            # the run fails already: a held write's retry failing again (its timer may fire after the error was
            # raised once) must not replace the run's own error
            log.error("a write still held as the run failed: %s", exc)
        finally:
            try:
                self._record(state, fields, patient)
            finally:
                self._writes.close()

    def _record(self, state: str, fields: dict[str, Any], patient: bool) -> None:
        def write() -> None:
            runrecord.update_record(self.paths, state=state, finished_at=runrecord.now_iso(), **fields)

        if patient:
            self.storage.patiently("run.json", self.paths.run_json, write)
            return
        if (code := unless_full(write)) is not None:
            log.error("run.json not updated to %s: storage full (%s)", state, describe_errno(code))
        held = self._writes.held_step if self._writes is not None else None
        if self.storage.full and (self._rows or held is not None):
            log.error("storage full: %d metrics rows and %s never written", len(self._rows),
                      "no checkpoint" if held is None else f"the checkpoint of step {held}")


def export_model(paths: RunPaths, model: torch.nn.Module, meta: dict[str, Any], onnx: bool | None = None,
                 storage: StorageWatch | None = None) -> None:
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
    skipped too, so a finished training run always leaves ``model.pt``. With ``storage`` (the run writer's
    :class:`trainer.record.storage.StorageWatch`) a write that fails for a full disk is tried again every second for
    up to its grace.

    Raises:
        ExportError: the model cannot be scripted for model.pt.
        StorageFull: the disk stayed full past ``storage``'s grace.
        RunDirError: a file cannot be written.
    """
    from trainer.core.envvars import read_export_onnx
    from trainer.export.formats import ExportError, onnx_bytes, onnx_description, torchscript_bytes, torchscript_description

    write = _export_writer(storage)
    scale = meta.get("scale", 1)
    plan, channels = _channel_fields(meta)
    write(paths.model, torchscript_bytes(model))
    from trainer.export.nuke_script import nuke_script

    write(paths.model_nuke, nuke_script(paths.model, paths.root.absolute().name, scale, plan.inputs,
                                        plan.targets).encode())
    exports: dict[str, Any] = {"model.pt": torchscript_description(scale, plan)}
    if read_export_onnx() if onnx is None else onnx:
        try:
            write(paths.model_onnx, onnx_bytes(model, len(plan.inputs)))
            exports["model.onnx"] = onnx_description(scale, plan)
        except ExportError as exc:
            log.warning("model.onnx not written: %s", exc)
    from trainer.export.compat import MIN_LIBTORCH  # the oldest host libtorch model.pt loads in (Nuke 14)

    onnx_opset = {"onnx_opset": exports["model.onnx"]["opset"]} if "model.onnx" in exports else {}
    record = {**meta, **channels, "scale": scale, "format": "torchscript", "min_libtorch": MIN_LIBTORCH,
              **onnx_opset, "exports": exports, "versions": versions(), "exported_at": runrecord.now_iso()}
    write(paths.model_meta, (json.dumps(record, indent=2, sort_keys=True, default=str) + "\n").encode())


def _export_writer(storage: StorageWatch | None) -> Callable[[Path, bytes], None]:
    """``atomic_write_bytes``, tried again while the disk is full for up to ``storage``'s grace (when given)."""
    def write(path: Path, data: bytes) -> None:
        if storage is None:
            atomic_write_bytes(path, data)
        else:
            storage.patiently(path.name, path, lambda: atomic_write_bytes(path, data))
    return write


def _channel_fields(meta: dict[str, Any]) -> tuple[ChannelPlan, dict[str, Any]]:
    """The run's ``ChannelPlan`` from ``meta["channels"]`` (a ``ChannelPlan.to_dict()``; anything else: RGB in and
    out) and model.json's channel fields (``channels`` = the Input channel count, ``channels_in``, ``channels_out``,
    ``task``)."""
    recorded = meta.get("channels")
    plan = ChannelPlan(tuple(recorded["in"]), tuple(recorded["out"])) if isinstance(recorded, dict) else ChannelPlan()
    return plan, {"channels": len(plan.inputs), "channels_in": list(plan.inputs), "channels_out": list(plan.targets),
                  "task": plan.task}


def load_latest_checkpoint(paths: RunPaths) -> dict[str, Any] | None:
    """Newest checkpoint that is intact and loads (:func:`load_checkpoint_file`'s dict), or None."""
    found = load_checkpoint_file(paths)
    return found[0] if found else None


def load_checkpoint_file(paths: RunPaths, step: int | None = None) -> tuple[dict[str, Any], Path] | None:
    """``(checkpoint, file it came from)`` of the newest step (or of ``step``) that is intact and loads
    (``weights_only=True``: no code runs from the file), or None.

    Each step's first copy, then its second (``trainer.record.ckptcopies.newest_first``), then the older steps. A
    file that fails its CRC-32 check (``ckptcopies.damage``: truncated, or damaged after it was written) or fails to
    load is skipped with a warning. Rank 0 picks the step; every other rank loads that ``step`` the same way.
    """
    for at, path in ckptcopies.newest_first(paths):
        if step is not None and at != step:
            continue
        if (why := ckptcopies.damage(path)) is not None:
            log.warning("skipping damaged checkpoint %s (step %d): %s", path, at, why)
            continue
        try:
            return torch.load(path, map_location="cpu", weights_only=True), path
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
    ``lr`` is None), ``cosine_floor`` (where the cosine ends, a fraction of the peak lr, when ``lr_floor`` is None),
    ``optimizer_name`` (``optimizer`` ``auto``'s choice), ``beta2`` and ``architecture_name`` (``architecture``
    ``auto``'s choice), ``focus_share`` (a head start's crop focus, ``trainer.data.crop_focus``) and ``encoder_lr``
    (the encoder's fraction of the peak lr)."""
    return {**cfg.to_dict(), "base_lr": cfg.base_lr, "cosine_floor": cfg.cosine_floor, "focus_share": cfg.focus_share,
            "encoder_lr": cfg.encoder_lr, "optimizer_name": cfg.optimizer_name, "beta2": cfg.beta2,
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

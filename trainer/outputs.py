"""Rank 0's outputs: run.json, metrics, contact sheets, checkpoints and the exported model.

Contact sheets and checkpoints are written by one background thread so training does not wait
on disk: the training thread only copies tensors to CPU memory (microseconds to milliseconds);
encoding, ``torch.save`` and fsync happen off the training thread. Every file is written
atomically (temp file + rename, see ``trainer.rundir``), so a kill mid-write leaves the previous
checkpoint loadable.
"""

from __future__ import annotations

import io
import logging
import os
import platform
import socket
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch

from trainer.images import write_image
from trainer import runrecord
from trainer.rundir import RunPaths, append_metrics, atomic_write_bytes, atomic_write_json

log = logging.getLogger(__name__)

SHEET_GAP = 2  # pixels between contact-sheet cells


def now_iso() -> str:
    """Current UTC time, ISO 8601."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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


def contact_sheet_image(inp: torch.Tensor, out: torch.Tensor, tgt: torch.Tensor) -> np.ndarray:
    """Grid of crops: rows = crops, columns = input | output | ground truth.

    Args: three (n, 3, c, c) tensors. Returns (n*c + (n-1)*gap, 3*c + 2*gap, 3) float32 clipped to 0..1.
    """
    n, _, c, _ = inp.shape
    g = SHEET_GAP
    sheet = np.ones((n * c + (n - 1) * g, 3 * c + 2 * g, 3), np.float32)
    for row in range(n):
        for col, t in enumerate((inp, out, tgt)):
            y, x = row * (c + g), col * (c + g)
            sheet[y:y + c, x:x + c] = t[row].detach().float().cpu().permute(1, 2, 0).numpy()
    return np.clip(sheet, 0.0, 1.0)


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

    def contact_sheet(self, step: int, inp: torch.Tensor, out: torch.Tensor, tgt: torch.Tensor) -> None:
        """Queue ``contact_sheets/step_NNNNNN.png`` from (n, 3, c, c) crops."""
        if self.enabled:
            sheet = contact_sheet_image(inp, out, tgt)
            self._submit(write_image, self.paths.contact_sheet(step), sheet)

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
            runrecord.update_record(self.paths, state=state, finished_at=now_iso(), **fields)
            if self._pool is not None:
                self._pool.shutdown(wait=True)


def export_model(paths: RunPaths, model: torch.nn.Module, meta: dict[str, Any]) -> None:
    """Write ``model.pt`` (TorchScript, CPU, eval mode) and ``model.json`` (``meta`` + versions), atomically."""
    import copy
    import warnings

    buf = io.BytesIO()
    with warnings.catch_warnings():  # torch 2.10+ deprecates TorchScript; hosts still load it (see README)
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(copy.deepcopy(model).cpu().eval()), buf)
    atomic_write_bytes(paths.model, buf.getvalue())
    atomic_write_json(paths.model_meta, {**meta, "format": "torchscript", "versions": versions(),
                                         "exported_at": now_iso()})


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


def wall_clock() -> float:
    """Monotonic seconds (for images/s and wall_s)."""
    return time.perf_counter()

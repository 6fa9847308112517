"""``model.onnx`` after the run: written from a finished run's ``model.pt`` by a process of its own.

The ONNX export is the slowest file of a run's end (5-15 s on a 2-core CPU, ``trainer.export.formats``) and no
part of training. ``cuetrain local`` (and so ``cuetrain demo``) therefore runs its ranks with
``CUETRAIN_EXPORT_ONNX=0`` and, once the gang succeeded, starts ``cuetrain export --run-dir RUN --background``
(``python -m trainer.cli``) detached, at a lower CPU priority, with its output in ``RUN/logs/export.log``
(:mod:`trainer.agent.launch`). The run is finished when rank 0 has written ``model.pt``, ``model_nuke.nk`` and
``model.json`` (run.json ``succeeded``); ``model.onnx`` follows a few seconds later. A farm frame's rank 0 still
writes ``model.onnx`` itself (nothing may outlive a frame on a render node).

This process (:func:`export_onnx_of_run`):

1. records ``exports_pending: ["model.onnx"]`` in ``model.json`` (:data:`PENDING_KEY`; ``cuetrain local`` already
   did before starting it), so a reader can tell "coming" from "not written" (a mark left by an export that was
   killed goes when ``cuetrain export --run-dir RUN`` runs again);
2. rebuilds the network from ``model.json`` ``model_config`` and loads ``model.pt``'s weights into it (the weights
   the run shipped: the EMA's with ``--ema-decay``), so ``model.onnx`` holds exactly ``model.pt``'s model;
3. writes ``model.onnx`` (atomically) and ``model.json`` as rank 0 would have written them together: ``exports``
   gains ``model.onnx``, ``onnx_opset`` is set, the pending mark goes. A failed export is logged ("model.onnx not
   written: ...") and only clears the mark, as a failed export in rank 0 leaves ``model.pt`` alone.

If ``model.pt`` changes meanwhile (another run in the same folder), nothing is written: that run owns the files.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Mapping

from trainer.core.channels import RGB, ChannelPlan
from trainer.record.rundir import RunPaths, atomic_write_bytes, atomic_write_json, read_json

if TYPE_CHECKING:  # torch is imported when the export runs, after the pending mark is on disk
    from torch import nn

log = logging.getLogger(__name__)

#: ``model.json`` key: the files a background export is still writing (a list of names; absent when none).
PENDING_KEY = "exports_pending"
#: CPU niceness added to the background export (``os.nice``): training or inference that runs meanwhile goes first.
BACKGROUND_NICE = 10
#: A network from ``model.json`` ``model_config`` (``trainer.learn.model``; passed in: this room does not import it).
BuildNetwork = Callable[[Mapping[str, Any]], "nn.Module"]


def export_onnx_of_run(paths: RunPaths, build: BuildNetwork, *, background: bool = False) -> int:
    """Write ``model.onnx`` of the finished run in ``paths`` from its ``model.pt`` (module doc); returns the exit code:
    0 written, 1 not written (the reason logged as a warning).

    Args:
        paths: the run directory (``model.pt`` and ``model.json`` must exist).
        build: makes the untrained network of a ``model_config`` dict.
        background: lower this process's CPU priority by :data:`BACKGROUND_NICE` first.

    Raises:
        RunDirError: ``model.json`` cannot be read, or a file cannot be written.
    """
    if background:
        os.nice(BACKGROUND_NICE)
    meta = read_json(paths.model_meta)
    before = _identity(paths)
    atomic_write_json(paths.model_meta, {**meta, PENDING_KEY: ["model.onnx"]})
    from trainer.export.formats import ExportError, onnx_bytes, onnx_description

    plan = _plan(meta)
    try:
        data = onnx_bytes(load_network(paths, meta, build), len(plan.inputs))
    except ExportError as exc:
        log.warning("model.onnx not written: %s", exc)
        return _finish(paths, before, None)
    if _identity(paths) == before:
        atomic_write_bytes(paths.model_onnx, data)
    return _finish(paths, before, onnx_description(int(meta.get("scale", 1)), plan))


def load_network(paths: RunPaths, meta: Mapping[str, Any], build: BuildNetwork) -> "nn.Module":
    """The network of ``model.json`` (``meta``) with ``model.pt``'s weights, on the CPU in eval mode.

    Raises:
        ExportError: ``meta`` has no ``model_config`` (an older cuetrain's run), or the weights do not load.
    """
    import warnings

    import torch

    from trainer.export.formats import ExportError

    config = meta.get("model_config")
    if not isinstance(config, Mapping):
        raise ExportError(f"{paths.model_meta} records no model_config (a run of an older cuetrain): train it "
                          "again with this one to get model.onnx")
    try:
        with warnings.catch_warnings():  # torch 2.10+ deprecates TorchScript; the file still loads
            warnings.simplefilter("ignore", DeprecationWarning)
            state = torch.jit.load(str(paths.model), map_location="cpu").state_dict()
        net = build(config)
        net.load_state_dict(dict(state), strict=True)
    except (RuntimeError, ValueError, OSError) as exc:
        raise ExportError(f"cannot load {paths.model} into the network of {paths.model_meta}: {exc}") from exc
    return net.cpu().eval()


def _plan(meta: Mapping[str, Any]) -> ChannelPlan:
    """The channels ``model.json`` names (R, G, B when it does not say: runs exported before channels were named)."""
    return ChannelPlan(tuple(meta.get("channels_in", RGB)), tuple(meta.get("channels_out", RGB)))


def _identity(paths: RunPaths) -> tuple[int, int] | None:
    """``model.pt``'s (mtime [ns], size [bytes]), None when missing: another run's export changes it."""
    try:
        st = paths.model.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _finish(paths: RunPaths, before: tuple[int, int] | None, onnx: dict[str, Any] | None) -> int:
    """Record the outcome in ``model.json``: ``exports["model.onnx"]`` and ``onnx_opset`` when ``onnx`` (its
    description) was written; the pending mark goes either way. Returns 0 when recorded, else 1."""
    if _identity(paths) != before:
        log.warning("model.onnx not written: %s changed during the export (another run in %s owns the files now)",
                    paths.model, paths.root)
        return 1
    meta = {k: v for k, v in read_json(paths.model_meta).items() if k != PENDING_KEY}
    if onnx is not None:
        meta = {**meta, "onnx_opset": onnx["opset"], "exports": {**meta.get("exports", {}), "model.onnx": onnx}}
    atomic_write_json(paths.model_meta, meta)
    if onnx is not None:
        log.info("wrote %s", paths.model_onnx)
    return 0 if onnx is not None else 1

"""``--init-from PATH``: start a run from another model's weights (a head start), not from random ones.

:mod:`trainer.record.initsource` resolves PATH without torch (a run directory, a checkpoint or a TorchScript
``model.pt``; which file holds the weights; ``model.json``). This module reads the weights and the checkpoint's
metadata (torch), checks the source is this run's network (architecture, model size, scale, channels, then every
tensor's name and shape) and copies the weights into it. Only the weights: the optimizer, the learning-rate
schedule, the step and the EMA start fresh. Every kind gives the weights that run shipped: a ``model.pt`` holds
them, and a checkpoint gives its EMA's (``ema.model``) when that run had ``--ema-decay``, as its ``model.pt`` would
have, else its raw weights (``model``).

Errors are :class:`~trainer.record.initsource.InitFromError` (a ``ConfigError``: bad input, exit 2).
"""

from __future__ import annotations

import logging
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch

from trainer.record import ckptcopies
from trainer.record.initsource import InitFromError, InitSource, mismatch_error, read_meta_file, resolve
from trainer.record.netcheck import network_mismatches, network_of, run_network

log = logging.getLogger(__name__)

#: How many names :func:`shape_mismatches` quotes per kind of difference.
_EXAMPLES = 3


def _brief(exc: BaseException) -> str:
    """``Type: first line`` of an exception, at most 200 characters (torch's load errors run to paragraphs)."""
    first = next((line for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first[:200]}"


def _torchscript_state(given: str | Path, path: Path) -> dict[str, torch.Tensor]:
    """The state dict of a TorchScript file (CPU tensors; keys are the scripted ``nn.Module``'s)."""
    try:
        with warnings.catch_warnings():  # torch 2.10+ deprecates TorchScript
            warnings.simplefilter("ignore", DeprecationWarning)
            return dict(torch.jit.load(str(path), map_location="cpu").state_dict())
    except Exception as exc:  # torch.jit raises many types for a damaged or foreign file
        raise InitFromError(f"--init-from {given}: cannot load the TorchScript model {path} ({_brief(exc)}): "
                            "export it again, or give its run's checkpoint") from exc


def _checkpoint(given: str | Path, path: Path) -> dict[str, Any]:
    """A checkpoint dict (``weights_only=True``: no code runs from the file) that holds ``model`` weights; a ZIP
    checkpoint whose bytes fail their CRC-32 (``trainer.record.ckptcopies.damage``) is refused, not loaded wrong."""
    if zipfile.is_zipfile(path) and (why := ckptcopies.damage(path)) is not None:
        raise InitFromError(f"--init-from {given}: the checkpoint {path} is damaged ({why}): give another checkpoint "
                            "of that run, or its model.pt")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # a truncated or foreign file raises many types
        raise InitFromError(f"--init-from {given}: cannot load the checkpoint {path} ({_brief(exc)}): "
                            "give another checkpoint of that run, or its model.pt") from exc
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
        raise InitFromError(f"--init-from {given}: {path} is not a cuetrain checkpoint (no 'model' weights in it): "
                            "give a run directory, a checkpoints/step_NNNNNN.pt or a model.pt")
    return ckpt


def shipped_weights(ckpt: dict[str, Any]) -> tuple[dict[str, torch.Tensor], bool]:
    """``(state dict, is the EMA's)`` of a checkpoint: the EMA's averaged weights (``ema.model``, what
    ``trainer.learn.train`` exports as ``model.pt``) when it has them, else the raw weights (``model``)."""
    ema = ckpt.get("ema")
    if isinstance(ema, dict) and isinstance(ema.get("model"), dict):
        return ema["model"], True
    return ckpt["model"], False


def load_source(source: InitSource) -> tuple[dict[str, torch.Tensor], dict[str, Any] | None, Path]:
    """``(state dict, metadata, file loaded)`` of a resolved source; metadata is ``model.json`` or the checkpoint
    dict, None for a ``model.pt`` without ``model.json``. A checkpoint gives the weights its run ships
    (:func:`shipped_weights`: the EMA's when it has one). A run's checkpoint that does not load (truncated by a
    kill) is skipped with a warning for the next older one, as ``--resume`` does.

    Raises:
        InitFromError: the file (for a run: every checkpoint) cannot be loaded.
    """
    if source.is_torchscript:
        return _torchscript_state(source.path, source.weights), read_meta_file(source), source.weights
    candidates = source.checkpoints or (source.weights,)
    for path in candidates:
        try:
            ckpt = _checkpoint(source.path, path)
        except InitFromError as exc:
            if len(candidates) == 1:
                raise
            log.warning("--init-from: skipping %s", exc)
            continue
        return shipped_weights(ckpt)[0], ckpt, path
    raise InitFromError(f"--init-from {source.path}: none of its {len(candidates)} checkpoints loads (see the "
                        "warnings above): give another run, or a model.pt")


def shape_mismatches(net: torch.nn.Module, state: dict[str, torch.Tensor]) -> list[str]:
    """How ``state`` does not fit ``net``'s state dict: tensors missing, unexpected, or of another shape (a few
    names quoted each); empty when every name and shape matches."""
    own = net.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    reshaped = [f"{k} {list(state[k].shape)} there, {list(own[k].shape)} here" for k in own
                if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    out = []
    for what, names in (("missing", missing), ("unexpected", unexpected), ("of another shape", reshaped)):
        if names:
            more = f", +{len(names) - _EXAMPLES} more" if len(names) > _EXAMPLES else ""
            out.append(f"{len(names)} tensor(s) {what} ({', '.join(names[:_EXAMPLES])}{more})")
    return out


def apply_init_from(net: torch.nn.Module, path: str, *, architecture: str, model_size: str, scale: int,
                    channels: int = 3, target_channels: int | None = None) -> dict[str, Any]:
    """Load the weights of ``path`` (``--init-from``) into ``net`` (strict: every tensor, same names and shapes).

    The source's metadata (``model.json`` or the checkpoint's) must name this run's network; a value it does not
    record is not compared, and the tensors' names and shapes are checked before anything is copied.

    Args:
        net: this run's network, unwrapped (not DDP or compiled), on any device; its weights are overwritten.
        path: a run directory, a checkpoint ``.pt`` or a TorchScript ``model.pt`` (``trainer.record.initsource``).
        architecture, model_size, scale: this run's network (``--architecture``, ``--model-size``, ``--scale``).
        channels, target_channels: its Input and output channel counts (``len(TrainConfig.channels.inputs)``,
            ``len(...targets)``; None: as many as ``channels``) [channels].

    Returns:
        The record for ``run.json``: ``path`` (as given), ``kind`` (``run``, ``checkpoint`` or ``model``),
        ``weights`` (the file loaded), ``step`` (the source's step, None when unknown), ``run`` (the source run
        directory's name, "" when unknown), and the source's ``architecture``, ``model_size``, ``scale`` and
        ``channels`` and ``target_channels`` (None when its metadata does not say), and ``ema`` (True when the
        weights are a checkpoint's EMA).

    Raises:
        InitFromError: missing or unreadable path; metadata of another network (one message naming each
            difference); weights that do not fit ``net`` (names the tensors).
    """
    source = resolve(path)
    state, meta, loaded = load_source(source)
    there = network_of(meta)
    found = network_mismatches(there, run_network(architecture, model_size, scale, channels, target_channels))
    if found:
        raise mismatch_error(source, found)
    misfit = shape_mismatches(net, state)
    if misfit:
        raise InitFromError(f"--init-from {path}: the weights in {loaded} do not fit this {architecture} "
                            f"{model_size} network (scale {scale}): {'; '.join(misfit)}: give a source of the same "
                            "--architecture/--model-size/--scale or start from random weights")
    net.load_state_dict(state, strict=True)
    log.info("--init-from: loaded %s (%s, step %s) into the %s %s network", loaded, source.kind, there["step"],
             architecture, model_size)
    return {"path": str(path), "kind": source.kind, "weights": str(loaded), "step": there["step"],
            "run": source.run, "architecture": there["architecture"], "model_size": there["model_size"],
            "scale": there["scale"], "channels": there["channels"], "target_channels": there["target_channels"],
            "ema": bool(meta is not None and not source.is_torchscript and shipped_weights(meta)[1])}

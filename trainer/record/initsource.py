"""``--init-from PATH``: what PATH is, which file holds its weights, and what its metadata says (stdlib only).

A head start trains from another model's weights instead of random ones (``TrainConfig.init_from``). PATH is
one of three kinds:

==============  ===================================================================================================
kind            weights file
==============  ===================================================================================================
``run``         a run directory (``trainer.record.rundir.RunPaths``): its exported ``model.pt`` (metadata in
                ``model.json`` beside it), else its newest checkpoint ``checkpoints/step_NNNNNN.pt``
``checkpoint``  a checkpoint ``.pt`` (``torch.save`` of a dict: model, architecture, model_size, model_config, scale,
                step, config, ...; ``trainer.learn.train``)
``model``       a TorchScript ``model.pt`` (``trainer.export.formats``); its metadata is ``<stem>.json`` beside it
==============  ===================================================================================================

A checkpoint and a TorchScript file are both zip archives; TorchScript's holds ``code/`` and ``constants.pkl``
(``torch.jit.save``'s format), ``torch.save``'s does not, so the kind is read here without torch. This module
resolves and checks what a process without torch can see: existence, readability, an absolute path (the farm's
render nodes resolve a relative one from another folder) and, where ``model.json`` gives it, the network's
architecture, size, scale and channels (compared by :mod:`trainer.record.netcheck`). ``cue_plugin`` checks a
submit with it; :mod:`trainer.learn.init_from` reads checkpoints (torch) and loads the weights.

Errors are :class:`InitFromError`, a :class:`~trainer.core.config.ConfigError` (bad input): the trainer's front
door prints it as one ``cuetrain: error:`` line and exits 2 (:data:`trainer.core.exitcodes.ExitCode.USAGE`), and
``run.json`` records the same exit code (its ``exit_code`` attribute, ``runrecord.failure_fields``).
"""

from __future__ import annotations

import json
import logging
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.core.config import ConfigError
from trainer.record import ckptcopies
from trainer.record.netcheck import Mismatch, network_mismatches, network_of, run_network
from trainer.record.rundir import RunPaths

log = logging.getLogger(__name__)

#: The kinds of ``--init-from`` source (see the module docstring).
KINDS = ("run", "checkpoint", "model")
#: What the user can do about a source that cannot be used (every error ends with it).
FIX = "give a run directory, a checkpoint .pt or a model.pt on shared storage, or leave --init-from out"
#: What to do about a source of another network (every mismatch error ends with it).
MISMATCH_FIX = ("train with the same --architecture/--model-size/--scale/--input-channels/--target-channels or start "
                "from random weights (leave --init-from out)")


class InitFromError(ConfigError):
    """``--init-from`` names a source that is missing, unreadable, or another network; the message names the
    path and the fix. Bad input: exit 2 (ConfigError's ``exit_code``, read by ``trainer.cli`` and
    ``runrecord.failure_fields``)."""


@dataclass(frozen=True)
class InitSource:
    """A resolved ``--init-from`` source (nothing loaded).

    Attributes:
        path: the path as given (``--init-from``).
        kind: ``run``, ``checkpoint`` or ``model`` (:data:`KINDS`).
        weights: the file to load: a TorchScript model or a checkpoint (for a run without ``model.pt``, its newest
            checkpoint; :attr:`checkpoints` lists the older ones to fall back on).
        meta_file: the model's JSON metadata (``model.json``) when :attr:`weights` is TorchScript and it exists;
            None for a checkpoint (its metadata is inside) or a model without one.
        run: the name of the run directory the weights come from ("" when not in one).
        checkpoints: a run's checkpoints newest first (``weights`` is the first), when it has no ``model.pt``.
    """

    path: Path
    kind: str
    weights: Path
    meta_file: Path | None
    run: str
    checkpoints: tuple[Path, ...] = ()

    @property
    def is_torchscript(self) -> bool:
        """True when :attr:`weights` is a TorchScript file (load with ``torch.jit.load``), not a checkpoint."""
        return not self.checkpoints and self.kind != "checkpoint"


def _error(path: str | os.PathLike[str], problem: str, fix: str = FIX) -> InitFromError:
    return InitFromError(f"--init-from {path}: {problem}: {fix}")


def resolve(path: str | os.PathLike[str], *, require_absolute: bool = False) -> InitSource:
    """What ``path`` is and which file holds its weights; checks that file exists and is readable.

    Args:
        path: ``--init-from``: a run directory, a checkpoint ``.pt`` or a TorchScript ``model.pt``.
        require_absolute: refuse a relative path (a farm submit: render nodes start in another folder).

    Raises:
        InitFromError: empty, relative (with ``require_absolute``), missing or unreadable path; a run directory
            with neither ``model.pt`` nor a checkpoint; a file that is neither a checkpoint nor TorchScript.
    """
    if not str(path):
        raise _error("''", "no path given")
    p = Path(path)
    if require_absolute and not p.is_absolute():
        raise _error(p, "a relative path; the farm's render nodes start in another folder",
                     f"give the absolute path on shared storage (e.g. {Path(p).absolute()})")
    if not p.exists():
        raise _error(p, "does not exist (or a folder above it is not readable)")
    if p.is_dir():
        return _resolve_run(p)
    kind = weights_format(p)
    if kind == "checkpoint":
        return InitSource(p, "checkpoint", p, None, _run_of_checkpoint(p))
    meta = p.with_suffix(".json")
    return InitSource(p, "model", p, meta if meta.is_file() else None, _run_of(p.parent))


def _resolve_run(root: Path) -> InitSource:
    """A run directory: its ``model.pt`` (with ``model.json``), else its checkpoints newest first."""
    paths = RunPaths.of(root)
    if not os.access(root, os.R_OK | os.X_OK):
        raise _error(root, "the folder is not readable", "fix its permissions (the farm's user must read it)")
    if paths.model.exists():
        if weights_format(paths.model) != "model":
            raise _error(root, f"{paths.model} is not a TorchScript model", "export it again or give a checkpoint")
        meta = paths.model_meta if paths.model_meta.is_file() else None
        return InitSource(root, "run", paths.model, meta, root.name)
    found = [p for _, p in ckptcopies.newest_first(paths)]  # each step's second copy after its first
    if not found:
        raise _error(root, f"neither {paths.model.name} nor a checkpoint under {paths.checkpoints}",
                     "let that run export its model or write a checkpoint (--checkpoint-interval) first, or "
                     "give another path")
    for candidate in found:
        _check_readable(candidate)
    return InitSource(root, "run", found[0], None, root.name, tuple(found))


def _run_of(folder: Path) -> str:
    """The folder's name when it is a run directory (it holds ``run.json``), else ""."""
    return folder.name if RunPaths.of(folder).run_json.is_file() else ""


def _run_of_checkpoint(p: Path) -> str:
    folder = p.parent.parent if p.parent.name == "copy" else p.parent  # a second copy: checkpoints/copy/
    return _run_of(folder.parent) if folder.name == "checkpoints" else ""


def _check_readable(p: Path) -> None:
    if not os.access(p, os.R_OK):
        raise _error(p, "the file is not readable", "fix its permissions (the farm's user must read it)")


def weights_format(p: Path) -> str:
    """``model`` (a TorchScript archive: ``code/`` and ``constants.pkl``) or ``checkpoint`` (``torch.save``: a zip
    without them, or the legacy pickle format), read from the archive's table of contents (no torch).

    Raises:
        InitFromError: unreadable, or neither (not a zip archive nor a pickle).
    """
    _check_readable(p)
    try:
        with zipfile.ZipFile(p) as archive:
            names = archive.namelist()
    except zipfile.BadZipFile:
        return _legacy_checkpoint(p)
    except OSError as exc:
        raise _error(p, f"cannot read the file ({exc.strerror or exc})") from exc
    records = {name.split("/", 1)[-1] for name in names}
    if "constants.pkl" in records or any(r.startswith("code/") for r in records):
        return "model"
    if "data.pkl" in records:
        return "checkpoint"
    raise _error(p, "a zip archive, but neither a checkpoint (torch.save) nor a TorchScript model (torch.jit.save)")


def _legacy_checkpoint(p: Path) -> str:
    """``torch.save(..., _use_new_zipfile_serialization=False)`` files start with a pickle (protocol 2 opcode)."""
    try:
        with open(p, "rb") as fh:
            head = fh.read(2)
    except OSError as exc:
        raise _error(p, f"cannot read the file ({exc.strerror or exc})") from exc
    if head[:1] == b"\x80":
        return "checkpoint"
    raise _error(p, "not a checkpoint (torch.save) or a TorchScript model (torch.jit.save)")


def read_meta_file(source: InitSource) -> dict[str, Any] | None:
    """The JSON metadata of a TorchScript source (``model.json``), or None when it has none.

    Raises:
        InitFromError: the file is unreadable or not a JSON object.
    """
    if source.meta_file is None:
        return None
    try:
        with open(source.meta_file, encoding="utf-8") as fh:
            meta = json.load(fh)
    except (OSError, ValueError) as exc:
        raise _error(source.path, f"cannot read its metadata {source.meta_file} ({exc})",
                     "export the model again or give its checkpoint") from exc
    if not isinstance(meta, dict):
        raise _error(source.path, f"its metadata {source.meta_file} is not a JSON object",
                     "export the model again or give its checkpoint")
    return meta


def mismatch_error(source: InitSource, found: list[Mismatch]) -> InitFromError:
    """One error naming every mismatch of :func:`trainer.record.netcheck.network_mismatches` and the fix
    (:data:`MISMATCH_FIX`; for a removed architecture, its own fix is in the mismatch's text)."""
    fix = "start from random weights (leave --init-from out)" if any(m.removed for m in found) else MISMATCH_FIX
    return _error(source.path, "; ".join(map(str, found)), fix)


def check_source(path: str | os.PathLike[str], *, architecture: str, model_size: str, scale: int,
                 channels: int = 3, target_channels: int | None = None, require_absolute: bool = False) -> InitSource:
    """Resolve ``path`` (:func:`resolve`) and, where its ``model.json`` says, check it is this run's network.

    ``channels``, ``target_channels``: this run's Input and output channel counts
    (:func:`trainer.record.netcheck.run_network`).
    A checkpoint's metadata is inside the file and needs torch: :func:`trainer.learn.init_from.apply_init_from`
    checks it when the run starts.

    Raises:
        InitFromError: see :func:`resolve`; or the metadata names another network (every difference, one message).
    """
    source = resolve(path, require_absolute=require_absolute)
    meta = read_meta_file(source)
    if meta is not None:
        found = network_mismatches(network_of(meta), run_network(architecture, model_size, scale, channels,
                                                                 target_channels))
        if found:
            raise mismatch_error(source, found)
    return source

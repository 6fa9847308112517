"""The "Start from" choices and what a run started from, as the GUI shows them. Pure Python (no Qt, no torch).

- :class:`StartCandidate`, :func:`start_candidates`, :func:`candidate_for_path`: the submit dialog's "Start from"
  choices (earlier finished runs with a ``model.pt``, or a browsed file; :class:`gui.start_from.StartFromField`).
- :func:`start_mismatch`: why a choice's weights cannot start a run of this factor and model size.
- :func:`started_from_text`, :func:`init_from_record`: what a run started from (``run.json`` ``init_from``, else
  ``config.init_from``), for the Runs panel's Start column and the CueGUI plugin's summary.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from gui.upres import record_scale, scale_text
from trainer.record.netcheck import network_mismatches, network_of, run_network
from trainer.record.rundir import RunPaths
from trainer.record.runrecord import RunRecord, read_record_or_empty

#: Run states whose ``model.pt`` may still be rewritten: such runs are not offered as a head start.
_BUSY_STATES = ("starting", "running")


@dataclass(frozen=True)
class StartCandidate:
    """A model a new run can start from: ``path`` (a run directory or a ``.pt`` file) with what is known of it.

    Attributes:
        path: absolute path passed as ``--init-from``.
        name: short name (the run folder, or ``run/file.pt``).
        scale: its ``config.scale`` [1], None when unknown (a file outside a run directory).
        model_size: its ``config.model_size``, "" when unknown.
        modified: the model file's modification time [seconds since the epoch], 0 when unknown.
    """

    path: str
    name: str
    scale: int | None = None
    model_size: str = ""
    modified: float = 0.0

    @property
    def label(self) -> str:
        """``shot010_v1 (upres 2x, medium) 2025-01-03 14:20`` for the dropdown."""
        what = ", ".join(p for p in ((scale_text(self.scale) if self.scale else ""), self.model_size) if p)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.modified)) if self.modified else ""
        return " ".join(p for p in (self.name, f"({what})" if what else "", when) if p)


def start_candidates(runs: Iterable[tuple[str, RunRecord]]) -> list[StartCandidate]:
    """Earlier runs a new run can start from, newest ``model.pt`` first.

    Args:
        runs: ``(run directory, its latest run.json record)`` pairs (e.g. the Runs panel's runs); a record
            without a config (not polled yet) is read from disk here (one small file per run).

    Returns:
        One candidate per run that has a ``model.pt`` and is not starting or running.
    """
    out = []
    for run_dir, record in runs:
        paths = RunPaths.of(run_dir)
        try:
            modified = os.path.getmtime(paths.model)
        except OSError:
            continue  # no model.pt: nothing to start from
        record = record if record.config else read_record_or_empty(paths)
        if record.state in _BUSY_STATES:
            continue
        out.append(StartCandidate(str(paths.root), _name(str(paths.root)), record_scale(record),
                                  str(record.config.get("model_size", "")), modified))
    return sorted(out, key=lambda c: c.modified, reverse=True)


def candidate_for_path(path: str) -> StartCandidate:
    """A browsed run directory, checkpoint or ``model.pt``; its scale and size come from the ``run.json`` of
    the run directory holding it (the folder itself, the file's folder, or above ``checkpoints/``)."""
    path = os.path.abspath(os.path.expanduser(path))
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    for root in (folder, os.path.dirname(folder)):
        paths = RunPaths.of(root)
        if paths.run_json.is_file():
            record = read_record_or_empty(paths)
            try:
                modified = os.path.getmtime(path if os.path.isfile(path) else paths.model)
            except OSError:
                modified = 0.0
            return StartCandidate(path, _name(path), record_scale(record),
                                  str(record.config.get("model_size", "")), modified)
    return _loose_file(path)


def _loose_file(path: str) -> StartCandidate:
    """A ``.pt`` outside a run directory: scale and size from ``<stem>.json`` beside it when there is one."""
    try:
        with open(os.path.splitext(path)[0] + ".json", encoding="utf-8") as fh:
            meta = json.load(fh)
        modified = os.path.getmtime(path)
    except (OSError, ValueError):
        return StartCandidate(path, _name(path))
    net = network_of(meta if isinstance(meta, dict) else None)
    scale = net["scale"] if isinstance(net["scale"], int) else None
    return StartCandidate(path, _name(path), scale, str(net["model_size"] or ""), modified)


def start_mismatch(candidate: StartCandidate | None, scale: int, model_size: str) -> str:
    """Why ``candidate``'s weights cannot start a ``scale`` x ``model_size`` run ("" when they can or it is unknown);
    the comparison is the trainer's own (``trainer.record.netcheck.network_mismatches``), on what the candidate
    records (its scale and model size)."""
    if candidate is None:
        return ""
    there = {"scale": candidate.scale, "model_size": candidate.model_size or None}
    words = {"scale": lambda m: f"was trained at {scale_text(m.there)}, but this run is {scale_text(m.here)}",
             "model_size": lambda m: f"is a {m.there} model, but this run is {m.here}"}
    problems = [words[m.key](m) for m in network_mismatches(there, run_network(None, model_size, scale, None))]
    if not problems:
        return ""
    return (f"Start from {candidate.name} {' and '.join(problems)}: its weights do not fit; choose a run of the "
            "same factor and model size, or Random weights.")


def started_from_text(record: RunRecord) -> str:
    """What a run started from: ``run.json`` ``init_from`` (the trainer's record), else ``config.init_from``;
    ``random`` when it started from random weights, ``-`` before its config is known."""
    started = init_from_record(record)
    if started:
        name = _name(str(started.get("run") or started.get("path") or ""))
        step = started.get("step")
        return f"{name} step {step}" if started.get("kind") == "checkpoint" and step is not None else name
    path = record.config.get("init_from") if record.config else None
    if isinstance(path, str) and path:
        return _name(path)
    return "random" if record.config else "-"


def init_from_record(record: RunRecord) -> Mapping[str, Any]:
    """``run.json`` ``init_from`` (a typed field in newer records, else an unknown key in ``extra``); {} when none."""
    value = getattr(record, "init_from", None) or record.extra.get("init_from")
    return value if isinstance(value, Mapping) and (value.get("path") or value.get("run")) else {}


def _name(path: str) -> str:
    """A run directory's folder name; a file as ``run/model.pt`` or ``run/checkpoints/step_000100.pt``."""
    norm = os.path.normpath(path)
    if not norm.endswith(".pt"):
        return os.path.basename(norm) or norm
    folder, file = os.path.split(norm)
    if os.path.basename(folder) == "checkpoints":
        return f"{os.path.basename(os.path.dirname(folder))}/checkpoints/{file}"
    return f"{os.path.basename(folder)}/{file}" if os.path.basename(folder) else file

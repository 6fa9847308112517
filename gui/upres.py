"""Upres factor and head start, as the GUI shows and proposes them. Pure Python (stdlib; no Qt, no torch).

- :func:`scale_text`: ``1x`` / ``upres 2x`` for a run's ``config.scale`` (``trainer.core.config.SCALES``).
- :func:`propose_scale`: the factor two plates' sizes imply (Ground Truth over Input), or 1 and a warning.
- :func:`prefill_from_reads`: what a host's two selected Read nodes fill into the submit dialog (Nuke's
  ``menu.py`` snippet reads the nodes; this function only sees their file paths, sizes, channels and a few
  alpha samples, so it is tested without Nuke): the folders, the factor and the task (Matte when the Ground
  Truth's alpha holds a roto, :func:`gui.task.propose_task`).
- :class:`StartCandidate`, :func:`start_candidates`, :func:`candidate_for_path`, :func:`start_mismatch`: the
  "Start from" choices (earlier finished runs with a ``model.pt``, or a browsed file) and their checks.
- :func:`started_from_text`: what a run started from (``run.json`` ``init_from``, else ``config.init_from``).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from gui.task import propose_task
from trainer.core.config import SCALES
from trainer.record.netcheck import network_mismatches, network_of, run_network
from trainer.record.rundir import RunPaths
from trainer.record.runrecord import RunRecord, read_record_or_empty

#: Words in a Read's name or file path that mark it as the Ground Truth (split at non-alphanumerics).
GT_WORDS = frozenset({"gt", "truth", "groundtruth", "target"})
#: Run states whose ``model.pt`` may still be rewritten: such runs are not offered as a head start.
_BUSY_STATES = ("starting", "running")


def scale_text(scale: Any) -> str:
    """``1x`` for a same-size run, ``upres 2x`` / ``upres 4x`` for upres, ``-`` when unknown."""
    if not isinstance(scale, int) or isinstance(scale, bool) or scale < 1:
        return "-"
    return "1x" if scale == 1 else f"upres {scale}x"


def record_scale(record: RunRecord) -> int | None:
    """``config.scale`` of a ``run.json`` record: 1 when the config predates ``--scale``, None without a config."""
    if not record.config:
        return None
    scale = record.config.get("scale", 1)
    return scale if isinstance(scale, int) and not isinstance(scale, bool) else None


# ------------------------------------------------------------------ the factor from two plates
@dataclass(frozen=True)
class ScaleProposal:
    """A proposed ``--scale`` [1] and, when the sizes fit no factor, why (``warning``; "" when they fit)."""

    scale: int
    warning: str = ""


def propose_scale(input_size: tuple[int, int], target_size: tuple[int, int]) -> ScaleProposal:
    """The factor ``target / input`` when width and height agree on it and it is one of ``SCALES``.

    Args:
        input_size: the Input plate's (width, height) [pixels].
        target_size: the Ground Truth plate's (width, height) [pixels].

    Returns:
        ``ScaleProposal(f)`` for f in (1, 2, 4); otherwise ``ScaleProposal(1, warning)`` naming both sizes.
    """
    (iw, ih), (tw, th) = input_size, target_size
    sizes = f"Input {iw}x{ih}, Ground Truth {tw}x{th}"
    if min(iw, ih, tw, th) <= 0:
        return ScaleProposal(1, f"cannot read both plates' sizes ({sizes}); proposing 1x: set the factor by hand")
    if tw % iw == 0 and th % ih == 0 and tw // iw == th // ih and tw // iw in SCALES:
        return ScaleProposal(tw // iw)
    factors = ", ".join(f"{s}x" for s in SCALES)
    return ScaleProposal(1, f"the plates' sizes match no upscale factor ({sizes}; the Ground Truth must be "
                            f"{factors} the Input in both width and height); proposing 1x: check the Reads' formats")


@dataclass(frozen=True)
class ReadInfo:
    """One Read node as a host sees it: ``name``, ``file`` (path or pattern, e.g. ``/p/in.####.exr``), its
    format's ``width`` and ``height`` [pixels], its ``channels`` (Nuke's names, ``rgba.alpha`` ...; None when the
    host did not say) and ``alpha_samples``, its alpha at a few points [0..1] (empty when not sampled)."""

    name: str
    file: str
    width: int
    height: int
    channels: tuple[str, ...] | None = None
    alpha_samples: tuple[float, ...] = ()


@dataclass(frozen=True)
class Prefill:
    """What the submit dialog takes from a host selection: folders ("" = leave the field), the factor [1],
    a note saying where they came from, a warning ("" when none) and the task (a key of
    :data:`gui.task.TASK_TEXTS`; "" = leave the dialog's choice)."""

    input_dir: str = ""
    target_dir: str = ""
    scale: int = 1
    note: str = ""
    warning: str = ""
    task: str = ""


def prefill_from_reads(reads: Sequence[ReadInfo]) -> Prefill | None:
    """The Input and Ground Truth folders and the factor for two selected Reads (None when none is selected).

    Which Read is the Ground Truth: the one whose name or file says so (:data:`GT_WORDS`), else the larger
    plate, else the second in ``reads`` (selection order). Any other count of Reads gives only a warning.
    The task is proposed from the Ground Truth's channels and alpha samples (:func:`gui.task.propose_task`);
    when the host gave no channels (``channels`` None) it is "" (the dialog keeps its choice).
    """
    if not reads:
        return None
    if len(reads) != 2:
        return Prefill(warning=f"{len(reads)} Read node(s) selected: select two (Input and Ground Truth) to fill "
                               "the folders and the upscale factor from them")
    inp, gt = _input_and_gt(reads[0], reads[1])
    proposal = propose_scale((inp.width, inp.height), (gt.width, gt.height))
    note = (f"From the Reads: Input {inp.name} {inp.width}x{inp.height}, Ground Truth {gt.name} "
            f"{gt.width}x{gt.height}: {proposal.scale}x")
    task = ""
    if gt.channels is not None:
        task_proposal = propose_task(gt.channels, gt.alpha_samples)
        task, note = task_proposal.task, f"{note}; {task_proposal.note}"
    return Prefill(os.path.dirname(inp.file), os.path.dirname(gt.file), proposal.scale, note, proposal.warning, task)


def _input_and_gt(a: ReadInfo, b: ReadInfo) -> tuple[ReadInfo, ReadInfo]:
    a_gt, b_gt = _says_gt(a), _says_gt(b)
    if a_gt != b_gt:
        return (b, a) if a_gt else (a, b)
    if a.width * a.height != b.width * b.height:
        return (a, b) if a.width * a.height < b.width * b.height else (b, a)
    return a, b


def _says_gt(read: ReadInfo) -> bool:
    words = set(re.split(r"[^a-z0-9]+", f"{read.name} {os.path.basename(read.file)}".lower()))
    return bool(words & GT_WORDS)


# ------------------------------------------------------------------------------ head start
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

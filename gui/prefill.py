"""What a host's selection fills into the submit dialog. Pure Python (stdlib; no Qt, no torch).

- :class:`ReadInfo`, :class:`Prefill`, :func:`prefill_from_reads`: two selected Read nodes (their file paths,
  sizes, channels and a few alpha samples) become the Input and Ground Truth folders, the upscale factor
  (:func:`gui.upres.propose_scale`) and the task (Matte when the Ground Truth's alpha holds a roto,
  :func:`gui.task.propose_task`); tested without a host.
- :func:`nuke_reads`, :func:`nuke_prefill`: the same read from Nuke's selection through the ``nuke`` module it is
  given (``selectedNodes``, ``filename``, ``sample``; a stub in tests), for ``farm_templates/hosts/nuke/menu.py``.
  Maya's and Houdini's menus pass no prefill: the dialog opens with the fields as they were.

The dialog applies a :class:`Prefill` with :meth:`gui.submit_dialog.SubmitDialog.apply_prefill`; the host hands a
function returning one to :func:`gui.menu.install_menu` (``prefill=``), asked each time the dialog opens.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Sequence

from gui.task import ALPHA_CHANNEL, alpha_grid, propose_task
from gui.upres import propose_scale

log = logging.getLogger("cuetrain.nuke")

#: Words in a Read's name or file path that mark it as the Ground Truth (split at non-alphanumerics).
GT_WORDS = frozenset({"gt", "truth", "groundtruth", "target"})


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


# ------------------------------------------------------------------------------ Nuke's selection
def nuke_reads(nuke: Any) -> list[ReadInfo]:
    """The selected Read nodes of a Nuke session as :class:`ReadInfo`, in the order they were selected.

    Args:
        nuke: Nuke's ``nuke`` module (or a stand-in with ``selectedNodes(cls)``, ``filename(node)`` and
            ``sample(node, channel, x, y)``); ``nuke.selectedNodes`` lists the last selected first. Each node
            gives ``name()``, ``format()`` (``width()``, ``height()`` [pixels]), ``channels()`` and ``["file"]``.
    """
    reads = []
    for node in reversed(nuke.selectedNodes("Read")):
        fmt = node.format()
        channels, samples = _alpha_of(nuke, node, fmt.width(), fmt.height())
        reads.append(ReadInfo(node.name(), nuke.filename(node) or node["file"].value(), fmt.width(), fmt.height(),
                              channels, samples))
    return reads


def _alpha_of(nuke: Any, node: Any, width: int, height: int) -> tuple[tuple[str, ...] | None, tuple[float, ...]]:
    """``(channel names, alpha samples)`` of a Read: ``node.channels()`` and, when it has ``rgba.alpha``, its
    value at a 5x5 grid of the format (:func:`gui.task.alpha_grid`) at the current frame. ``(None, ())`` when Nuke
    cannot list the channels; a sample that fails is left out and logged (logger ``cuetrain.nuke``)."""
    try:
        channels = tuple(str(c) for c in node.channels())
    except Exception as exc:  # noqa: BLE001 - any Nuke error: the dialog opens without a task proposal
        log.warning("cuetrain: cannot list the channels of %s (%s); the task is not proposed", node.name(), exc)
        return None, ()
    if ALPHA_CHANNEL not in channels:
        return channels, ()
    samples, failed = [], []
    for x, y in alpha_grid(width, height):
        try:
            samples.append(float(nuke.sample(node, ALPHA_CHANNEL, x, y)))
        except Exception as exc:  # noqa: BLE001 - one unreadable sample must not stop the others or the dialog
            failed.append(f"({x:g}, {y:g}): {exc}")
    if failed:
        log.warning("cuetrain: %d of %d alpha samples of %s failed, e.g. %s", len(failed), len(failed) + len(samples),
                    node.name(), failed[0])
    return channels, tuple(samples)


def nuke_prefill(nuke: Any) -> Prefill | None:
    """What Nuke's selection fills in (:func:`prefill_from_reads` of :func:`nuke_reads`): two selected Reads give
    both folders, the factor from their formats (1x and a warning when none fits) and the task from the Ground
    Truth's alpha; None when no Read is selected."""
    return prefill_from_reads(nuke_reads(nuke))

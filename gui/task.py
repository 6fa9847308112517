"""What a run learns, as the GUI names and proposes it (mattes included). Pure Python (stdlib; no Qt, no torch).

- :data:`TASK_TEXTS`, :func:`task_channels`: the submit dialog's "Learn" choices and the ``--input-channels`` /
  ``--target-channels`` each one sends (:data:`trainer.core.channels.TASKS`).
- :func:`record_plan`, :func:`task_text`, :func:`channels_text`: a run's task from its ``run.json`` config, as the
  Runs panel's Task column and the CueGUI plugin's summary show it (a config from before channels = colour).
- :func:`propose_task`: Matte when the Ground Truth's alpha holds a roto (a host samples it, e.g. Nuke's
  ``menu.py`` with ``nuke.sample``), else Colour.
- :func:`preview_problems`: the submit dialog's check of its "Preview frames" path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from trainer.core.channels import TASKS, ChannelError, ChannelPlan
from trainer.record.runrecord import RunRecord

#: The "Learn" dropdown's text for each task of :data:`trainer.core.channels.TASKS`, in the order offered.
TASK_TEXTS = {"colour": "Colour (RGB)", "matte": "Matte (alpha)", "colour+alpha": "Colour + alpha"}
#: The channel a host reads the Ground Truth's alpha from (Nuke's name: layer ``rgba``, channel ``alpha``).
ALPHA_CHANNEL = "rgba.alpha"
#: Two alpha samples closer than this are equal [0..1 alpha]: a constant alpha is no roto.
ALPHA_TOLERANCE = 1e-4


def task_channels(task: str) -> tuple[str, str]:
    """``(input_channels, target_channels)`` option strings of ``task`` (``"R,G,B", "A"`` for ``matte``).

    Raises:
        ValueError: ``task`` is not one of :data:`TASK_TEXTS` (the message lists them).
    """
    if task not in TASKS:
        raise ValueError(f"task {task!r} is not one of {', '.join(TASK_TEXTS)}")
    inputs, targets = TASKS[task]
    return ",".join(inputs), ",".join(targets)


def record_plan(record: RunRecord) -> ChannelPlan | None:
    """The :class:`ChannelPlan` of a ``run.json`` record's config: RGB -> RGB when the config predates
    ``--input-channels`` / ``--target-channels``; None without a config or with channel lists that do not parse."""
    if not record.config:
        return None
    inputs = record.config.get("input_channels", "R,G,B")
    targets = record.config.get("target_channels", "R,G,B")
    try:
        return ChannelPlan.parse(str(inputs), str(targets))
    except ChannelError:
        return None


def task_text(record: RunRecord) -> str:
    """``colour``, ``matte``, ``colour+alpha``, or for any other plan its channels (``R,G,B,A -> Z``); ``-`` when
    the record has no (readable) config yet."""
    plan = record_plan(record)
    if plan is None:
        return "-"
    return plan.task if plan.task != "other" else channels_text(plan)


def channels_text(plan: ChannelPlan | None) -> str:
    """``R,G,B -> A`` (the Task cell's tooltip); "" for None."""
    return f"{','.join(plan.inputs)} -> {','.join(plan.targets)}" if plan is not None else ""


# ------------------------------------------------------------------ proposing a task from a host's Read
@dataclass(frozen=True)
class TaskProposal:
    """A proposed task (a key of :data:`TASK_TEXTS`) and why, in words for the dialog's note."""

    task: str
    note: str


def propose_task(channels: Sequence[str], alpha_samples: Sequence[float]) -> TaskProposal:
    """Matte when the Ground Truth has :data:`ALPHA_CHANNEL` and its sampled values differ (a roto), else Colour.

    Args:
        channels: the Ground Truth Read's channel names (Nuke's ``node.channels()``, e.g. ``rgba.red`` ...).
        alpha_samples: its alpha at a few points (e.g. a 5x5 grid) [0..1]; samples that failed are left out.

    Returns:
        ``matte`` for a varying alpha; ``colour`` for no alpha, a constant alpha (all 0 or all 1 is no roto) or no
        samples, each with a note saying which.
    """
    if ALPHA_CHANNEL not in channels:
        return TaskProposal("colour", "the Ground Truth has no alpha: learning colour")
    if not alpha_samples:
        return TaskProposal("colour", "could not sample the Ground Truth's alpha: learning colour; choose Matte "
                                      "by hand if its alpha holds a roto")
    if max(alpha_samples) - min(alpha_samples) <= ALPHA_TOLERANCE:
        return TaskProposal("colour", f"the Ground Truth's alpha is a constant {alpha_samples[0]:g} (no roto): "
                                      "learning colour")
    return TaskProposal("matte", "the Ground Truth's alpha holds a matte: learning Matte (alpha)")


def alpha_grid(width: int, height: int, n: int = 5) -> list[tuple[float, float]]:
    """``n`` x ``n`` pixel centres spread over a ``width`` x ``height`` format, where a host samples the alpha
    [pixels, Nuke's origin at the bottom left]; [] for an unknown size."""
    if width <= 0 or height <= 0 or n <= 0:
        return []
    return [((i + 0.5) * width / n, (j + 0.5) * height / n) for j in range(n) for i in range(n)]


# ------------------------------------------------------------------ preview frames
def preview_problems(path: str) -> list[str]:
    """Why the "Preview frames" path cannot be used ([] when it is empty, an existing frame or a folder)."""
    path = path.strip()
    if path and not os.path.exists(os.path.expanduser(path)):
        return [f"Preview frames {path} does not exist: choose a frame or a folder of a few frames outside the "
                "data set, or clear the field."]
    return []

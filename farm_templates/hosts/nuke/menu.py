"""Nuke (14, 15 with PySide2; 16 with PySide6): adds Render > Train on Render Farm.

Install: copy this file into a folder on NUKE_PATH (e.g. ~/.nuke/menu.py, or append its lines to an
existing menu.py). Nuke's Python imports only cuetrain's ``gui`` with qtpy, pyqtgraph and numpy: set
CUETRAIN_ROOT to the cuetrain checkout (or install those into Nuke's site-packages). Every farm call and
the advisor run in the cuetrain environment, out of process: set CUETRAIN_PYTHON to its interpreter
(e.g. /studio/cuetrain/.venv/bin/python), since Nuke's own Python and gRPC are not cuetrain's.

With two Read nodes selected (Input and Ground Truth), Train on Render Farm fills both folders and proposes
the upscale factor from the Reads' formats (``gui.upres.prefill_from_reads``), and Learn: Matte (alpha) when the
Ground Truth's alpha holds a roto (``rgba.alpha`` sampled at a 5x5 grid with ``nuke.sample`` varies; a constant
alpha, all 1 or all 0, is no roto), else Colour (``gui.task.propose_task``). Nothing here stops the dialog
opening: a Read whose channels or samples Nuke cannot give is only logged.
"""

import logging
import os
import sys

import nuke

log = logging.getLogger("cuetrain.nuke")

_root = os.environ.get("CUETRAIN_ROOT")
if _root and _root not in sys.path:
    sys.path.insert(0, _root)
if _root and not os.environ.get("CUETRAIN_PYTHON") and os.path.exists(os.path.join(_root, ".venv", "bin", "python")):
    os.environ["CUETRAIN_PYTHON"] = os.path.join(_root, ".venv", "bin", "python")  # the checkout's environment


def _selected_reads():
    """The selected Read nodes as ``gui.upres.ReadInfo`` (name, file, format size), in the order they were
    selected (``nuke.selectedNodes`` lists the last selected first)."""
    from gui.upres import ReadInfo

    reads = []
    for node in reversed(nuke.selectedNodes("Read")):
        fmt = node.format()
        channels, samples = _alpha_of(node, fmt.width(), fmt.height())
        reads.append(ReadInfo(node.name(), nuke.filename(node) or node["file"].value(), fmt.width(), fmt.height(),
                              channels, samples))
    return reads


def _alpha_of(node, width, height):
    """``(channel names, alpha samples)`` of a Read: ``node.channels()`` and, when it has ``rgba.alpha``, its
    value at a 5x5 grid of the format (``gui.task.alpha_grid``) at the current frame. ``(None, ())`` when Nuke
    cannot list the channels; a sample that fails is left out and logged."""
    from gui.task import ALPHA_CHANNEL, alpha_grid

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


def _prefill_from_selection():
    """Two selected Reads fill the dialog's Input and Ground Truth folders and propose the upscale factor from
    their formats (Ground Truth width / Input width when it is 1, 2 or 4 in both dimensions; else 1x and a
    warning in the dialog) and the task from the Ground Truth's alpha (Matte for a roto, else Colour)."""
    from gui.upres import prefill_from_reads

    return prefill_from_reads(_selected_reads())


if nuke.GUI:
    from gui.menu import install_in_main_window

    # Nuke's main window exists when menu.py runs; the call retries briefly from the event loop if not.
    install_in_main_window(prefill=_prefill_from_selection)

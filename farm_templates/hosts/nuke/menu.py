"""Nuke (14, 15 with PySide2; 16 with PySide6): adds Render > Train on Render Farm.

Install: copy this file into a folder on NUKE_PATH (e.g. ~/.nuke/menu.py, or append its lines to an
existing menu.py). Nuke's Python imports only cuetrain's ``gui`` with qtpy, pyqtgraph and numpy: set
CUETRAIN_ROOT to the cuetrain checkout (or install those into Nuke's site-packages). Every farm call and
the advisor run in the cuetrain environment, out of process: set CUETRAIN_PYTHON to its interpreter
(e.g. /studio/cuetrain/.venv/bin/python), since Nuke's own Python and gRPC are not cuetrain's.

With two Read nodes selected (Input and Ground Truth), Train on Render Farm fills both folders and proposes
the upscale factor from the Reads' formats (``gui.prefill.nuke_prefill``), and Learn: Matte (alpha) when the
Ground Truth's alpha holds a roto (``rgba.alpha`` sampled at a 5x5 grid with ``nuke.sample`` varies; a constant
alpha, all 1 or all 0, is no roto), else Colour (``gui.task.propose_task``). Nothing here stops the dialog
opening: a Read whose channels or samples Nuke cannot give is only logged (logger ``cuetrain.nuke``).
"""

import os
import sys

import nuke

_root = os.environ.get("CUETRAIN_ROOT")
if _root and _root not in sys.path:
    sys.path.insert(0, _root)
if _root and not os.environ.get("CUETRAIN_PYTHON") and os.path.exists(os.path.join(_root, ".venv", "bin", "python")):
    os.environ["CUETRAIN_PYTHON"] = os.path.join(_root, ".venv", "bin", "python")  # the checkout's environment


def _prefill_from_selection():
    """Two selected Reads fill the dialog's Input and Ground Truth folders and propose the upscale factor from
    their formats (Ground Truth width / Input width when it is 1, 2 or 4 in both dimensions; else 1x and a
    warning in the dialog) and the task from the Ground Truth's alpha (Matte for a roto, else Colour):
    ``gui.prefill.nuke_prefill`` reads them through this session's ``nuke`` module."""
    from gui.prefill import nuke_prefill

    return nuke_prefill(nuke)


if nuke.GUI:
    from gui.menu import install_in_main_window

    # Nuke's main window exists when menu.py runs; the call retries briefly from the event loop if not.
    install_in_main_window(prefill=_prefill_from_selection)

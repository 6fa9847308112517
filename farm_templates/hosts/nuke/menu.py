"""Nuke (14, 15 with PySide2; 16 with PySide6): adds Render > Train on Render Farm.

Install: copy this file into a folder on NUKE_PATH (e.g. ~/.nuke/menu.py, or append its lines to an
existing menu.py), and make cuetrain importable by Nuke's Python: either install it into Nuke's
site-packages (with qtpy, pyqtgraph, numpy) or set CUETRAIN_ROOT to the cuetrain checkout.
"""

import os
import sys

import nuke

_root = os.environ.get("CUETRAIN_ROOT")
if _root and _root not in sys.path:
    sys.path.insert(0, _root)

if nuke.GUI:
    from gui.menu import install_in_main_window

    # Nuke's main window exists when menu.py runs; the call retries briefly from the event loop if not.
    install_in_main_window()

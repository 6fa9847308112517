"""Maya (2025, PySide6): adds Render > Train on Render Farm to the main window's menu bar.

Install: put this file in a scripts folder on MAYA_SCRIPT_PATH (e.g. ~/maya/2025/scripts/userSetup.py,
or append its lines to an existing userSetup.py). Maya's Python imports only cuetrain's ``gui`` with qtpy,
pyqtgraph and numpy: set CUETRAIN_ROOT to the checkout (or ``mayapy -m pip install`` those). Farm calls and
the advisor run out of process in the cuetrain environment: set CUETRAIN_PYTHON to its interpreter.
"""

import os
import sys

import maya.cmds as cmds
import maya.utils

_root = os.environ.get("CUETRAIN_ROOT")
if _root and _root not in sys.path:
    sys.path.insert(0, _root)
if _root and not os.environ.get("CUETRAIN_PYTHON") and os.path.exists(os.path.join(_root, ".venv", "bin", "python")):
    os.environ["CUETRAIN_PYTHON"] = os.path.join(_root, ".venv", "bin", "python")  # the checkout's environment


def _install_cuetrain_menu():
    from gui.menu import install_in_main_window

    install_in_main_window()


if not cmds.about(batch=True):
    # userSetup.py runs before the UI exists: install once Maya is idle with its main window up.
    maya.utils.executeDeferred(_install_cuetrain_menu)

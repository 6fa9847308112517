"""Host integration: handler sharing, main-window install, and the host snippets executed against stub
host modules (``nuke``, ``maya.cmds``/``maya.utils``, ``hou``) with a real QMainWindow."""

from __future__ import annotations

import os
import runpy
import sys
import types
import xml.etree.ElementTree as ET
from pathlib import Path

from qtpy.QtWidgets import QMainWindow, QMenu

from gui import menu
from gui.menu import ACTION_TEXT, handler_of, host_handler, install_in_main_window, open_train_dialog

HOSTS = Path(__file__).resolve().parents[2] / "farm_templates" / "hosts"


def test_install_in_main_window_and_script_items_share_one_handler(qtbot, monkeypatch, farm, settings):
    monkeypatch.setattr(menu, "default_settings", lambda: settings)  # never the user's settings
    window = QMainWindow()
    qtbot.addWidget(window)
    window.show()
    action = install_in_main_window(lambda: farm)
    assert action is not None and action.text() == ACTION_TEXT and install_in_main_window() is action
    handler = handler_of(action)
    assert host_handler(window) is handler
    dialog = open_train_dialog(parent=window)
    assert dialog is handler.dialog and dialog.isVisible() and dialog.parent() is window
    dialog.close()
    assert handler.controller.farm() is farm
    handler.controller.shutdown()


def _host_window(qtbot, monkeypatch, settings) -> QMainWindow:
    """A host's main window (a real QMainWindow with a menu bar), the only visible one."""
    monkeypatch.setattr(menu, "default_settings", lambda: settings)  # never the user's settings
    monkeypatch.setenv("CUETRAIN_ROOT", str(HOSTS.parents[1]))
    monkeypatch.setenv("CUETRAIN_PYTHON", "")  # restored after the test; the snippet fills it in
    window = QMainWindow()
    window.menuBar().addMenu("&File")
    qtbot.addWidget(window)
    window.show()
    return window


def _stub(monkeypatch, name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def _run_snippet(path: Path) -> dict:
    """Execute a host snippet as the host does (a fresh ``__main__``-like namespace)."""
    return runpy.run_path(str(path), run_name="__main__")


def _assert_cuetrain_python_set() -> None:
    """The snippet pointed CUETRAIN_PYTHON at the checkout's .venv (when it has one)."""
    venv_python = HOSTS.parents[1] / ".venv" / "bin" / "python"
    assert os.environ["CUETRAIN_PYTHON"] == (str(venv_python) if venv_python.exists() else "")


def _open_from_menu(qtbot, window: QMainWindow):
    _assert_cuetrain_python_set()
    render = next(m for m in window.menuBar().findChildren(QMenu) if m.title().replace("&", "") == "Render")
    action = next(a for a in render.actions() if a.text() == ACTION_TEXT)
    action.trigger()
    dialog = handler_of(action).dialog
    qtbot.waitUntil(lambda: dialog is not None and dialog.isVisible())
    assert dialog.parent() is window
    dialog.close()
    handler_of(action).controller.shutdown()


def test_nuke_menu_py_adds_the_item_and_it_opens_the_dialog(qtbot, monkeypatch, settings):
    window = _host_window(qtbot, monkeypatch, settings)
    _stub(monkeypatch, "nuke", GUI=True)
    _run_snippet(HOSTS / "nuke" / "menu.py")
    _open_from_menu(qtbot, window)


def test_maya_user_setup_installs_when_maya_is_idle(qtbot, monkeypatch, settings):
    window = _host_window(qtbot, monkeypatch, settings)
    deferred = []
    maya = _stub(monkeypatch, "maya")
    maya.cmds = _stub(monkeypatch, "maya.cmds", about=lambda batch=False: False)
    maya.utils = _stub(monkeypatch, "maya.utils", executeDeferred=deferred.append)
    _run_snippet(HOSTS / "maya" / "userSetup.py")
    assert len(deferred) == 1 and not [m for m in window.menuBar().findChildren(QMenu) if "Render" in m.title()]
    deferred[0]()  # Maya idle, its main window up
    _open_from_menu(qtbot, window)


def test_houdini_menu_items_open_the_dialog_and_the_runs(qtbot, monkeypatch, settings):
    window = _host_window(qtbot, monkeypatch, settings)
    _stub(monkeypatch, "hou", qt=types.SimpleNamespace(mainWindow=lambda: window))
    root = ET.parse(HOSTS / "houdini" / "MainMenuCommon.xml").getroot()
    items = {item.findtext("label"): item.findtext("scriptCode")
             for item in root.iter("scriptItem")}
    assert root.find("menuBar/subMenu").get("id") == "render_menu" and ACTION_TEXT in items
    exec(compile(items[ACTION_TEXT], "MainMenuCommon.xml", "exec"), {})
    _assert_cuetrain_python_set()
    handler = host_handler(window)
    assert handler.dialog is not None and handler.dialog.isVisible() and handler.dialog.parent() is window
    exec(compile(items["Training Runs..."], "MainMenuCommon.xml", "exec"), {})
    assert handler._runs_view is not None and handler._runs_view.isVisible()
    handler.dialog.close()
    handler._runs_view.close()
    handler.controller.shutdown()

"""Host integration: handler sharing, main-window install, template listing, host snippet files."""

from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from pathlib import Path

from qtpy.QtWidgets import QMainWindow

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


def test_host_snippets_parse():
    for name in ("nuke/menu.py", "maya/userSetup.py"):
        source = (HOSTS / name).read_text()
        ast.parse(source)
        assert "install_in_main_window" in source
    root = ET.parse(HOSTS / "houdini" / "MainMenuCommon.xml").getroot()
    scripts = [item.findtext("scriptCode") for item in root.iter("scriptItem")]
    assert len(scripts) == 2
    for code in scripts:
        compile(code, "MainMenuCommon.xml", "exec")

"""Load the cuetrain "Training Runs" plugin the way CueGUI 1.37 does, in CueGUI's environment.

``cuegui.Plugins.Plugins(main_window, "Cuetopia")`` reads ``Plugin_Paths`` from the application's settings
(set here to ``gui/cuegui_plugins``), imports every module there and registers it by ``PLUGIN_NAME``;
``setupPluginMenu`` builds the menu; triggering "Training Runs" launches the dock on the main window.
"""

from __future__ import annotations

import json
from pathlib import Path

from qtpy import QtWidgets

ROOT = Path(__file__).resolve().parents[2]
PLUGIN_DIR = ROOT / "gui" / "cuegui_plugins"


class PluginSession:
    """A CueGUI-like main window with the plugin menu, the launched dock and the job monitor to click in."""

    def __init__(self, app, job) -> None:
        import cuegui.JobMonitorTree
        import cuegui.Plugins

        jobs_view = cuegui.JobMonitorTree.JobMonitorTree(None)  # the main window's job monitor
        jobs_view.addJob(job)
        self.window = QtWidgets.QMainWindow()
        self.window.app_name = "Cuetopia"  # what Plugins checks PLUGIN_REQUIRES against
        self.window.resize(1500, 900)
        self.window.setCentralWidget(jobs_view)
        app.settings.setValue("Plugin_Paths", [str(PLUGIN_DIR)])
        self.plugins = cuegui.Plugins.Plugins(self.window, "Cuetopia")
        self.menu = self.plugins.setupPluginMenu(QtWidgets.QMenu("&Views/Plugins", self.window))
        self.window.menuBar().addMenu(self.menu)
        self.window.show()
        category = next(m for m in self.menu.findChildren(QtWidgets.QMenu) if m.title() == "Cuetrain")
        action = next(a for a in category.actions() if a.text() == "Training Runs")
        self.menu.triggered.emit(action)  # what a click on the menu item does
        self.dock = next(instance for name, instance in self.plugins.runningList() if name == "Training Runs")
        self.jobs_view = jobs_view

    def select_first_job(self) -> None:
        """Click the first job in the job monitor (CueGUI emits app.single_click with the job)."""
        item = self.jobs_view.topLevelItem(0)
        self.jobs_view.itemClicked.emit(item, 0)

    def shown(self) -> dict:
        """What the dock shows: label, rank rows, graph curves and points, contact sheet path."""
        dock = self.dock
        curves = dock.graph.curve_names()
        points = sum(len(dock.graph.curve_data(run)[0] if dock.graph.curve_data(run)[0] is not None else ())
                     for run in curves)
        return {"label": dock.job_label.text(), "ranks": dock.rank_rows(), "curves": curves, "points": points,
                "sheet": dock.sheet.current_path(), "docked": dock.parentWidget() is self.window}

    def grab(self, path: Path) -> None:
        self.window.grab().save(str(path))

    def close(self) -> None:
        from tests.cuebot.cuegui_setup import dispose

        self.dock.close()
        dispose(self.jobs_view)
        self.window.close()


def open_plugin(app, job) -> PluginSession:
    """A main window with ``job`` in its job monitor and the Training Runs dock launched from the menu."""
    return PluginSession(app, job)


if __name__ == "__main__":
    print(json.dumps({"plugin_dir": str(PLUGIN_DIR)}))

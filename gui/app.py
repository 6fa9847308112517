"""The standalone host window (``cuetrain gui``) and :func:`show` for embedding in a DCC.

The window is a ``QMainWindow`` with a Render menu (the same :func:`gui.menu.install_menu` hosts use)
and the Runs panel as its central widget. :func:`show` reuses the host's ``QApplication``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from qtpy.QtWidgets import QApplication, QMainWindow, QWidget

from gui.controller import FarmFactory, RunsController
from gui.persistence import default_settings
from gui.menu import handler_of, install_menu
from gui.runs_panel import RunsPanel

log = logging.getLogger(__name__)


class RunsWindow(QMainWindow):
    """Main window: Render menu + Runs panel, sharing one controller.

    Args:
        controller: the runs controller (the window does not own its persistence choices).
        parent: host window, if any.
    """

    def __init__(self, controller: RunsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("cuetrain: Training Runs")
        self.controller = controller
        self.panel = RunsPanel(controller)
        self.setCentralWidget(self.panel)
        self.train_action = install_menu(self.menuBar(), controller=controller, runs_view=self)
        self.panel.new_training_requested.connect(self.train_action.trigger)
        self.resize(1200, 800)

    def open_submit_dialog(self):
        """Open Render > Train on Render Farm's dialog (returns it)."""
        return handler_of(self.train_action).open_dialog()

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.controller.set_live_updates(False)
        self.panel.shutdown()
        super().closeEvent(event)


def show(parent: QWidget | None = None, farm_factory: FarmFactory | None = None,
         controller: RunsController | None = None) -> RunsWindow:
    """Show the runs window inside an already running Qt application (a DCC host).

    Reuses ``QApplication.instance()``; the caller (or ``parent``) keeps the returned window alive.
    """
    if QApplication.instance() is None:
        raise RuntimeError("no QApplication: call gui.app.main() to run standalone")
    if controller is None:
        controller = RunsController(farm_factory, default_settings())
        controller.restore()
    window = RunsWindow(controller, parent)
    if controller.parent() is None:
        controller.setParent(window)  # the window owns a controller made here
    window.show()
    return window


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cuetrain gui", description="Submit and watch cuetrain training runs.")
    parser.add_argument("run_dirs", nargs="*", help="run directories to follow (added to the saved list)")
    parser.add_argument("--live", action="store_true", help="start with Live Updates on")
    parser.add_argument("--poll-interval", type=float, default=5.0, help="Live Updates period in seconds (default 5)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the standalone window until it is closed; returns the exit code."""
    args = _parse(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = QApplication.instance() or QApplication(sys.argv[:1])
    controller = RunsController(settings=default_settings(), poll_interval_ms=int(args.poll_interval * 1000))
    controller.restore()
    for run_dir in args.run_dirs:
        controller.add_run(run_dir)
    window = RunsWindow(controller)
    controller.setParent(window)
    log.info("cuetrain gui: following %d runs, live updates %s", len(controller.runs()), "on" if args.live else "off")
    app.aboutToQuit.connect(controller.shutdown)
    window.show()  # the panel polls once when first shown
    controller.set_live_updates(args.live)
    return int(app.exec())

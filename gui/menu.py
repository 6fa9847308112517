"""Render > Train on Render Farm in any Qt host (Nuke, Maya, Houdini, the standalone ``cuetrain gui``).

:func:`install_menu` finds or creates the host's "Render" menu and adds the action; calling it again
returns the same action. Nothing is kept in module globals: the action owns a :class:`TrainOnFarm`
handler (a child ``QObject``), which owns the controller, the dialog and the runs window.

A host may pass ``prefill``: a function called each time the dialog opens that returns what to fill in from
the host's selection (:class:`gui.prefill.Prefill`, or None), e.g. Nuke's ``menu.py`` turns the two selected
Read nodes into the Input and Ground Truth folders, the upscale factor and the task
(Matte when the Ground Truth's alpha holds a roto; :func:`gui.prefill.nuke_prefill`).
"""

from __future__ import annotations

import logging
from typing import Callable

from qtpy.QtCore import QObject, Qt, QTimer
from qtpy.QtWidgets import QAction, QApplication, QMainWindow, QMenu, QMenuBar, QWidget

from gui.controller import FarmFactory, RunsController
from gui.persistence import default_settings
from gui.runs_panel import RunsPanel
from gui.submit_dialog import SubmitDialog
from gui.prefill import Prefill

log = logging.getLogger(__name__)

#: A host's view of its selection, asked each time the dialog opens (None: nothing to fill in).
PrefillSource = Callable[[], "Prefill | None"]

RENDER_MENU = "Render"
ACTION_TEXT = "Train on Render Farm"
RUNS_ACTION_TEXT = "Training Runs..."
ACTION_NAME = "cuetrainTrainOnRenderFarm"
RUNS_ACTION_NAME = "cuetrainTrainingRuns"
HANDLER_NAME = "cuetrainHandler"


class TrainOnFarm(QObject):
    """What the menu actions do: open the submit dialog, show the runs, share one controller.

    Args:
        farm_factory: farm backend factory for a controller made here (default: OpenCue).
        controller: use this controller instead of making one (the standalone app shares its own).
        host: the host's main window: parent of the dialog and of the runs window.
        runs_view: a widget already showing the runs (the standalone window); shown instead of a new one.
        parent: Qt parent (the menu action).
        prefill: the host's selection as dialog values, asked each time the dialog opens (see the module doc).
    """

    def __init__(self, farm_factory: FarmFactory | None = None, controller: RunsController | None = None,
                 host: QWidget | None = None, runs_view: QWidget | None = None, parent: QObject | None = None,
                 prefill: PrefillSource | None = None) -> None:
        super().__init__(parent)
        self._prefill = prefill
        self._farm_factory = farm_factory
        self._controller = controller
        self._host = host
        self._runs_view = runs_view
        self.dialog: SubmitDialog | None = None

    @property
    def controller(self) -> RunsController:
        """The controller, made (and its saved runs restored) on first use."""
        if self._controller is None:
            self._controller = RunsController(self._farm_factory, default_settings(), parent=self)
            self._controller.restore()
            app = QApplication.instance()
            if app is not None:
                app.aboutToQuit.connect(self._controller.shutdown)
        return self._controller

    def open_dialog(self) -> SubmitDialog:
        """Show the submit dialog (modeless, the same one each time so the values stay filled in)."""
        if self.dialog is None:
            self.dialog = SubmitDialog(self.controller, parent=self._host)
            self.dialog.accepted.connect(self.show_runs)
        if self._prefill is not None:
            try:
                self.dialog.apply_prefill(self._prefill())
            except Exception as exc:  # noqa: BLE001 - a host's selection must never stop the dialog opening
                log.warning("could not read the host selection: %s", exc)
        self.dialog.show()
        self.dialog.raise_()
        self.dialog.activateWindow()
        return self.dialog

    def show_runs(self) -> QWidget:
        """Show the Runs panel (a tool window over the host, made on first use)."""
        if self._runs_view is None:
            panel = RunsPanel(self.controller, parent=self._host)
            panel.setWindowFlag(Qt.WindowType.Window, True)
            panel.setWindowTitle("cuetrain: Training Runs")
            panel.resize(1100, 750)
            panel.new_training_requested.connect(self.open_dialog)
            self._runs_view = panel
        self._runs_view.show()
        self._runs_view.raise_()
        return self._runs_view


def find_render_menu(menubar_or_menu: QMenuBar | QMenu) -> QMenu:
    """The "Render" menu: ``menubar_or_menu`` itself when it is that menu, else its child, made if missing.

    Menus are found through ``findChildren`` + ``menuAction()``, not ``QAction.menu()``: under PySide6 6.5
    the wrapper ``QAction.menu()`` returns can take ownership and delete the host's menu.
    """
    if isinstance(menubar_or_menu, QMenu) and _plain(menubar_or_menu.title()) == RENDER_MENU:
        return menubar_or_menu
    entries = menubar_or_menu.actions()
    for menu in menubar_or_menu.window().findChildren(QMenu):
        if _plain(menu.title()) == RENDER_MENU and menu.menuAction() in entries:
            return menu
    return menubar_or_menu.addMenu("&" + RENDER_MENU)


def install_menu(menubar_or_menu: QMenuBar | QMenu, farm_factory: FarmFactory | None = None, *,
                 controller: RunsController | None = None, runs_view: QWidget | None = None,
                 prefill: PrefillSource | None = None) -> QAction:
    """Add Render > Train on Render Farm (and Render > Training Runs...) to a host menu bar or menu.

    Idempotent: a second call returns the existing action and adds nothing.

    Args:
        menubar_or_menu: the host's main ``QMenuBar``, its Render ``QMenu``, or any menu to hold a Render menu.
        farm_factory: farm backend factory (default: :class:`gui.farm_process.ProcessFarm`, OpenCue out of process).
        controller: share this controller (the standalone window); else one is made on first use.
        runs_view: a widget already showing the runs, shown by "Training Runs...".
        prefill: the host's selection as dialog values, asked each time the dialog opens (see the module doc).

    Returns:
        The "Train on Render Farm" action.
    """
    menu = find_render_menu(menubar_or_menu)
    existing = menu.findChild(QAction, ACTION_NAME)
    if existing is not None and existing in menu.actions():
        return existing
    host = menubar_or_menu.window() if isinstance(menubar_or_menu, QWidget) else None
    action = QAction(ACTION_TEXT, menu)
    action.setObjectName(ACTION_NAME)
    handler = TrainOnFarm(farm_factory, controller, host if isinstance(host, QMainWindow) else None, runs_view, action,
                          prefill)
    handler.setObjectName(HANDLER_NAME)
    action.triggered.connect(handler.open_dialog)
    runs = QAction(RUNS_ACTION_TEXT, menu)
    runs.setObjectName(RUNS_ACTION_NAME)
    runs.triggered.connect(handler.show_runs)
    menu.addSeparator()
    menu.addAction(action)
    menu.addAction(runs)
    log.info("installed Render > %s", ACTION_TEXT)
    return action


def handler_of(action: QAction) -> TrainOnFarm:
    """The :class:`TrainOnFarm` behind an action returned by :func:`install_menu`."""
    return action.findChild(TrainOnFarm)


def find_main_window() -> QMainWindow | None:
    """The host application's main window (the first visible top-level ``QMainWindow``)."""
    app = QApplication.instance()
    windows = [w for w in (app.topLevelWidgets() if app else []) if isinstance(w, QMainWindow)]
    visible = [w for w in windows if w.isVisible()]
    return (visible or windows or [None])[0]


def install_in_main_window(farm_factory: FarmFactory | None = None, retries: int = 20, *,
                           prefill: PrefillSource | None = None) -> QAction | None:
    """Install the menu in the host's main window menu bar (Nuke ``menu.py``, Maya ``userSetup.py``).

    When the main window does not exist yet the install is retried from the event loop (every 500 ms,
    ``retries`` times); returns the action when installed now, else ``None``. ``prefill``: see :func:`install_menu`.
    """
    window = find_main_window()
    if window is not None:
        return install_menu(window.menuBar(), farm_factory, prefill=prefill)
    if retries > 0:
        QTimer.singleShot(500, lambda: install_in_main_window(farm_factory, retries - 1, prefill=prefill))
    else:
        log.warning("no host main window found; Render > %s was not installed", ACTION_TEXT)
    return None


def host_handler(parent: QWidget | None = None, farm_factory: FarmFactory | None = None) -> TrainOnFarm:
    """The :class:`TrainOnFarm` under ``parent`` (default: the host main window), made if missing.

    It is found by object name among ``parent``'s descendants, so the menu action's handler is shared and
    repeated calls reuse one controller and dialog without module-level state.
    """
    parent = parent or find_main_window()
    handler = parent.findChild(TrainOnFarm, HANDLER_NAME) if parent is not None else None
    if handler is None:
        handler = TrainOnFarm(farm_factory, host=parent, parent=parent)
        handler.setObjectName(HANDLER_NAME)
    return handler


def open_train_dialog(parent: QWidget | None = None, farm_factory: FarmFactory | None = None) -> SubmitDialog:
    """Open the submit dialog from a host script item (Houdini's main menu XML, shelves)."""
    return host_handler(parent, farm_factory).open_dialog()


def show_training_runs(parent: QWidget | None = None, farm_factory: FarmFactory | None = None) -> QWidget:
    """Show the Runs panel from a host script item (Houdini's main menu XML, shelves)."""
    return host_handler(parent, farm_factory).show_runs()


def _plain(text: str) -> str:
    """Menu text without mnemonics, ellipsis or surrounding space."""
    return text.replace("&", "").replace("...", "").strip()

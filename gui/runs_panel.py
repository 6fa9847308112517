"""The Runs panel (CopyCat's Progress tab): runs table, actions, Live Updates, Graph and Contact Sheet | Preview.

The Task column says what each run learns (``colour``, ``matte``, ``colour+alpha``: :func:`gui.task.task_text`),
the Scale column its upres factor, the Time left column a ``--time-budget`` run's time to its deadline or
``until flat`` for a ``--stop-when-flat`` run (:func:`gui.records.time_left_text`); the Preview tab beside the
Contact Sheet shows the model's latest render of the run's ``--preview`` frames.

A thin view over :class:`gui.controller.RunsController`: it renders :class:`gui.records.Run` records
and forwards clicks; it reads no files and calls no farm itself.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable

from qtpy.QtCore import Qt, Signal
from qtpy.QtWidgets import (QAbstractItemView, QCheckBox, QFileDialog, QHBoxLayout, QHeaderView, QLabel, QMenu,
                            QPushButton, QSplitter, QTableWidget, QTableWidgetItem, QTabWidget, QVBoxLayout, QWidget)

from gui import actions
from gui.contact_sheet import ContactSheetView, PreviewView
from gui.controller import RunsController
from gui.graph import GraphView
from gui.infer_dialog import MODEL_FILES, InferDialog, model_file, model_files
from gui.records import Run, format_duration, format_number, time_left_text
from gui.task import channels_text, record_plan, task_text
from gui.head_start import init_from_record, started_from_text
from gui.upres import record_scale, scale_text

log = logging.getLogger(__name__)

COLUMNS = ("Run", "Job", "State", "Ranks", "Step", "Loss", "Images/s", "ETA", "Time left", "Task", "Scale", "Start",
           "Graph", "Sheet")
GRAPH_COL, SHEET_COL = COLUMNS.index("Graph"), COLUMNS.index("Sheet")
TASK_COL, SCALE_COL, START_COL = COLUMNS.index("Task"), COLUMNS.index("Scale"), COLUMNS.index("Start")
TIME_LEFT_COL = COLUMNS.index("Time left")
_RUN_DIR_ROLE = Qt.ItemDataRole.UserRole
#: The action that applies a finished run's model.pt to a shot (``cuetrain submit-infer``).
INFER_ACTION = "Apply to Shot on Farm..."
#: The action that opens the folder holding the run's model files (:data:`gui.infer_dialog.MODEL_FILES`).
MODEL_FOLDER_ACTION = "Open Model Folder"


def model_files_text(files: dict[str, bool]) -> str:
    """One line naming each host file and whether it exists, e.g. ``Model files: model.pt ✓  model.onnx ✗``."""
    if not files:
        return ""
    return "Model files: " + "  ".join(f"{name} {'✓' if there else '✗ (missing)'}" for name, there in files.items())


def row_texts(run: Run, now: float | None = None) -> list[str]:
    """The text cells of ``run``'s row (every column but the two toggles); Time left as of ``now`` [s since the
    epoch, default this machine's clock]."""
    job = run.handle.job_name or run.handle.job_id if run.handle else "-"
    total = run.total_steps
    step = f"{run.step}/{total}" if total else str(run.step)
    return [run.name, job, run.state, run.ranks_text, step, format_number(run.metrics.last("loss")),
            format_number(run.metrics.last("images_per_s"), 3), format_duration(run.eta_s()),
            time_left_text(run, time.time() if now is None else now), task_text(run.record),
            scale_text(record_scale(run.record)), started_from_text(run.record)]


def start_tooltip(run: Run) -> str:
    """The Start cell's tooltip: every field of ``run.json`` ``init_from`` (path, kind, weights, step, ...),
    else ``config.init_from``'s path ("" for random weights)."""
    started = init_from_record(run.record)
    if started:
        return "\n".join(f"{key}: {value}" for key, value in started.items())
    path = run.record.config.get("init_from") if run.record.config else ""
    return f"path: {path}" if isinstance(path, str) and path else ""


def image_tabs(sheet: ContactSheetView, preview: PreviewView) -> QTabWidget:
    """The Contact Sheet and Preview views as two tabs (the sheet first)."""
    tabs = QTabWidget()
    tabs.addTab(sheet, "Contact Sheet")
    tabs.addTab(preview, "Preview")
    return tabs


class RunsPanel(QWidget):
    """Runs table with per-run toggles and actions, Live Updates, then Graph | Contact Sheet and Preview tabs."""

    #: The artist asked for a new training run (the host opens the submit dialog).
    new_training_requested = Signal()

    def __init__(self, controller: RunsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        self.table = QTableWidget(0, len(COLUMNS))
        self.live_box = QCheckBox("Live Updates")
        self.message = QLabel("")
        self.message.setWordWrap(True)
        self.model_files_label = QLabel("")  # which host files the selected run has (model.pt, model_nuke.nk, ...)
        self.model_files_label.setToolTip("\n".join(f"{name}: {use}" for name, use in MODEL_FILES.items()))
        self.graph = GraphView(controller)
        self.sheet = ContactSheetView(controller)
        self.preview = PreviewView(controller)
        self.images = image_tabs(self.sheet, self.preview)
        self.buttons: dict[str, QPushButton] = {}
        self._filling = False
        self._shown_once = False
        self._has_cuegui = actions.cuegui_command() is not None  # looked up once, not on every poll
        self.clock: Callable[[], float] = time.time  # now [s since the epoch] for Time left (tests fix it)
        self._setup_table()
        self._build_layout()
        self._connect()
        for run in controller.runs():
            self._on_run_added(run.run_dir)
        self._update_buttons()

    # --------------------------------------------------------------- layout
    def _setup_table(self) -> None:
        t = self.table
        t.setHorizontalHeaderLabels(list(COLUMNS))
        t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        t.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        t.verticalHeader().setVisible(False)
        t.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        t.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        t.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)

    def _build_layout(self) -> None:
        bar = QHBoxLayout()
        for name, slot in (("New Training...", self.new_training_requested.emit), ("Add Run Folder...", self._add_folder),
                           ("Remove", self._remove), ("Open Folder", self._open_folder), ("Cancel Job", self._cancel),
                           ("Retry/Resume", self._retry), (INFER_ACTION, self._apply_to_shot),
                           (MODEL_FOLDER_ACTION, self._open_model_folder), ("Open in CueGUI", self._open_cuegui),
                           ("Refresh", self.controller.poll_async)):
            button = self.buttons[name] = QPushButton(name)
            button.clicked.connect(lambda _=False, s=slot: s())
            bar.addWidget(button)
        bar.addStretch(1)
        bar.addWidget(self.live_box)
        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addWidget(QLabel("Runs"))
        top_layout.addWidget(self.table, 1)
        top_layout.addLayout(bar)
        top_layout.addWidget(self.model_files_label)
        top_layout.addWidget(self.message)
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self.graph)
        bottom.addWidget(self.images)
        bottom.setSizes([600, 400])
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(bottom)
        split.setSizes([250, 450])
        layout = QVBoxLayout(self)
        layout.addWidget(split)

    def _connect(self) -> None:
        c = self.controller
        c.run_added.connect(self._on_run_added)
        c.run_removed.connect(self._on_run_removed)
        c.run_updated.connect(self._fill_row)
        c.poll_finished.connect(self.refresh_time_left)  # a deadline draws nearer between changes too
        c.action_finished.connect(lambda _run, msg: self.show_message(msg))
        c.action_failed.connect(lambda _run, msg: self.show_message(msg, error=True))
        c.live_updates_changed.connect(self._on_live_changed)
        self.live_box.setChecked(c.live_updates)
        self.live_box.toggled.connect(c.set_live_updates)
        self.table.itemChanged.connect(self._on_item_changed)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.customContextMenuRequested.connect(self._context_menu)

    # ----------------------------------------------------------------- rows
    def row_of(self, run_dir: str) -> int:
        """Table row of ``run_dir`` (-1 when absent)."""
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).data(_RUN_DIR_ROLE) == run_dir:
                return row
        return -1

    def selected_run(self) -> str:
        """Run directory of the selected row ("" when none)."""
        rows = self.table.selectionModel().selectedRows()
        return self.table.item(rows[0].row(), 0).data(_RUN_DIR_ROLE) if rows else ""

    def select_run(self, run_dir: str) -> None:
        """Select ``run_dir``'s row."""
        self.table.selectRow(self.row_of(run_dir))

    def _on_run_added(self, run_dir: str) -> None:
        if self.row_of(run_dir) >= 0:
            return
        self._filling = True
        row = self.table.rowCount()
        self.table.insertRow(row)
        for col in range(len(COLUMNS)):
            item = QTableWidgetItem()
            item.setData(_RUN_DIR_ROLE, run_dir)
            if col in (GRAPH_COL, SHEET_COL):
                item.setFlags(Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
            self.table.setItem(row, col, item)
        self._filling = False
        self._fill_row(run_dir)
        if self.table.rowCount() == 1:
            self.table.selectRow(0)

    def _on_run_removed(self, run_dir: str) -> None:
        row = self.row_of(run_dir)
        if row >= 0:
            self.table.removeRow(row)
        self._update_buttons()

    def _fill_row(self, run_dir: str) -> None:
        run, row = self.controller.run(run_dir), self.row_of(run_dir)
        if run is None or row < 0:
            return
        self._filling = True
        for col, text in enumerate(row_texts(run, self.clock())):
            self.table.item(row, col).setText(text)
        self.table.item(row, 0).setToolTip(run.run_dir)
        self.table.item(row, 2).setToolTip(run.farm_error or run.read_error or (run.status.native_state if run.status else ""))
        self.table.item(row, START_COL).setToolTip(start_tooltip(run))
        self.table.item(row, TASK_COL).setToolTip(channels_text(record_plan(run.record)))
        checked, unchecked = Qt.CheckState.Checked, Qt.CheckState.Unchecked
        self.table.item(row, GRAPH_COL).setCheckState(checked if run.show_graph else unchecked)
        self.table.item(row, SHEET_COL).setCheckState(checked if run.show_sheet else unchecked)
        self._filling = False
        if run_dir == self.selected_run():
            self._update_buttons()

    def refresh_time_left(self) -> None:
        """Rewrite every row's Time left as of :attr:`clock` (after each poll, whether or not its run changed)."""
        now = self.clock()
        for row in range(self.table.rowCount()):
            run = self.controller.run(self.table.item(row, 0).data(_RUN_DIR_ROLE))
            if run is not None:
                self.table.item(row, TIME_LEFT_COL).setText(time_left_text(run, now))

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        if self._filling or item.column() not in (GRAPH_COL, SHEET_COL):
            return
        on = item.checkState() == Qt.CheckState.Checked
        setter = self.controller.set_show_graph if item.column() == GRAPH_COL else self.controller.set_show_sheet
        setter(item.data(_RUN_DIR_ROLE), on)

    # -------------------------------------------------------------- actions
    def show_message(self, text: str, error: bool = False) -> None:
        """Show an action result under the table (errors in red)."""
        self.message.setStyleSheet("color: #e05050;" if error else "")
        self.message.setText(text)

    def _update_buttons(self) -> None:
        run = self.controller.run(self.selected_run()) if self.selected_run() else None
        for name in ("Remove", "Open Folder", "Retry/Resume"):
            self.buttons[name].setEnabled(run is not None)
        self.buttons["Cancel Job"].setEnabled(run is not None and run.handle is not None and not run.is_finished)
        self.buttons["Open in CueGUI"].setEnabled(self._has_cuegui)
        has_model = run is not None and bool(model_file(run.run_dir))
        self.buttons[INFER_ACTION].setEnabled(has_model)
        self.buttons[INFER_ACTION].setToolTip("" if has_model else "the selected run has no model.pt yet")
        self.buttons[MODEL_FOLDER_ACTION].setEnabled(has_model)
        self.buttons[MODEL_FOLDER_ACTION].setToolTip("" if has_model else "the selected run has no model.pt yet")
        self.model_files_label.setText(model_files_text(model_files(run.run_dir)) if run is not None else "")

    def _add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a cuetrain run directory")
        if folder:
            self.controller.add_run(folder)
            self.controller.poll_async()

    def _remove(self) -> None:
        if self.selected_run():
            self.controller.remove_run(self.selected_run())

    def _open_folder(self) -> None:
        run_dir = self.selected_run()
        if run_dir and not actions.open_folder(run_dir):
            self.show_message(f"cannot open {run_dir} (does it exist yet?)", error=True)

    def _open_model_folder(self) -> None:
        """Open the folder that holds the selected run's model files (the run directory) in the file browser."""
        run_dir = self.selected_run()
        model = model_file(run_dir) if run_dir else ""
        if model and not actions.open_folder(os.path.dirname(model)):
            self.show_message(f"cannot open {os.path.dirname(model)}", error=True)

    def _cancel(self) -> None:
        if self.selected_run():
            self.show_message("cancelling...")
            log.info("cancel requested for %s", self.selected_run())
            self.controller.cancel(self.selected_run())

    def _retry(self) -> None:
        if self.selected_run():
            self.show_message("retrying...")
            log.info("retry/resume requested for %s", self.selected_run())
            self.controller.retry(self.selected_run())

    def _apply_to_shot(self) -> None:
        """Ask for the shot's input and output folders, then submit an inference job for the run's model.pt."""
        run_dir = self.selected_run()
        if not run_dir or not model_file(run_dir):
            return
        dialog = self.make_infer_dialog(run_dir)
        if dialog.exec() != InferDialog.DialogCode.Accepted:
            return
        input_dir, output_dir, template, chunk = dialog.values()
        self.show_message("submitting inference...")
        self.controller.submit_infer(run_dir, input_dir, output_dir, template, chunk)

    def make_infer_dialog(self, run_dir: str) -> InferDialog:
        """The dialog :meth:`_apply_to_shot` shows (tests replace it)."""
        return InferDialog(run_dir, self)

    def _open_cuegui(self) -> None:
        error = actions.launch_cuegui()
        self.show_message(error or "CueGUI started", error=bool(error))

    def _on_live_changed(self, on: bool) -> None:
        self.live_box.blockSignals(True)
        self.live_box.setChecked(on)
        self.live_box.blockSignals(False)

    def _context_menu(self, pos) -> None:
        row = self.table.rowAt(pos.y())
        if row < 0:
            return
        self.table.selectRow(row)
        menu = QMenu(self)
        for name in ("Open Folder", "Cancel Job", "Retry/Resume", INFER_ACTION, MODEL_FOLDER_ACTION, "Open in CueGUI",
                     "Remove"):
            action = menu.addAction(name)
            action.setEnabled(self.buttons[name].isEnabled())
            action.triggered.connect(self.buttons[name].click)
        menu.exec(self.table.viewport().mapToGlobal(pos))

    def showEvent(self, event) -> None:  # noqa: N802 - Qt API
        """Load the runs once when first shown (one poll, like Refresh); Live Updates stays as it is."""
        super().showEvent(event)
        if not self._shown_once:
            self._shown_once = True
            self.controller.poll_async()

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt API
        """A closed panel (tool window in a host) stops Live Updates: nobody is watching."""
        self.controller.set_live_updates(False)
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Wait for background image loads (the controller has its own shutdown)."""
        self.sheet.shutdown()
        self.preview.shutdown()

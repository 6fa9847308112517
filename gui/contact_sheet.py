"""The Contact Sheet and Preview areas: pick a run, then its latest or any earlier image.

Sheets are ``RUN_DIR/contact_sheets/step_NNNNNN.png`` (:class:`ContactSheetView`); previews, the model's renders
of the run's ``--preview`` frames, are ``RUN_DIR/previews/step_NNNNNN.png`` (:class:`PreviewView`, the same view
over :attr:`gui.records.Run.previews`). The PNG is decoded into a ``QImage`` on a worker thread (the file may
sit on slow network storage) and turned into a ``QPixmap`` on the GUI thread. With "Latest" chosen the view
follows new images as polls find them. Both list the runs with "show contact sheet" ticked.
"""

from __future__ import annotations

import logging
import os

from qtpy.QtCore import QCoreApplication, QObject, QThreadPool, Qt, Signal
from qtpy.QtGui import QImage, QPixmap
from qtpy.QtWidgets import QComboBox, QHBoxLayout, QLabel, QScrollArea, QVBoxLayout, QWidget

from gui.controller import RunsController
from gui.records import Run
from gui.workers import Task

log = logging.getLogger(__name__)

LATEST = "Latest"


class _Loaded(QObject):
    """Carries a decoded image from the worker to the GUI thread."""

    loaded = Signal(str, QImage)


class ContactSheetView(QWidget):
    """Run dropdown, sheet dropdown (Latest + every step) and the sheet scaled to fit."""

    #: The area's title, and the text shown while the chosen run has no image.
    TITLE, EMPTY_TEXT = "Contact Sheet", "No contact sheet yet"

    def __init__(self, controller: RunsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self._pixmap: QPixmap | None = None
        self._wanted = ""  # path the view should show; older loads that arrive late are dropped
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(1)
        self._carrier = _Loaded(self)
        self._carrier.loaded.connect(self._on_loaded, Qt.ConnectionType.QueuedConnection)
        self.run_box = QComboBox()
        self.sheet_box = QComboBox()
        self.image = QLabel(self.EMPTY_TEXT)
        self.image.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.caption = QLabel("")
        self._build_layout()
        self.run_box.currentIndexChanged.connect(self._on_run_chosen)
        self.sheet_box.currentIndexChanged.connect(self._on_sheet_chosen)
        for sig in (controller.run_added, controller.run_removed, controller.run_updated):
            sig.connect(self._sync_runs)
        self._updated_signal(controller).connect(self._on_sheets_updated)
        self._sync_runs()

    def _images(self, run: Run | None) -> list[tuple[int, str]]:
        """The ``(step, path)`` images this view offers for ``run``, sorted by step."""
        return run.sheets if run else []

    def _updated_signal(self, controller: RunsController):
        """The controller's signal that a run has new images of this view's kind."""
        return controller.contact_sheets_updated

    def _build_layout(self) -> None:
        top = QHBoxLayout()
        top.addWidget(QLabel(self.TITLE))
        top.addWidget(self.run_box, 1)
        top.addWidget(self.sheet_box)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.image)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(scroll, 1)
        layout.addWidget(self.caption)

    # ------------------------------------------------------------ choosing
    def current_run(self) -> str:
        """Run directory chosen in the run dropdown ("" when none)."""
        return self.run_box.currentData() or ""

    def current_path(self) -> str:
        """Path of the sheet the view shows or is loading ("" when none)."""
        return self._wanted

    def choose(self, run_dir: str, step: int | None = None) -> None:
        """Show ``run_dir``'s sheet at ``step`` (``None``: the latest)."""
        self.run_box.setCurrentIndex(max(0, self.run_box.findData(run_dir)))
        index = 0 if step is None else self.sheet_box.findData(step)
        self.sheet_box.setCurrentIndex(max(0, index))
        self._on_sheet_chosen()

    def _sync_runs(self, *_: object) -> None:
        """Keep the run dropdown equal to the runs with "show contact sheet" ticked."""
        wanted = [(r.name, r.run_dir) for r in self._controller.runs() if r.show_sheet]
        have = [(self.run_box.itemText(i), self.run_box.itemData(i)) for i in range(self.run_box.count())]
        if wanted == have:
            return
        current = self.current_run()
        self.run_box.blockSignals(True)
        self.run_box.clear()
        for name, run_dir in wanted:
            self.run_box.addItem(name, run_dir)
        self.run_box.setCurrentIndex(max(0, self.run_box.findData(current)))
        self.run_box.blockSignals(False)
        self._on_run_chosen()

    def _on_run_chosen(self, *_: object) -> None:
        self._fill_sheets()
        self._on_sheet_chosen()

    def _fill_sheets(self) -> None:
        """Sheet dropdown: "Latest" then every step, newest first; keeps the chosen step."""
        run = self._controller.run(self.current_run()) if self.current_run() else None
        chosen = self.sheet_box.currentData()
        self.sheet_box.blockSignals(True)
        self.sheet_box.clear()
        self.sheet_box.addItem(LATEST, None)
        for step, _ in reversed(self._images(run)):
            self.sheet_box.addItem(f"step {step}", step)
        self.sheet_box.setCurrentIndex(max(0, self.sheet_box.findData(chosen)) if chosen is not None else 0)
        self.sheet_box.blockSignals(False)

    def _on_sheets_updated(self, run_dir: str) -> None:
        if run_dir == self.current_run():
            self._fill_sheets()
            self._on_sheet_chosen()

    def _on_sheet_chosen(self, *_: object) -> None:
        run = self._controller.run(self.current_run()) if self.current_run() else None
        sheets = dict(self._images(run))
        step = self.sheet_box.currentData()
        if step is None and sheets:
            step = max(sheets)
        path = sheets.get(step, "")
        if path != self._wanted:
            self._wanted = path
            self._load(path)
        self.caption.setText(f"{run.name}  step {step}  {path}" if path else "")

    # ------------------------------------------------------------- loading
    def _load(self, path: str) -> None:
        if not path:
            self._pixmap = None
            self.image.setPixmap(QPixmap())
            self.image.setText(self.EMPTY_TEXT)
            return
        carrier = self._carrier
        self._pool.start(Task(lambda: carrier.loaded.emit(path, QImage(path))))

    def wait_for_image(self, timeout_ms: int = 5000) -> None:
        """Block until pending loads are decoded, then apply them (screenshots, tests)."""
        self._pool.waitForDone(timeout_ms)
        QCoreApplication.processEvents()

    def _on_loaded(self, path: str, image: QImage) -> None:
        if path != self._wanted:
            return
        if image.isNull():
            log.warning("cannot read %s %s", self.TITLE.lower(), path)
            self._pixmap = None
            self.image.setText(f"Cannot read {os.path.basename(path)}")
            return
        self._pixmap = QPixmap.fromImage(image)
        self._fit()

    def _fit(self) -> None:
        """Scale the sheet to the visible area: smooth when shrinking, crisp pixels when enlarging."""
        if self._pixmap is None:
            return
        area = self.image.parentWidget().size() if self.image.parentWidget() else self.image.size()
        pix = self._pixmap
        scaled = pix.size().scaled(area, Qt.AspectRatioMode.KeepAspectRatio)
        mode = (Qt.TransformationMode.SmoothTransformation if scaled.width() < pix.width()
                else Qt.TransformationMode.FastTransformation)
        self.image.setPixmap(pix.scaled(scaled, Qt.AspectRatioMode.KeepAspectRatio, mode))

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt API
        super().resizeEvent(event)
        self._fit()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt API: a tab shown again fits its area
        super().showEvent(event)
        self._fit()

    def shutdown(self, timeout_ms: int = 5000) -> None:
        """Wait for pending image loads (before the widget is destroyed)."""
        self._pool.waitForDone(timeout_ms)


class PreviewView(ContactSheetView):
    """The model's renders of a run's ``--preview`` frames (``previews/step_NNNNNN.png``), latest or any step."""

    TITLE, EMPTY_TEXT = "Preview", "No preview yet (the run renders its --preview frames at each contact sheet)"

    def _images(self, run: Run | None) -> list[tuple[int, str]]:
        return run.previews if run else []

    def _updated_signal(self, controller: RunsController):
        return controller.previews_updated

"""The submit dialog's "Start from" field: Random weights, an earlier run, or a browsed checkpoint / model.pt.

The earlier runs are the Runs panel's (the controller's runs) that finished with a ``model.pt``, newest
first (:func:`gui.head_start.start_candidates`). Runs of another upscale factor or model size are listed
too; choosing one shows a warning under the field and the dialog refuses to submit it
(:func:`gui.head_start.start_mismatch`), since the trainer could not load its weights.
"""

from __future__ import annotations

import os

from qtpy.QtCore import Qt, Signal
from qtpy.QtWidgets import QComboBox, QFileDialog, QHBoxLayout, QPushButton, QWidget

from gui.controller import RunsController
from gui.head_start import StartCandidate, candidate_for_path, start_candidates

RANDOM_TEXT = "Random weights"


class StartFromField(QWidget):
    """A dropdown of head starts with a "Browse..." button for a checkpoint or ``model.pt``.

    Each item's data is the ``--init-from`` path ("" for Random weights). :meth:`refresh` relists the runs and
    keeps the current choice; files picked with Browse stay listed.

    Args:
        controller: whose runs are listed.
        parent: Qt parent.
    """

    #: The choice changed (its ``--init-from`` path, "" for random weights).
    changed = Signal(str)

    def __init__(self, controller: RunsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self._candidates: dict[str, StartCandidate] = {}  # path -> what is known of it
        self._browsed: list[str] = []
        self.box = QComboBox()
        self.box.setToolTip("Start training from an earlier model's weights (the optimizer and schedule start "
                            "fresh), or from random weights")
        self.browse_button = QPushButton("Browse...")
        self.browse_button.setToolTip("a checkpoint (.pt in a run's checkpoints/) or a model.pt")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.box, 1)
        lay.addWidget(self.browse_button)
        self.browse_button.clicked.connect(lambda _=False: self._browse())
        self.box.currentIndexChanged.connect(lambda _i: self.changed.emit(self.path()))
        self.refresh()

    def path(self) -> str:
        """The chosen ``--init-from`` path ("" for random weights)."""
        return str(self.box.currentData() or "")

    def candidate(self) -> StartCandidate | None:
        """What is known of the chosen model (None for random weights)."""
        return self._candidates.get(self.path())

    def paths(self) -> list[str]:
        """Every listed path in order, "" (random weights) first."""
        return [str(self.box.itemData(i) or "") for i in range(self.box.count())]

    def refresh(self) -> None:
        """Relist Random weights, the controller's finished runs with a ``model.pt`` and the browsed files."""
        current = self.path()
        runs = start_candidates((run.run_dir, run.record) for run in self._controller.runs())
        browsed = [candidate_for_path(p) for p in self._browsed]
        self._candidates = {c.path: c for c in [*runs, *browsed]}
        self.box.blockSignals(True)
        self.box.clear()
        self.box.addItem(RANDOM_TEXT, "")
        for c in [*runs, *browsed]:
            self.box.addItem(c.label, c.path)
            self.box.setItemData(self.box.count() - 1, c.path, Qt.ItemDataRole.ToolTipRole)
        self.box.setCurrentIndex(max(0, self.box.findData(current)))
        self.box.blockSignals(False)
        if self.path() != current:
            self.changed.emit(self.path())

    def set_path(self, path: str) -> None:
        """Choose ``path`` ("" = random weights); a path not listed yet (a browsed file) is added."""
        if path:
            path = os.path.abspath(os.path.expanduser(path))
            if self.box.findData(path) < 0:
                self._browsed.append(path)
                self.refresh()
        self.box.setCurrentIndex(max(0, self.box.findData(path)))

    def _browse(self) -> None:
        start = os.path.dirname(self.path()) if self.path() else ""
        path, _filter = QFileDialog.getOpenFileName(self, "Start from a checkpoint or model.pt", start,
                                                    "PyTorch models (*.pt);;All files (*)")
        if path:
            self.set_path(path)

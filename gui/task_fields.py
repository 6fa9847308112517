"""The submit dialog's issue-40 fields: "Learn" (the task's channels), "Augmentation" and "Preview frames".

- :func:`learn_box`: a dropdown of :data:`gui.task.TASK_TEXTS`; each item's data is the task name, whose
  ``--input-channels`` / ``--target-channels`` come from :func:`gui.task.task_channels` (Colour sends neither).
- :func:`augment_spin`: ``--augment``, the probability per crop of a random rotation, scale and flip [0..1].
- :class:`PreviewField`: ``--preview``, a frame or a folder of a few frames, with Browse for either and an inline
  warning while the path does not exist (:func:`gui.task.preview_problems`; the dialog also refuses to submit).
"""

from __future__ import annotations

import os

from qtpy.QtCore import Signal
from qtpy.QtWidgets import QComboBox, QDoubleSpinBox, QFileDialog, QHBoxLayout, QLineEdit, QMenu, QPushButton, QWidget

from gui.task import TASK_TEXTS, preview_problems

#: Frames the preview Browse offers (the formats the trainer reads).
FRAME_FILTER = "Frames (*.exr *.png *.tif *.tiff *.jpg *.jpeg *.dpx);;All files (*)"


def learn_box() -> QComboBox:
    """The "Learn" dropdown: Colour (RGB), Matte (alpha), Colour + alpha; item data = the task name."""
    box = QComboBox()
    for task, text in TASK_TEXTS.items():
        box.addItem(text, task)
    box.setToolTip("What the network learns to make: corrected colour (RGB in, RGB out), a matte (RGB in, alpha "
                   "out: roto) or both (RGB in, RGBA out)")
    return box


def set_task(box: QComboBox, task: str) -> None:
    """Choose ``task`` in a :func:`learn_box` (an unknown or empty task leaves the choice as it is)."""
    index = box.findData(task)
    if index >= 0:
        box.setCurrentIndex(index)


def augment_spin(value: float = 0.0) -> QDoubleSpinBox:
    """The "Augmentation" probability per crop [0..1], in steps of 0.05; 0 shows "off"."""
    spin = QDoubleSpinBox()
    spin.setRange(0.0, 1.0)
    spin.setDecimals(2)
    spin.setSingleStep(0.05)
    spin.setValue(value)
    spin.setSpecialValueText("off")
    spin.setToolTip("probability per crop of a random rotation, scale and flip of both Input and Ground Truth "
                    "(and a random grade of a matte task's Input); 0 = off")
    return spin


class PreviewField(QWidget):
    """A path field for ``--preview`` with a "Browse..." button offering a frame or a folder.

    Args:
        parent: Qt parent (file dialogs open over it).
    """

    #: The path changed (its text, stripped).
    changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("optional: a frame or a folder of frames outside the data set")
        self.edit.setToolTip("rendered by the model at every contact sheet, shown in the Runs panel's Preview")
        self.browse_button = QPushButton("Browse...")
        menu = QMenu(self.browse_button)
        menu.addAction("A frame...").triggered.connect(lambda _=False: self._browse_frame())
        menu.addAction("A folder...").triggered.connect(lambda _=False: self._browse_folder())
        self.browse_button.setMenu(menu)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.edit, 1)
        lay.addWidget(self.browse_button)
        self.edit.textChanged.connect(lambda text: self.changed.emit(text.strip()))

    def path(self) -> str:
        """The path as typed, stripped ("" = no preview)."""
        return self.edit.text().strip()

    def set_path(self, path: str) -> None:
        """Show ``path`` in the field."""
        self.edit.setText(path)

    def problems(self) -> list[str]:
        """Why the path cannot be used ([] when empty or it exists)."""
        return preview_problems(self.path())

    def _start(self) -> str:
        return os.path.dirname(self.path()) if self.path() and not os.path.isdir(self.path()) else self.path()

    def _browse_frame(self) -> None:
        path, _filter = QFileDialog.getOpenFileName(self, "Preview frame", self._start(), FRAME_FILTER)
        if path:
            self.set_path(path)

    def _browse_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Folder of preview frames", self._start())
        if folder:
            self.set_path(folder)

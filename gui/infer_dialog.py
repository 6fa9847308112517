"""The Runs panel's "Apply to Shot on Farm..." dialog: input folder, output folder, farm template, chunk.

Kept minimal: it only collects the four values; :meth:`gui.controller.RunsController.submit_infer` runs
``cuetrain submit-infer`` out of process (:class:`gui.farm_process.ProcessFarm`).
"""

from __future__ import annotations

import os

from qtpy.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLineEdit, QSpinBox, QWidget

from cue_plugin.submit.spec import DEFAULT_CHUNK
from cue_plugin.submit.templates import list_templates
from gui.submit_sections import folder_row


def model_file(run_dir: str) -> str:
    """``RUN_DIR/model.pt`` when it exists (the run finished and exported), else ""."""
    path = os.path.join(run_dir, "model.pt")
    return path if os.path.isfile(path) else ""


#: The files a finished run leaves for the artist's hosts: file name -> what it is for (written by
#: ``trainer.export.formats`` on rank 0, in the run directory).
MODEL_FILES: dict[str, str] = {
    "model.pt": "Nuke CatFileCreator (TorchScript)",
    "model_nuke.nk": "ready Nuke script: CatFileCreator -> Inference",
    "model.onnx": "Houdini ONNX Inference",
    "model.json": "model description (sizes, min_libtorch, onnx_opset)",
}

#: The most input frames one farm frame may process in the dialog [frames].
MAX_CHUNK = 100000


def model_files(run_dir: str) -> dict[str, bool]:
    """``{file name: exists}`` for every :data:`MODEL_FILES` entry in ``run_dir``; a missing folder gives all False."""
    return {name: os.path.isfile(os.path.join(run_dir, name)) for name in MODEL_FILES}


class InferDialog(QDialog):
    """Asks where the shot's frames are, where the results go, which farm template to use, and how many input
    frames each farm frame processes (the chunk, 1..:data:`MAX_CHUNK` frames; default ``DEFAULT_CHUNK``)."""

    def __init__(self, run_dir: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Apply {os.path.basename(run_dir.rstrip('/'))} to a shot on the farm")
        self.input_edit, self.output_edit = QLineEdit(), QLineEdit()
        self.template_box = QComboBox()
        self.template_box.addItem("(defaults)", "")
        for name in list_templates():
            self.template_box.addItem(name, name)
        form = QFormLayout(self)
        form.addRow("Shot frames (input folder)", folder_row(self, self.input_edit))
        form.addRow("Write results to", folder_row(self, self.output_edit))
        form.addRow("Farm template", self.template_box)
        self.chunk_box = QSpinBox()
        self.chunk_box.setRange(1, MAX_CHUNK)
        self.chunk_box.setValue(DEFAULT_CHUNK)
        self.chunk_box.setSuffix(" frames")
        self.chunk_box.setToolTip("input frames each farm frame processes (the layer's chunk size)")
        form.addRow("Frames per farm frame (chunk)", self.chunk_box)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        form.addRow(self.buttons)
        self.input_edit.textChanged.connect(self._update_ok)
        self.output_edit.textChanged.connect(self._update_ok)
        self._update_ok()

    def values(self) -> tuple[str, str, str, int]:
        """``(input_dir, output_dir, template, chunk)``; template "" means the built-in defaults; chunk in frames."""
        return (self.input_edit.text().strip(), self.output_edit.text().strip(),
                str(self.template_box.currentData() or ""), int(self.chunk_box.value()))

    def _update_ok(self) -> None:
        inp, out = self.values()[:2]
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(bool(inp and out))

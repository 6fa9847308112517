"""The Runs panel's "Apply to Shot on Farm..." dialog: input folder, output folder, farm template.

Kept minimal: it only collects the three values; :meth:`gui.controller.RunsController.submit_infer` runs
``cuetrain submit-infer`` out of process (:class:`gui.farm_process.ProcessFarm`).
"""

from __future__ import annotations

import os

from qtpy.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QFormLayout, QLineEdit, QWidget

from cue_plugin.templates import list_templates
from gui.submit_dialog import folder_row


def model_file(run_dir: str) -> str:
    """``RUN_DIR/model.pt`` when it exists (the run finished and exported), else ""."""
    path = os.path.join(run_dir, "model.pt")
    return path if os.path.isfile(path) else ""


class InferDialog(QDialog):
    """Asks where the shot's frames are and where the results go, and which farm template to use."""

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
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        form.addRow(self.buttons)
        self.input_edit.textChanged.connect(self._update_ok)
        self.output_edit.textChanged.connect(self._update_ok)
        self._update_ok()

    def values(self) -> tuple[str, str, str]:
        """``(input_dir, output_dir, template)``; template "" means the built-in defaults."""
        return self.input_edit.text().strip(), self.output_edit.text().strip(), str(self.template_box.currentData() or "")

    def _update_ok(self) -> None:
        inp, out, _ = self.values()
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(bool(inp and out))

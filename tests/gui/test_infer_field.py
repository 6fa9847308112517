"""The submit dialog's optional inference layer: two folders, or an inline error."""

from __future__ import annotations

from gui.submit_dialog import SubmitDialog
from tests.conftest import make_pairs
from tests.gui.test_widgets import _fill


def test_dialog_adds_the_infer_layer(qtbot, controller, farm, tmp_path):
    dialog = SubmitDialog(controller, template_folders=[])
    qtbot.addWidget(dialog)
    _fill(dialog, tmp_path)
    plates, _ = make_pairs(tmp_path / "plates", frames=3)
    dialog.infer_input_edit.setText(str(plates))
    assert not dialog.try_submit()
    assert "--infer-input and --infer-output go together" in dialog.errors.text()
    dialog.infer_output_edit.setText(str(tmp_path / "out"))
    job = dialog.build_job()
    assert job.infer is not None and job.infer.frames == (1001, 1002, 1003)
    assert job.infer.model == str(tmp_path / "run" / "model.pt") and job.infer.output_dir == str(tmp_path / "out")
    dialog.infer_input_edit.clear()
    dialog.infer_output_edit.clear()
    assert dialog.build_job().infer is None

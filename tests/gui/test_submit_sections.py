"""The submit dialog in sections (issue 49): Shot, What to learn, How long, Farm, Advanced (folded), each field in
its section, and the host prefill (:mod:`gui.prefill`) filling the Shot and What-to-learn fields from a fake Nuke
session's selected Read nodes."""

from __future__ import annotations

import logging
import types

import pytest
from qtpy.QtCore import QPoint, Qt
from qtpy.QtWidgets import QGroupBox, QMainWindow, QStyle, QStyleOptionGroupBox

from cue_plugin.submit.builder import frame_argv
from gui import menu
from gui.menu import handler_of, install_menu
from gui.prefill import ReadInfo, nuke_prefill, nuke_reads
from gui.submit_dialog import SubmitDialog
from tests.gui.conftest import fill_dialog

TITLES = ["Shot", "What to learn", "How long", "Farm", "Advanced"]
#: The dialog's attribute for each section, and the fields (dialog attributes) that must sit in it.
FIELDS = {
    "shot_section": ["show_edit", "shot_edit", "input_edit", "target_edit", "run_dir_edit", "resume_box",
                     "start_field", "start_note"],
    "learn_section": ["learn_box", "scale_box", "scale_note", "augment_spin", "preview_field", "preview_note"],
    "length_section": ["train_for", "steps_spin"],
    "farm_section": ["template_box", "world_spin", "frame_spin", "infer_input_edit", "infer_output_edit", "advisor"],
    "advanced_section": ["model_box", "crop_spin", "batch_spin", "sync_spin"],
}
RGBA = ("rgba.red", "rgba.green", "rgba.blue", "rgba.alpha")


@pytest.fixture
def dialog(qtbot, controller):
    widget = SubmitDialog(controller, template_folders=[])
    qtbot.addWidget(widget)
    yield widget
    widget.advisor.shutdown()


def _laid_out_sections(dialog: SubmitDialog) -> list[QGroupBox]:
    """The group boxes in the dialog's own layout, top to bottom."""
    lay = dialog.layout()
    items = [lay.itemAt(i).widget() for i in range(lay.count())]
    return [w for w in items if isinstance(w, QGroupBox)]


def _click_title_checkbox(qtbot, box: QGroupBox) -> None:
    """Click the checkbox in a checkable group box's title, as a user does."""
    option = QStyleOptionGroupBox()
    box.initStyleOption(option)
    rect = box.style().subControlRect(QStyle.ComplexControl.CC_GroupBox, option,
                                      QStyle.SubControl.SC_GroupBoxCheckBox, box)
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton, pos=rect.center() if rect.isValid() else QPoint(8, 8))


def test_the_dialog_has_five_sections_in_order(dialog):
    sections = _laid_out_sections(dialog)
    assert [s.title() for s in sections] == TITLES
    assert sections == dialog.sections()
    assert [s.objectName() for s in sections] == list(FIELDS)


@pytest.mark.parametrize("section", list(FIELDS))
def test_each_field_sits_in_its_section_and_in_no_other(dialog, section):
    box = getattr(dialog, section)
    for name in FIELDS[section]:
        field = getattr(dialog, name)
        holders = [s.objectName() for s in dialog.sections() if s.isAncestorOf(field)]
        assert holders == [section], (name, holders)


def test_form_labels_line_up_across_sections(dialog):
    """One label column: every field starts at the same x in the dialog, whichever section holds it."""
    dialog.advanced_section.set_expanded(True)
    dialog.show()
    xs = {name: getattr(dialog, name).mapTo(dialog, QPoint(0, 0)).x()
          for name in ("input_edit", "learn_box", "train_for", "template_box", "model_box")}
    assert len(set(xs.values())) == 1, xs


def test_advanced_starts_folded_and_unfolds(qtbot, dialog):
    dialog.show()
    advanced = dialog.advanced_section
    assert advanced.isCheckable() and not advanced.is_expanded()
    assert not dialog.batch_spin.isVisible() and not dialog.model_box.isVisible()
    assert advanced.summary.isVisible()
    assert advanced.summary.text() == "small model, 64 px crops, batch 8 crops, sync every 1 step"
    folded_height = dialog.height()
    _click_title_checkbox(qtbot, advanced)
    assert advanced.is_expanded()
    assert dialog.batch_spin.isVisible() and dialog.model_box.isVisible() and dialog.sync_spin.isEnabled()
    assert not advanced.summary.isVisible()
    assert dialog.height() > folded_height  # the dialog grew to show the form
    _click_title_checkbox(qtbot, advanced)
    assert not advanced.is_expanded() and not dialog.batch_spin.isVisible()


def test_folded_advanced_values_still_go_into_the_job_and_the_summary(dialog, tmp_path):
    fill_dialog(dialog, tmp_path)
    dialog.batch_spin.setValue(12)
    dialog.crop_spin.setValue(96)
    dialog.use_recommendation(4, 5)  # the advisor sets the (folded) sync interval
    assert not dialog.advanced_section.is_expanded()
    assert dialog.advanced_section.summary.text() == "small model, 96 px crops, batch 12 crops, sync every 5 steps"
    argv = frame_argv(dialog.build_job())
    assert argv[argv.index("--batch-size") + 1] == "12" and argv[argv.index("--crop-size") + 1] == "96"
    assert dialog.build_job().sync_interval == 5


def test_empty_notes_take_no_room_and_show_with_text(dialog):
    dialog.show()
    assert not dialog.scale_note.isVisible() and not dialog.start_note.isVisible()
    dialog.scale_note.setText("From the Reads")
    assert dialog.scale_note.isVisible()
    dialog.scale_note.setText("")
    assert not dialog.scale_note.isVisible()


# ------------------------------------------------------------------------- a fake Nuke session
class _Read:
    """A stub Nuke Read node: name, file, format and channels; its alpha is a function of the pixel."""

    def __init__(self, name: str, file: str, width: int, height: int, channels=RGBA[:3], alpha=None) -> None:
        self._name, self.file, self._size, self._channels, self.alpha = name, file, (width, height), channels, alpha

    def name(self) -> str:
        return self._name

    def format(self):
        w, h = self._size
        return types.SimpleNamespace(width=lambda: w, height=lambda: h)

    def channels(self):
        return list(self._channels)


def _fake_nuke(selected_last_first: list[_Read]) -> types.SimpleNamespace:
    """A stand-in ``nuke`` module: ``selectedNodes`` lists the last selected first, as Nuke does."""
    return types.SimpleNamespace(selectedNodes=lambda cls="": list(selected_last_first),
                                 filename=lambda node: node.file,
                                 sample=lambda node, channel, x, y: node.alpha(x, y))


def test_nuke_reads_come_in_selection_order_with_their_alpha_samples():
    roto = _Read("ReadGT", "/p/gt/gt.####.exr", 1920, 1080, RGBA, lambda x, y: 1.0 if x < 960 else 0.0)
    plate = _Read("ReadIn", "/p/in/in.####.exr", 960, 540)
    reads = nuke_reads(_fake_nuke([roto, plate]))  # the Ground Truth was selected last
    assert [r.name for r in reads] == ["ReadIn", "ReadGT"]
    assert reads[0] == ReadInfo("ReadIn", "/p/in/in.####.exr", 960, 540, RGBA[:3], ())
    assert len(reads[1].alpha_samples) == 25 and set(reads[1].alpha_samples) == {0.0, 1.0}


def test_prefill_fills_shot_and_learn_fields_from_a_fake_nuke_session(qtbot, monkeypatch, settings, caplog):
    monkeypatch.setattr(menu, "default_settings", lambda: settings)
    window = QMainWindow()  # the DCC's main window
    qtbot.addWidget(window)
    window.show()
    nodes = [_Read("ReadGT", "/plates/gt/gt.####.exr", 1920, 1080, RGBA, lambda x, y: 1.0 if y < 540 else 0.0),
             _Read("ReadIn", "/plates/in/in.####.exr", 960, 540)]
    nuke = _fake_nuke(nodes)
    action = install_menu(window.menuBar(), prefill=lambda: nuke_prefill(nuke))
    with caplog.at_level(logging.WARNING):
        action.trigger()
    dialog = handler_of(action).dialog
    assert dialog.isVisible() and "could not read the host selection" not in caplog.text
    assert (dialog.input_edit.text(), dialog.target_edit.text()) == ("/plates/in", "/plates/gt")
    assert dialog.scale() == 2 and dialog.learn_box.currentData() == "matte"
    assert dialog.scale_note.isVisible() and "From the Reads" in dialog.scale_note.text()
    assert dialog.shot_section.isAncestorOf(dialog.input_edit)
    assert dialog.learn_section.isAncestorOf(dialog.scale_note)
    nodes.clear()  # nothing selected on the next open: the fields stay, the note goes
    action.trigger()
    assert dialog.input_edit.text() == "/plates/in" and dialog.scale_note.text() == ""
    assert not dialog.scale_note.isVisible()
    dialog.advisor.shutdown()
    dialog.close()
    handler_of(action).controller.shutdown()

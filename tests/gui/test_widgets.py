"""Widgets offscreen: menu, submit dialog, runs panel, graph, contact sheet, standalone window."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from qtpy.QtCore import QTimer
from qtpy.QtGui import QImage
from qtpy.QtWidgets import QMainWindow, QMenuBar

from gui import app as gui_app
from gui.menu import ACTION_TEXT, find_render_menu, handler_of, install_menu
from gui.runs_panel import GRAPH_COL, SHEET_COL, RunsPanel
from gui.screenshots import save_panel_screenshot
from gui.submit_dialog import SubmitDialog
from gui.synthetic import add_sheet, metrics_rows, write_run
from trainer.record.rundir import append_metrics


@pytest.fixture
def panel(qtbot, controller):
    widget = RunsPanel(controller)
    qtbot.addWidget(widget)
    yield widget
    widget.shutdown()


def _fill(dialog: SubmitDialog, tmp_path, **over) -> None:
    (tmp_path / "in").mkdir(exist_ok=True)
    (tmp_path / "gt").mkdir(exist_ok=True)
    values = {"input": str(tmp_path / "in"), "target": str(tmp_path / "gt"), "run_dir": str(tmp_path / "run"),
              "show": "demo", "shot": "sh010", **over}
    dialog.input_edit.setText(values["input"])
    dialog.target_edit.setText(values["target"])
    dialog.run_dir_edit.setText(values["run_dir"])
    dialog.show_edit.setText(values["show"])
    dialog.shot_edit.setText(values["shot"])


def test_install_menu_is_idempotent_and_finds_render(qtbot, controller):
    window = QMainWindow()
    qtbot.addWidget(window)
    bar = window.menuBar()
    existing = bar.addMenu("&Render")
    first = install_menu(bar, controller=controller)
    second = install_menu(bar, controller=controller)
    assert first is second and first.text() == ACTION_TEXT
    assert [a.text() for a in bar.actions()] == ["&Render"] and find_render_menu(bar) is existing
    assert [a.text() for a in existing.actions()].count(ACTION_TEXT) == 1
    assert install_menu(existing, controller=controller) is first  # given the Render menu itself


def test_menu_creates_render_menu_and_action_opens_dialog(qtbot, controller):
    bar = QMenuBar()
    qtbot.addWidget(bar)
    action = install_menu(bar, controller=controller)
    assert [a.text().replace("&", "") for a in bar.actions()] == ["Render"]
    action.trigger()
    dialog = handler_of(action).dialog
    assert isinstance(dialog, SubmitDialog) and dialog.isVisible()
    action.trigger()
    assert handler_of(action).dialog is dialog  # the same dialog, values kept
    dialog.close()


def test_dialog_validation_messages(qtbot, controller, tmp_path):
    dialog = SubmitDialog(controller, template_folders=[])
    qtbot.addWidget(dialog)
    assert not dialog.try_submit()
    text = dialog.errors.text()
    for expected in ("Input sequence folder is required", "Ground truth sequence folder is required",
                     "Run directory is required", "Show is required", "Shot is required"):
        assert expected in text
    _fill(dialog, tmp_path, input=str(tmp_path / "missing"))
    dialog.batch_spin.setValue(2)
    dialog.world_spin.setValue(4)
    assert not dialog.try_submit()
    assert "missing does not exist" in dialog.errors.text()
    assert "World size 4 is larger than batch size 2" in dialog.errors.text()
    write_run(tmp_path / "run", steps=100, logged_to=10)
    _fill(dialog, tmp_path)
    dialog.world_spin.setValue(1)
    assert dialog.validate() == [f"Run directory {tmp_path / 'run'} already holds a run; "
                                 "choose a new folder or tick Resume."]
    dialog.resume_box.setChecked(True)
    assert dialog.validate() == []


def test_dialog_config_error_is_shown_inline(qtbot, controller, tmp_path):
    dialog = SubmitDialog(controller, template_folders=[])
    qtbot.addWidget(dialog)
    _fill(dialog, tmp_path)
    dialog.crop_spin.setValue(8)
    dialog.crop_spin.setMinimum(1)
    dialog.crop_spin.setValue(4)
    assert not dialog.try_submit()
    assert "crop_size=4 is too small" in dialog.errors.text()


def test_dialog_submits_to_the_farm_with_template(qtbot, controller, farm, tmp_path):
    (tmp_path / "gpu.toml").write_text('description = "1 GPU"\nservice = "cuetrain-gpu"\ntags = ["gpu"]\n'
                                       'gpus = 1\nworld_size = 4\nsync_interval = 2\n')
    dialog = SubmitDialog(controller, template_folders=[tmp_path])
    qtbot.addWidget(dialog)
    dialog.show()
    _fill(dialog, tmp_path)
    dialog.template_box.setCurrentText("gpu")
    assert (dialog.world_spin.value(), dialog.sync_spin.value()) == (4, 2)  # the template's defaults shown
    dialog.sync_spin.setValue(8)  # the dialog's fields win over the template
    with qtbot.waitSignal(dialog.accepted, timeout=5000):
        assert dialog.try_submit()
        assert not dialog.submit_button.isEnabled()  # busy while the worker submits
    job = farm.submitted[0]
    assert (job.show, job.world_size, job.sync_interval, job.service, job.tags, job.gpus) == \
        ("demo", 4, 8, "cuetrain-gpu", ("gpu",), 1)
    assert job.train.run_dir == str(tmp_path / "run") and controller.run(str(tmp_path / "run")) is not None


def test_dialog_shows_bad_template_inline(qtbot, controller, farm, tmp_path):
    (tmp_path / "bad.toml").write_text('servce = "typo"\n')
    dialog = SubmitDialog(controller, template_folders=[tmp_path])
    qtbot.addWidget(dialog)
    _fill(dialog, tmp_path)
    dialog.template_box.setCurrentText("bad")
    assert not dialog.try_submit()
    assert "unknown template key(s) ['servce']" in dialog.errors.text() and farm.submitted == []


def test_dialog_shows_farm_error(qtbot, controller, farm, tmp_path):
    farm.submit_error = "show 'demo' does not exist on the cuebot"
    dialog = SubmitDialog(controller, template_folders=[])
    qtbot.addWidget(dialog)
    _fill(dialog, tmp_path)
    with qtbot.waitSignal(controller.submit_failed, timeout=5000):
        dialog.try_submit()
    assert dialog.errors.text() == "Submit failed: show 'demo' does not exist on the cuebot"
    assert dialog.submit_button.isEnabled()


def test_panel_picks_up_new_metrics_and_sheets(qtbot, panel, controller, tmp_path):
    paths = write_run(tmp_path / "shot010_v001", steps=1000, logged_to=200, sheet_interval=100)
    controller.add_run(str(paths.root))
    assert panel.table.rowCount() == 1 and not panel.live_box.isChecked()
    controller.poll_now(include_farm=False)
    row = [panel.table.item(0, c).text() for c in range(8)]
    assert row[0] == "shot010_v001" and row[2] == "running" and row[4] == "200/1000"
    assert len(panel.graph.curve_data(str(paths.root))[0]) == 20
    assert panel.sheet.sheet_box.count() == 3 and panel.sheet.current_path().endswith("step_000200.png")
    append_metrics(paths, metrics_rows(210, 300))
    add_sheet(paths, 300)
    controller.poll_now(include_farm=False)
    assert panel.table.item(0, 4).text() == "300/1000"
    assert panel.graph.curve_data(str(paths.root))[0][-1] == 300
    assert panel.sheet.current_path().endswith("step_000300.png")  # "Latest" follows new sheets
    panel.sheet.wait_for_image()
    assert not panel.sheet.image.pixmap().isNull()
    panel.sheet.choose(str(paths.root), 100)
    assert panel.sheet.current_path().endswith("step_000100.png")


def test_panel_toggles_hide_graph_and_sheet(qtbot, panel, controller, tmp_path):
    a = write_run(tmp_path / "a", steps=100, logged_to=50, sheet_interval=10)
    b = write_run(tmp_path / "b", steps=100, logged_to=50, sheet_interval=10, seed=1)
    controller.add_run(str(a.root))
    controller.add_run(str(b.root))
    controller.poll_now(include_farm=False)
    assert set(panel.graph.curve_names()) == {str(a.root), str(b.root)}  # overlaid for comparison
    panel.table.item(0, GRAPH_COL).setCheckState(panel.table.item(0, GRAPH_COL).checkState().Unchecked)
    panel.table.item(1, SHEET_COL).setCheckState(panel.table.item(1, SHEET_COL).checkState().Unchecked)
    assert not controller.run(str(a.root)).show_graph and panel.graph.curve_names() == [str(b.root)]
    assert [panel.sheet.run_box.itemData(i) for i in range(panel.sheet.run_box.count())] == [str(a.root)]
    panel.graph.metric_box.setCurrentText("Learning rate")
    assert panel.graph.column == "lr" and panel.graph.curve_names() == [str(b.root)]


def test_panel_live_checkbox_drives_controller(qtbot, panel, controller):
    assert not panel.live_box.isChecked() and not controller.live_updates
    panel.live_box.setChecked(True)
    assert controller.live_updates
    controller.set_live_updates(False)
    assert not panel.live_box.isChecked()


def test_standalone_window_and_main(qtbot, qapp, monkeypatch, settings, tmp_path):
    monkeypatch.setattr(gui_app, "default_settings", lambda: settings)
    paths = write_run(tmp_path / "run", steps=100, logged_to=50)
    QTimer.singleShot(200, qapp.quit)
    assert gui_app.main([str(paths.root)]) == 0
    window = next(w for w in qapp.topLevelWidgets() if isinstance(w, gui_app.RunsWindow))
    assert [a.text().replace("&", "") for a in window.menuBar().actions()] == ["Render"]
    assert window.panel.table.rowCount() == 1 and not window.controller.live_updates
    dialog = window.open_submit_dialog()
    assert dialog.isVisible()
    dialog.close()
    window.close()
    window.controller.shutdown()


def _rgb(image: QImage) -> np.ndarray:
    """(H, W, 3) uint8 of a QImage."""
    image = image.convertToFormat(QImage.Format.Format_RGB888)
    rows = np.frombuffer(image.constBits(), np.uint8, image.bytesPerLine() * image.height())
    return rows.reshape(image.height(), image.bytesPerLine())[:, :image.width() * 3].reshape(
        image.height(), image.width(), 3)


def test_screenshot_shows_the_loss_curve_and_the_latest_contact_sheet(tmp_path):
    """What is in the picture: the run's loss curve in its palette colour, and the contact sheet of
    step 200 (the latest), not step 100's. The sheet is found by its colourful columns (output and
    ground truth) below the runs table, then sampled at the centre of each sheet pixel: its output
    column matches step 200's sheet, not step 100's (within a few levels: Qt may round colours)."""
    from gui.graph import PALETTE

    paths = write_run(tmp_path / "run", steps=300, logged_to=200, sheet_interval=100)
    out = tmp_path / "shot.png"
    save_panel_screenshot([str(paths.root)], str(out), size=(900, 600))
    image = QImage(str(out))
    assert image.width() >= 900 and image.height() == 600  # at least as wide as asked (button row)
    shot = _rgb(image).astype(int)

    curve = np.array([int(PALETTE[0][i:i + 2], 16) for i in (1, 3, 5)])
    near_curve = np.abs(shot - curve).max(axis=-1) <= 60
    assert (np.abs(shot - curve).max(axis=-1) <= 12).sum() > 200  # the curve is drawn (~1.5 px x 200+ px)

    below = image.height() * 2 // 5  # the graph and the sheet share the lower part; the table is above
    colourful = (shot.max(axis=-1) - shot.min(axis=-1) > 100) & ~near_curve
    ys, xs = np.nonzero(colourful[below:])
    assert ys.size > 10_000, "no contact sheet in the screenshot"
    top, size = below + ys.min(), ys.max() + 1 - ys.min()  # a square sheet: 3 x 3 crops
    left = xs.max() + 1 - size
    sheets = {step: _rgb(QImage(str(paths.contact_sheet(step)))).astype(int) for step in (100, 200)}
    cells = sheets[200].shape[0]
    centres = ((np.arange(cells) + 0.5) * size / cells).astype(int)
    shown = shot[top + centres][:, left + centres]  # (cells, cells, 3): one sample per sheet pixel
    middle = slice(cells // 3, 2 * cells // 3)  # the output column: where steps 100 and 200 differ
    error = {step: float(np.abs(shown[:, middle] - sheet[:, middle]).mean()) for step, sheet in sheets.items()}
    assert error[200] < 8 and error[100] > 2 * error[200] + 6, error  # measured: 0 and 21.5


def gui_modules() -> list[str]:
    """Every module of the ``gui`` package itself (read from its folder, so a new module is checked the day it is
    added); ``gui.cuegui_plugins`` is CueGUI's side, which imports opencue by design."""
    import pkgutil

    import gui

    return ["gui", *sorted(f"gui.{m.name}" for m in pkgutil.iter_modules(gui.__path__) if m.name != "cuegui_plugins")]


def test_gui_never_imports_torch():
    modules = gui_modules()
    assert {"gui.upres", "gui.start_from", "gui.train_for", "gui.advisor_chart", "gui.infer_dialog",
            "gui.controller", "gui.submit_dialog", "gui.prefill", "gui.head_start",
            "gui.submit_sections"} <= set(modules)  # the list is the package, not a copy of it
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "bad = [m for m in ('torch', 'opencue', 'outline', 'grpc') if m in sys.modules]\n"
            "assert not bad, bad\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_show_reuses_the_host_application(qtbot, qapp, controller):
    window = gui_app.show(controller=controller)  # as a DCC calls it: its QApplication already runs
    qtbot.addWidget(window)
    assert window.isVisible() and window.controller is controller
    assert window.panel.table.rowCount() == 0 and not controller.live_updates


def test_graph_dropdown_plots_the_gradient_noise_scale(qtbot, panel, controller, tmp_path):
    """metrics.jsonl's ``noise_scale`` (trainer.learn.noise_scale) is a series of the graph dropdown."""
    import math

    from trainer.record.rundir import read_metrics

    paths = write_run(tmp_path / "a", steps=100, logged_to=50)
    controller.add_run(str(paths.root))
    controller.poll_now(include_farm=False)
    panel.graph.metric_box.setCurrentText("Gradient noise scale")
    assert panel.graph.column == "noise_scale"
    x, y = panel.graph.curve_data(str(paths.root))
    rows = read_metrics(paths)
    assert panel.graph.log_box.isChecked()  # log axis by default: pyqtgraph hands back log10 values
    assert list(x) == [r["step"] for r in rows]
    assert list(y) == pytest.approx([math.log10(r["noise_scale"]) for r in rows])


def test_gui_tests_leave_no_qt_object_for_another_thread(tmp_path):
    """The GUI tests' windows, dialogs and controllers die on the GUI thread (conftest's autouse fixture).

    Without it they wait in reference cycles for the cyclic GC, which may next run on any thread; the CI of
    stop 25 segfaulted that way in the first multihost test after the GUI tests (exit 139). Here the GUI tests
    of this file and of test_controller.py run in a child pytest, and a plugin then runs the GC on a worker
    thread: measured without the fixture, that segfaults every time (3 of 3)."""
    here = Path(__file__).resolve().parent
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.gui.gc_in_thread",
         "-k", "not test_gui_tests_leave_no_qt_object", str(here / "test_widgets.py"), str(here / "test_controller.py")],
        cwd=here.parents[1], capture_output=True, text=True, timeout=300,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    tail = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0, tail
    assert "collected on a worker thread:" in proc.stdout, tail

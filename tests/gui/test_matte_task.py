"""Mattes in the GUI (issue 40): the submit dialog's Learn / Augmentation / Preview frames and the job arguments
they make, the task proposed from the Ground Truth Read's alpha (pure, and through Nuke's menu.py against a stub
``nuke``), the Runs panel's Task column and Preview tab, and the CueGUI plugin's summary and Preview tab (against a
stub ``cuegui``)."""

from __future__ import annotations

import importlib.util
import logging
import runpy
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from qtpy.QtCore import QObject, Signal
from qtpy.QtWidgets import QMainWindow, QMenu, QVBoxLayout, QWidget

from cue_plugin.submit.builder import frame_argv
from gui import menu
from tests.gui.conftest import fill_dialog
from gui.menu import ACTION_TEXT, handler_of
from gui.poller import RunPoller
from gui.records import Run
from gui.runs_panel import TASK_COL, RunsPanel
from gui.submit_dialog import SubmitDialog
from gui.synthetic import png_bytes, write_run
from gui.task import alpha_grid, propose_task, task_channels, task_text
from gui.prefill import Prefill, ReadInfo, prefill_from_reads
from trainer.record.rundir import atomic_write_bytes, atomic_write_json, read_json
from trainer.record.runrecord import RunRecord

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ROOT / "farm_templates" / "hosts"
RGBA = ("rgba.red", "rgba.green", "rgba.blue", "rgba.alpha")
ROTO = tuple([0.0] * 12 + [1.0] * 8 + [0.5] * 5)  # a 5x5 grid across a roto's edge


def _arg(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


@pytest.fixture
def dialog(qtbot, controller):
    widget = SubmitDialog(controller, template_folders=[])
    qtbot.addWidget(widget)
    return widget


# ------------------------------------------------------------------------------- submit dialog
def test_colour_default_adds_no_channel_augment_or_preview_args(dialog, tmp_path):
    fill_dialog(dialog, tmp_path)
    assert dialog.learn_box.currentText() == "Colour (RGB)" and dialog.augment_spin.value() == 0.0
    job = dialog.build_job()
    argv = frame_argv(job)
    for flag in ("--input-channels", "--target-channels", "--augment", "--preview"):
        assert flag not in argv, flag
    assert job.train.channels.is_default and job.train.augment == 0.0 and job.train.preview == ""


@pytest.mark.parametrize("text, task, targets", [("Matte (alpha)", "matte", "A"),
                                                 ("Colour + alpha", "colour+alpha", "R,G,B,A")])
def test_matte_and_colour_alpha_carry_their_channels(qtbot, dialog, farm, tmp_path, text, task, targets):
    fill_dialog(dialog, tmp_path)
    dialog.learn_box.setCurrentText(text)
    argv = frame_argv(dialog.build_job())
    # R,G,B in is the trainer's default, so TrainConfig.to_argv leaves --input-channels out
    assert (_arg(argv, "--input-channels"), _arg(argv, "--target-channels")) == (None, targets)
    with qtbot.waitSignal(dialog.accepted, timeout=5000):
        assert dialog.try_submit()
    train = farm.submitted[0].train
    assert (train.input_channels, train.target_channels, train.channels.task) == ("R,G,B", targets, task)


def test_task_channels_follow_trainer_tasks():
    assert task_channels("colour") == ("R,G,B", "R,G,B")
    assert task_channels("matte") == ("R,G,B", "A")
    with pytest.raises(ValueError, match="colour, matte, colour\\+alpha"):
        task_channels("depth")


def test_augment_and_preview_flow_into_the_job(qtbot, dialog, farm, tmp_path):
    fill_dialog(dialog, tmp_path)
    frame = tmp_path / "preview" / "p.0001.exr"
    frame.parent.mkdir()
    frame.write_bytes(b"exr")
    dialog.augment_spin.setValue(0.25)
    dialog.preview_field.set_path(str(frame.parent))  # a folder of frames
    argv = frame_argv(dialog.build_job())
    assert (_arg(argv, "--augment"), _arg(argv, "--preview")) == ("0.25", str(frame.parent))
    dialog.preview_field.set_path(str(frame))  # or one frame
    assert dialog.preview_note.text() == ""
    with qtbot.waitSignal(dialog.accepted, timeout=5000):
        assert dialog.try_submit()
    train = farm.submitted[0].train
    assert (train.augment, train.preview) == (0.25, str(frame))


def test_missing_preview_warns_inline_and_blocks_submit(dialog, farm, tmp_path):
    fill_dialog(dialog, tmp_path)
    missing = tmp_path / "nowhere" / "p.0001.exr"
    dialog.preview_field.set_path(str(missing))
    assert f"Preview frames {missing} does not exist" in dialog.preview_note.text()
    assert not dialog.try_submit() and "Preview frames" in dialog.errors.text() and farm.submitted == []
    missing.parent.mkdir()
    missing.write_bytes(b"exr")
    dialog.preview_field.set_path(f" {missing} ")  # typed again: the note clears
    assert dialog.preview_note.text() == "" and dialog.validate() == []


def test_prefill_chooses_the_task(dialog):
    dialog.apply_prefill(Prefill("/p/in", "/p/gt", 1, note="From the Reads", task="matte"))
    assert dialog.learn_box.currentData() == "matte"
    dialog.apply_prefill(Prefill("/p/in", "/p/gt", 1))  # the host could not tell: the choice stays
    assert dialog.learn_box.currentData() == "matte"
    dialog.apply_prefill(Prefill("/p/in", "/p/gt", 1, task="colour"))
    assert dialog.learn_box.currentData() == "colour"


# ------------------------------------------------------------------------------ task proposal
@pytest.mark.parametrize("channels, samples, task, says", [
    (RGBA, ROTO, "matte", "holds a matte"),
    (RGBA, (1.0,) * 25, "colour", "constant 1 (no roto)"),
    (RGBA, (0.0,) * 25, "colour", "constant 0 (no roto)"),
    (RGBA[:3], (), "colour", "no alpha"),
    (RGBA, (), "colour", "could not sample"),
    (("rgba.red", "rgba.green", "rgba.blue", "mask.a"), ROTO, "colour", "no alpha"),  # only rgba.alpha counts
])
def test_propose_task_from_the_ground_truth_alpha(channels, samples, task, says):
    proposal = propose_task(channels, samples)
    assert proposal.task == task and says in proposal.note


def test_alpha_grid_spreads_pixel_centres_over_the_format():
    grid = alpha_grid(100, 50)
    assert len(grid) == 25 and grid[0] == (10.0, 5.0) and grid[-1] == (90.0, 45.0)
    assert alpha_grid(0, 50) == []


def test_prefill_from_reads_proposes_matte_from_the_ground_truth_only():
    inp = ReadInfo("ReadIn", "/p/in/in.####.exr", 1920, 1080, RGBA, ROTO)  # the Input's alpha does not count
    gt = ReadInfo("ReadGT", "/p/gt/gt.####.exr", 1920, 1080, RGBA, (1.0,) * 25)
    p = prefill_from_reads([inp, gt])
    assert p.task == "colour" and "constant 1" in p.note
    gt = ReadInfo("ReadGT", "/p/gt/gt.####.exr", 1920, 1080, RGBA, ROTO)
    p = prefill_from_reads([gt, ReadInfo("ReadIn", "/p/in/in.####.exr", 1920, 1080, RGBA[:3])])
    assert (p.target_dir, p.task) == ("/p/gt", "matte") and p.note.startswith("From the Reads")
    unknown = prefill_from_reads([ReadInfo("ReadIn", "/p/in/i.exr", 10, 10), ReadInfo("ReadGT", "/p/gt/g.exr", 10, 10)])
    assert unknown.task == ""  # no channels from the host: the dialog keeps its choice


# ------------------------------------------------------------------------------ Nuke menu.py
class _Node:
    def __init__(self, name: str, file: str, channels=None, alpha=None) -> None:
        self._name, self.file, self._channels, self.alpha = name, file, channels, alpha

    def name(self) -> str:
        return self._name

    def format(self):
        return types.SimpleNamespace(width=lambda: 1920, height=lambda: 1080)

    def channels(self):
        if self._channels is None:
            raise RuntimeError("no channels in this Nuke")
        return list(self._channels)


def _open_nuke_dialog(qtbot, monkeypatch, settings, nodes, sample):
    monkeypatch.setattr(menu, "default_settings", lambda: settings)
    monkeypatch.setenv("CUETRAIN_ROOT", str(ROOT))
    monkeypatch.setenv("CUETRAIN_PYTHON", "")
    window = QMainWindow()
    qtbot.addWidget(window)
    window.show()
    nuke = types.ModuleType("nuke")
    nuke.GUI, nuke.selectedNodes, nuke.filename = True, lambda cls="": list(nodes), lambda node: node.file
    nuke.sample = sample
    monkeypatch.setitem(sys.modules, "nuke", nuke)
    runpy.run_path(str(HOSTS / "nuke" / "menu.py"), run_name="__main__")
    render = next(m for m in window.menuBar().findChildren(QMenu) if m.title().replace("&", "") == "Render")
    action = next(a for a in render.actions() if a.text() == ACTION_TEXT)
    action.trigger()
    return action, handler_of(action).dialog


def _roto(node, channel, x, y):
    """A stub ``nuke.sample``: the node's alpha function of the pixel, for ``rgba.alpha`` only."""
    assert channel == "rgba.alpha"
    return node.alpha(x, y)


@pytest.mark.parametrize("alpha, task", [(lambda x, y: 1.0 if x < 960 else 0.0, "matte"),
                                         (lambda x, y: 1.0, "colour")])
def test_nuke_menu_proposes_matte_when_the_ground_truth_alpha_holds_roto(qtbot, monkeypatch, settings, alpha, task):
    nodes = [_Node("ReadGT", "/plates/gt/gt.####.exr", RGBA, alpha),
             _Node("ReadIn", "/plates/in/in.####.exr", RGBA[:3])]
    action, dialog = _open_nuke_dialog(qtbot, monkeypatch, settings, nodes, _roto)
    assert (dialog.target_edit.text(), dialog.learn_box.currentData()) == ("/plates/gt", task)
    assert ("holds a matte" in dialog.scale_note.text()) == (task == "matte")
    dialog.close()
    handler_of(action).controller.shutdown()


def test_nuke_menu_failing_samples_and_channels_only_log(qtbot, monkeypatch, settings, caplog):
    calls = []

    def flaky(node, channel, x, y):  # every other sample fails; the rest still show a roto
        calls.append((x, y))
        if len(calls) % 2:
            raise RuntimeError("Read error: file not found")
        return 1.0 if x < 960 else 0.0

    nodes = [_Node("ReadGT", "/plates/gt/gt.####.exr", RGBA, None), _Node("ReadIn", "/plates/in/in.####.exr")]
    with caplog.at_level(logging.WARNING, logger="cuetrain.nuke"):
        action, dialog = _open_nuke_dialog(qtbot, monkeypatch, settings, nodes, flaky)
    assert len(calls) == 25 and dialog.learn_box.currentData() == "matte"
    assert "13 of 25 alpha samples of ReadGT failed" in caplog.text
    assert "cannot list the channels of ReadIn" in caplog.text
    dialog.close()
    handler_of(action).controller.shutdown()


# --------------------------------------------------------------------------------- runs panel
def _run_with_channels(root: Path, channels: tuple[str, str] | None, **write) -> str:
    """A synthetic run whose config names ``channels`` (None: a config from before channels, without the keys)."""
    paths = write_run(root, steps=100, logged_to=100, state="succeeded", **write)
    record = read_json(paths.run_json)
    for key in ("input_channels", "target_channels"):
        record["config"].pop(key)
    if channels:
        record["config"]["input_channels"], record["config"]["target_channels"] = channels
    atomic_write_json(paths.run_json, record)
    return str(paths.root)


def test_runs_panel_task_column(qtbot, controller, tmp_path):
    runs = tmp_path / "runs"
    dirs = {"roto": ("R,G,B", "A"), "rgba": ("R,G,B", "R,G,B,A"), "old": None, "depth": ("R,G,B", "Z")}
    panel = RunsPanel(controller)
    qtbot.addWidget(panel)
    for name, channels in dirs.items():
        controller.add_run(_run_with_channels(runs / name, channels))
    controller.poll_now(include_farm=False)
    cells = {panel.table.item(r, 0).text(): panel.table.item(r, TASK_COL).text() for r in range(len(dirs))}
    assert cells == {"roto": "matte", "rgba": "colour+alpha", "old": "colour", "depth": "R,G,B -> Z"}
    assert panel.table.item(panel.row_of(str(runs / "roto")), TASK_COL).toolTip() == "R,G,B -> A"
    assert task_text(RunRecord()) == "-"  # no config yet
    panel.shutdown()


def _add_preview(root: str, step: int, rgb: tuple[int, int, int]) -> Path:
    path = Path(root) / "previews" / f"step_{step:06d}.png"
    path.parent.mkdir(exist_ok=True)
    atomic_write_bytes(path, png_bytes(np.full((24, 32, 3), rgb, dtype=np.uint8)))
    return path


def _shown_rgb(view) -> tuple[int, int, int]:
    view.wait_for_image()
    image = view.image.pixmap().toImage()
    colour = image.pixelColor(image.width() // 2, image.height() // 2)
    return colour.red(), colour.green(), colour.blue()


def test_preview_tab_shows_the_newest_previews_png(qtbot, controller, tmp_path):
    run_dir = _run_with_channels(tmp_path / "roto", ("R,G,B", "A"), sheet_interval=50)
    _add_preview(run_dir, 200, (0, 255, 0))
    _add_preview(run_dir, 100, (255, 0, 0))
    (Path(run_dir) / "previews" / "step_000300.png.tmp").write_bytes(b"half written")  # not a preview
    panel = RunsPanel(controller)
    qtbot.addWidget(panel)
    controller.add_run(run_dir)
    controller.poll_now(include_farm=False)
    assert [panel.images.tabText(i) for i in range(panel.images.count())] == ["Contact Sheet", "Preview"]
    assert panel.preview.current_path().endswith("previews/step_000200.png")
    assert panel.sheet.current_path().endswith("contact_sheets/step_000100.png")  # the sheets are still there
    panel.images.setCurrentWidget(panel.preview)
    assert _shown_rgb(panel.preview) == (0, 255, 0)
    _add_preview(run_dir, 300, (0, 0, 255))
    controller.poll_now(include_farm=False)
    assert panel.preview.current_path().endswith("previews/step_000300.png")  # "Latest" follows new renders
    assert _shown_rgb(panel.preview) == (0, 0, 255)
    assert panel.preview.sheet_box.count() == 4  # Latest + 3 steps
    panel.shutdown()


def test_poller_reports_each_preview_once(tmp_path):
    paths = write_run(tmp_path / "run", steps=100, logged_to=100)
    poller = RunPoller(paths.root)
    assert poller.poll().new_previews == []  # previews/ is empty
    first = _add_preview(str(paths.root), 10, (9, 9, 9))
    result = poller.poll()
    assert result.new_previews == [(10, str(first))] and result.changed
    second = _add_preview(str(paths.root), 20, (9, 9, 9))
    assert poller.poll().new_previews == [(20, str(second))]  # step 10 is not reported again


# ------------------------------------------------------------------------------ CueGUI plugin
class _CueApp(QObject):
    single_click = Signal(object)
    view_object = Signal(object)


class _DockStub(QWidget):
    """Stands in for ``cuegui.AbstractDockWidget.AbstractDockWidget``: a widget with a layout and ``app``."""

    def __init__(self, parent, name, area) -> None:
        super().__init__(parent)
        QVBoxLayout(self)
        self.app = _CueApp(self)


@pytest.fixture
def plugin(monkeypatch):
    """The plugin module loaded against a stub ``cuegui`` (under a private name: sys.modules keeps no stub)."""
    cuegui = types.ModuleType("cuegui")
    cuegui.AbstractDockWidget = types.SimpleNamespace(AbstractDockWidget=_DockStub)
    cuegui.Utils = types.SimpleNamespace(isJob=lambda obj: True)
    monkeypatch.setitem(sys.modules, "cuegui", cuegui)
    monkeypatch.setitem(sys.modules, "cuegui.AbstractDockWidget", cuegui.AbstractDockWidget)
    monkeypatch.setitem(sys.modules, "cuegui.Utils", cuegui.Utils)
    path = ROOT / "gui" / "cuegui_plugins" / "cuetrain_training_runs.py"
    spec = importlib.util.spec_from_file_location("_cuetrain_plugin_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cuegui_plugin_summary_and_preview_tab(qtbot, plugin, farm, tmp_path):
    run_dir = _run_with_channels(tmp_path / "roto", ("R,G,B", "A"))
    _add_preview(run_dir, 100, (0, 255, 0))
    run = Run(run_dir, record=RunRecord.from_dict(read_json(Path(run_dir) / "run.json")))
    assert "-  matte, 1x, start: random  -" in plugin.run_summary(run)
    dock = plugin.TrainingRunsDockWidget(None, farm_factory=lambda: farm)
    qtbot.addWidget(dock)
    layer = types.SimpleNamespace(data=types.SimpleNamespace(
        command=f"python -u -m cue_plugin.frame --frame 1 -- --run-dir {run_dir}"))
    job = types.SimpleNamespace(getLayers=lambda: [layer], id=lambda: "id-1", name=lambda: "demo-sh010-roto")
    dock.set_job(job)
    dock.controller.set_live_updates(False)
    dock.controller.poll_now(include_farm=False)
    assert "matte, 1x" in dock.job_label.text()
    assert dock.preview.current_path().endswith("previews/step_000100.png")
    assert dock.images.indexOf(dock.preview) == 1
    dock.close()

"""Upscale factor and head start in the GUI: the submit dialog's --scale / --init-from, the Start-from list,
the Runs panel's Scale and Start columns, and the factor proposed from two Read nodes (pure, and through
Nuke's menu.py against a stub ``nuke``)."""

from __future__ import annotations

import os
import runpy
import sys
import types
from pathlib import Path

import pytest
from qtpy.QtWidgets import QMainWindow, QMenu

from cue_plugin.submit.builder import frame_argv
from gui import menu
from tests.gui.conftest import fill_dialog
from gui.menu import ACTION_TEXT, handler_of
from gui.runs_panel import SCALE_COL, START_COL, RunsPanel
from gui.start_from import RANDOM_TEXT
from gui.submit_dialog import SubmitDialog
from gui.synthetic import write_run
from gui.head_start import candidate_for_path
from gui.prefill import ReadInfo, prefill_from_reads
from gui.upres import propose_scale
from trainer.record.rundir import atomic_write_json, read_json

HOSTS = Path(__file__).resolve().parents[2] / "farm_templates" / "hosts"


def fake_run(root: Path, scale: int = 1, state: str = "succeeded", model: bool = True, mtime: float | None = None,
             model_size: str | None = None, **top) -> str:
    """A run directory (synthetic run.json + metrics) with ``config.scale``, optional ``model.pt`` and extra
    top-level run.json keys (e.g. ``init_from``)."""
    paths = write_run(root, steps=100, logged_to=100, state=state)
    record = read_json(paths.run_json)
    record["config"]["scale"] = scale
    if model_size:
        record["config"]["model_size"] = model_size
    atomic_write_json(paths.run_json, {**record, **top})
    if model:
        paths.model.write_bytes(b"torchscript")
        if mtime is not None:
            os.utime(paths.model, (mtime, mtime))
    return str(paths.root)


@pytest.fixture
def dialog(qtbot, controller):
    widget = SubmitDialog(controller, template_folders=[])
    qtbot.addWidget(widget)
    return widget


# ------------------------------------------------------------------------------- factor proposal
@pytest.mark.parametrize("inp, gt, scale", [((1920, 1080), (1920, 1080), 1), ((960, 540), (1920, 1080), 2),
                                            ((480, 270), (1920, 1080), 4)])
def test_propose_scale_finds_1_2_and_4(inp, gt, scale):
    proposal = propose_scale(inp, gt)
    assert (proposal.scale, proposal.warning) == (scale, "")


@pytest.mark.parametrize("inp, gt", [((960, 540), (1920, 1000)),  # width says 2, height does not
                                     ((640, 360), (1920, 1080)),  # 3x is no factor
                                     ((1920, 1080), (960, 540)),  # Ground Truth smaller
                                     ((0, 0), (1920, 1080))])  # size unknown
def test_propose_scale_warns_and_proposes_1_when_no_factor_fits(inp, gt):
    proposal = propose_scale(inp, gt)
    assert proposal.scale == 1 and "proposing 1x" in proposal.warning and f"{gt[0]}x{gt[1]}" in proposal.warning


def test_prefill_from_reads_picks_the_ground_truth_and_the_factor():
    small = ReadInfo("Read1", "/plates/lo/lo.####.exr", 960, 540)
    big = ReadInfo("Read2", "/plates/hi/hi.####.exr", 1920, 1080)
    for order in ((small, big), (big, small)):  # the larger plate is the Ground Truth
        p = prefill_from_reads(order)
        assert (p.input_dir, p.target_dir, p.scale, p.warning) == ("/plates/lo", "/plates/hi", 2, "")
    named = ReadInfo("Read_GT", "/plates/clean/c.####.exr", 1920, 1080)  # same size: its name says GT
    p = prefill_from_reads([named, ReadInfo("Read3", "/plates/noisy/n.####.exr", 1920, 1080)])
    assert (p.input_dir, p.target_dir, p.scale) == ("/plates/noisy", "/plates/clean", 1)
    assert prefill_from_reads([]) is None
    only = prefill_from_reads([small])
    assert only.input_dir == "" and "1 Read node(s) selected" in only.warning


# ------------------------------------------------------------------------------ submit dialog
def test_dialog_defaults_add_neither_scale_nor_init_from(dialog, tmp_path):
    fill_dialog(dialog, tmp_path)
    assert dialog.scale_box.currentText() == "1x (same size)" and dialog.start_field.box.currentText() == RANDOM_TEXT
    argv = frame_argv(dialog.build_job())
    assert "--scale" not in argv and "--init-from" not in argv


def test_dialog_job_args_carry_scale_and_init_from(qtbot, dialog, controller, farm, tmp_path):
    base = fake_run(tmp_path / "runs" / "base_2x", scale=2)
    controller.add_run(base)
    dialog.show()  # showing relists the runs
    fill_dialog(dialog, tmp_path)
    dialog.set_scale(2)
    dialog.start_field.set_path(base)
    assert dialog.validate() == [] and dialog.start_note.text() == ""
    argv = frame_argv(dialog.build_job())
    assert argv[argv.index("--scale") + 1] == "2" and argv[argv.index("--init-from") + 1] == base
    with qtbot.waitSignal(dialog.accepted, timeout=5000):
        assert dialog.try_submit()
    assert (farm.submitted[0].train.scale, farm.submitted[0].train.init_from) == (2, base)


def test_start_from_lists_finished_runs_with_a_model_newest_first(dialog, controller, tmp_path):
    runs = tmp_path / "runs"
    old = fake_run(runs / "old_1x", scale=1, mtime=1_700_000_000)
    new = fake_run(runs / "new_2x", scale=2, mtime=1_700_100_000)
    busy = fake_run(runs / "busy", state="running")  # its model.pt may still change
    bare = fake_run(runs / "bare", model=False)  # nothing to start from
    for run_dir in (old, busy, new, bare):
        controller.add_run(run_dir)
    dialog.start_field.refresh()
    assert dialog.start_field.paths() == ["", new, old]
    labels = [dialog.start_field.box.itemText(i) for i in range(dialog.start_field.box.count())]
    assert labels[0] == RANDOM_TEXT
    assert labels[1].startswith("new_2x (upres 2x, small) ") and labels[2].startswith("old_1x (1x, small) ")


def test_start_from_of_another_scale_warns_inline_and_blocks_submit(dialog, controller, farm, tmp_path):
    base = fake_run(tmp_path / "runs" / "base_2x", scale=2)
    controller.add_run(base)
    dialog.start_field.refresh()
    fill_dialog(dialog, tmp_path)
    dialog.start_field.set_path(base)  # the factor is still 1x
    assert "was trained at upres 2x, but this run is 1x" in dialog.start_note.text()
    assert not dialog.try_submit() and "its weights do not fit" in dialog.errors.text() and farm.submitted == []
    dialog.set_scale(2)
    assert dialog.start_note.text() == "" and dialog.validate() == []
    dialog.model_box.setCurrentText("large")
    assert "is a small model, but this run is large" in dialog.start_note.text()


def test_browsed_checkpoint_is_listed_with_its_run_s_scale(dialog, tmp_path):
    run = fake_run(tmp_path / "runs" / "base_4x", scale=4)
    ckpt = Path(run) / "checkpoints" / "step_000100.pt"
    ckpt.parent.mkdir(exist_ok=True)
    ckpt.write_bytes(b"state")
    assert candidate_for_path(str(ckpt)).scale == 4
    dialog.start_field.set_path(str(ckpt))
    assert dialog.start_field.path() == str(ckpt)
    assert dialog.start_field.box.currentText().startswith("base_4x/checkpoints/step_000100.pt (upres 4x")
    assert "upres 4x" in dialog.start_note.text()
    dialog.start_field.refresh()  # a browsed file stays listed
    assert dialog.start_field.path() == str(ckpt)
    loose = tmp_path / "library" / "model.pt"  # outside a run directory: its model.json says what it is
    loose.parent.mkdir()
    loose.write_bytes(b"torchscript")
    (tmp_path / "library" / "model.json").write_text('{"scale": 2, "model_size": "small"}')
    assert (candidate_for_path(str(loose)).scale, candidate_for_path(str(loose)).model_size) == (2, "small")
    dialog.set_scale(2)
    dialog.start_field.set_path(str(loose))
    assert dialog.start_note.text() == "" and dialog.start_field.paths()[-2:] == [str(ckpt), str(loose)]


# --------------------------------------------------------------------------------- runs panel
def test_runs_panel_shows_scale_and_what_the_run_started_from(qtbot, controller, tmp_path):
    runs = tmp_path / "runs"
    recorded = fake_run(runs / "up2", scale=2, init_from={"path": str(runs / "base" / "model.pt"), "kind": "model",
                                                           "weights": "ema", "step": 3000, "run": str(runs / "base")})
    from_config = fake_run(runs / "cfg")
    config_only = read_json(Path(from_config) / "run.json")
    config_only["config"]["init_from"] = str(runs / "other" / "checkpoints" / "step_000500.pt")
    atomic_write_json(Path(from_config) / "run.json", config_only)
    fresh = fake_run(runs / "fresh", scale=4)
    panel = RunsPanel(controller)
    qtbot.addWidget(panel)
    for run_dir in (recorded, from_config, fresh):
        controller.add_run(run_dir)
    controller.poll_now(include_farm=False)
    cells = {panel.table.item(r, 0).text(): (panel.table.item(r, SCALE_COL).text(),
                                              panel.table.item(r, START_COL).text()) for r in range(3)}
    assert cells == {"up2": ("upres 2x", "base"), "cfg": ("1x", "other/checkpoints/step_000500.pt"),
                     "fresh": ("upres 4x", "random")}
    tip = panel.table.item(panel.row_of(recorded), START_COL).toolTip()
    assert "kind: model" in tip and "step: 3000" in tip
    panel.shutdown()


# ------------------------------------------------------------------------------ Nuke menu.py
class _Node:
    def __init__(self, name: str, file: str, width: int, height: int) -> None:
        self._name, self.file, self._size = name, file, (width, height)

    def name(self) -> str:
        return self._name

    def format(self):
        w, h = self._size
        return types.SimpleNamespace(width=lambda: w, height=lambda: h)


@pytest.mark.parametrize("gt_size, scale, warned", [((1920, 1080), 2, False), ((1920, 1000), 1, True)])
def test_nuke_menu_proposes_the_factor_from_two_selected_reads(qtbot, monkeypatch, settings, gt_size, scale, warned):
    monkeypatch.setattr(menu, "default_settings", lambda: settings)
    monkeypatch.setenv("CUETRAIN_ROOT", str(HOSTS.parents[1]))
    monkeypatch.setenv("CUETRAIN_PYTHON", "")
    window = QMainWindow()
    qtbot.addWidget(window)
    window.show()
    nodes = [_Node("ReadGT", "/plates/hi/gt.####.exr", *gt_size), _Node("ReadIn", "/plates/lo/in.####.exr", 960, 540)]
    nuke = types.ModuleType("nuke")
    nuke.GUI, nuke.selectedNodes, nuke.filename = True, lambda cls="": list(nodes), lambda node: node.file
    monkeypatch.setitem(sys.modules, "nuke", nuke)
    runpy.run_path(str(HOSTS / "nuke" / "menu.py"), run_name="__main__")
    render = next(m for m in window.menuBar().findChildren(QMenu) if m.title().replace("&", "") == "Render")
    action = next(a for a in render.actions() if a.text() == ACTION_TEXT)
    action.trigger()
    dialog = handler_of(action).dialog
    assert (dialog.input_edit.text(), dialog.target_edit.text(), dialog.scale()) == ("/plates/lo", "/plates/hi", scale)
    assert ("match no upscale factor" in dialog.scale_note.text()) == warned
    assert "From the Reads" in dialog.scale_note.text() or warned
    dialog.close()
    handler_of(action).controller.shutdown()

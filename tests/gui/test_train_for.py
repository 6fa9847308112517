"""Train for a time or until flat (gui.train_for, the submit dialog's "Train for"), and the Runs panel's Time left
column and the CueGUI plugin's summary that follow such a run (gui.records.time_left_text)."""

from __future__ import annotations

import importlib.util
import sys
import time
import types
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from qtpy.QtCore import QTime
from qtpy.QtWidgets import QWidget

from cue_plugin.submit.builder import frame_argv
from tests.gui.conftest import fill_dialog
from gui.records import Run, time_left_text
from gui.runs_panel import TIME_LEFT_COL, RunsPanel
from gui.submit_dialog import SubmitDialog
from gui.synthetic import write_run
from gui.train_for import FLAT, STEPS, UNTIL, deadline_text, next_deadline
from trainer.core.budget import parse_time_budget
from trainer.record.runrecord import RunRecord, read_record, update_record

ROOT = Path(__file__).resolve().parents[2]
CET = timezone(timedelta(hours=1))
NOW = datetime(2026, 11, 27, 10, 0, tzinfo=CET)  # a Friday morning in Paris
NEW_FLAGS = ("--time-budget", "--stop-when-flat", "--flat-window")


def _train_argv(dialog: SubmitDialog) -> list[str]:
    """The trainer's part of the frame argv (after ``--``), without the three folders."""
    argv = frame_argv(dialog.build_job())
    train, folders = argv[argv.index("--") + 1:], ("--input", "--target", "--run-dir")
    return [arg for i, arg in enumerate(train) if arg not in folders and not (i and train[i - 1] in folders)]


@pytest.fixture
def dialog(qtbot, controller, tmp_path):
    widget = SubmitDialog(controller, template_folders=[])
    qtbot.addWidget(widget)
    fill_dialog(widget, tmp_path)
    return widget


# ------------------------------------------------------------------------------- the deadline
def test_until_later_today_is_today_with_the_offset():
    assert deadline_text(18, 0, NOW) == "2026-11-27T18:00+01:00"
    assert parse_time_budget(deadline_text(18, 0, NOW)).deadline_unix == NOW.timestamp() + 8 * 3600


@pytest.mark.parametrize("hour, minute", [(9, 59), (10, 0)])
def test_until_a_time_passed_today_or_now_is_tomorrow(hour, minute):
    assert deadline_text(hour, minute, NOW) == f"2026-11-28T{hour:02d}:{minute:02d}+01:00"


def test_until_follows_a_dst_change_overnight():
    paris = datetime(2026, 10, 24, 20, 0, tzinfo=ZoneInfo("Europe/Paris"))  # CEST, +02:00; CET from 03:00 tomorrow
    assert deadline_text(9, 0, paris) == "2026-10-25T09:00+01:00"
    assert next_deadline(9, 0, paris).timestamp() - paris.timestamp() == 14 * 3600  # 13 h on the clock, plus 1


@pytest.fixture
def kolkata(monkeypatch):
    """This machine's local time zone is Asia/Kolkata (+05:30, no DST) for the test."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_until_without_now_uses_this_machines_clock_and_offset(kolkata):
    text = deadline_text(23, 59)
    assert text.endswith("+05:30") and "T23:59" in text
    left = parse_time_budget(text).deadline_unix - time.time()
    assert 0 < left <= 24 * 3600


# ------------------------------------------------------------------------------- the submit dialog
def test_default_mode_is_n_steps_and_adds_no_argument(dialog):
    assert dialog.train_for.mode() == STEPS
    train = dialog.build_job().train
    assert (train.steps, train.time_budget, train.stop_when_flat, train.flat_window) == (1000, "", 0.0, 500)
    assert _train_argv(dialog) == []  # every value is the trainer's default, as before "Train for"
    dialog.steps_spin.setValue(5000)
    assert _train_argv(dialog) == ["--steps", "5000"]
    assert not dialog.train_for.time_edit.isVisibleTo(dialog.train_for) and dialog.train_for.note.text() == ""


def test_until_sends_the_next_deadline_and_keeps_steps_as_cap(qtbot, dialog, farm):
    dialog.train_for.fixed_now = NOW.replace(hour=19, minute=30)  # 18:00 has passed: tomorrow
    dialog.train_for.set_mode(UNTIL)
    dialog.train_for.time_edit.setTime(QTime(18, 0))
    dialog.steps_spin.setValue(200_000)
    assert _train_argv(dialog) == ["--steps", "200000", "--time-budget", "2026-11-28T18:00+01:00"]
    assert dialog.train_for.time_edit.isVisibleTo(dialog.train_for)
    assert "cap" in dialog.steps_spin.toolTip() and dialog.steps_spin.text() == "at most 200000 steps"
    assert dialog.train_for.note.text().startswith("Stops by Sat 18:00 (UTC+0100), 22 h 30 min from now")
    with qtbot.waitSignal(dialog.accepted, timeout=5000):
        assert dialog.try_submit()
    assert farm.submitted[0].train.time_budget == "2026-11-28T18:00+01:00"


def test_until_stops_improving_sends_stop_when_flat_with_the_default_window(dialog):
    dialog.train_for.set_mode(FLAT)
    dialog.steps_spin.setValue(50_000)
    assert _train_argv(dialog) == ["--steps", "50000", "--stop-when-flat", "0.05"]
    train = dialog.build_job().train
    assert (train.stop_when_flat, train.flat_window, train.time_budget) == (0.05, 500, "")
    assert not dialog.train_for.time_edit.isVisibleTo(dialog.train_for)
    assert "cap" in dialog.steps_spin.toolTip() and "0.05 dB" in dialog.train_for.note.text()


def test_back_to_n_steps_drops_the_other_modes_arguments(dialog):
    dialog.train_for.set_mode(UNTIL)
    dialog.train_for.set_mode(STEPS)
    assert not any(flag in _train_argv(dialog) for flag in NEW_FLAGS)
    assert "cap" not in dialog.steps_spin.toolTip() and dialog.steps_spin.prefix() == ""


# ------------------------------------------------------------------------------- the Runs panel
@pytest.fixture
def panel(qtbot, controller):
    widget = RunsPanel(controller)
    widget.clock = lambda: T0
    qtbot.addWidget(widget)
    yield widget
    widget.shutdown()


T0 = 1_800_000_000.0  # the panel's fixed clock [s since the epoch]


def _run(tmp_path: Path, name: str, state: str = "running", budget: dict | None = None, **config) -> str:
    """A synthetic run directory whose ``run.json`` has ``budget`` and ``config`` changes."""
    paths = write_run(tmp_path / name, steps=1000, logged_to=100, state=state)
    update_record(paths, budget=budget or {}, config={**read_record(paths).config, **config})
    return str(paths.root)


def _cell(panel: RunsPanel, run_dir: str) -> str:
    return panel.table.item(panel.row_of(run_dir), TIME_LEFT_COL).text()


def test_time_left_column(panel, controller, tmp_path):
    budget = {"text": "2h", "deadline_unix": T0 + 3900, "deadline": "2027-01-15T09:05+00:00", "stop_step": 4000}
    timed = _run(tmp_path, "timed", budget=budget, time_budget="2h")
    flat = _run(tmp_path, "flat", stop_when_flat=0.05)
    steps = _run(tmp_path, "steps")
    done = _run(tmp_path, "done", state="succeeded", budget=budget, time_budget="2h")
    for run_dir in (timed, flat, steps, done):
        controller.add_run(run_dir)
    controller.poll_now(include_farm=False)
    assert panel.table.horizontalHeaderItem(TIME_LEFT_COL).text() == "Time left"
    assert [_cell(panel, d) for d in (timed, flat, steps, done)] == ["1 h 05 min", "until flat", "", ""]
    panel.clock = lambda: T0 + 3855
    controller.poll_now(include_farm=False)  # nothing changed on disk: the poll still moves the clock on
    assert _cell(panel, timed) == "45 s"


def test_time_left_before_training_starts_reads_the_config(tmp_path):
    run = Run(str(tmp_path / "queued"))
    run.record = RunRecord.from_dict({"state": "", "config": {"time_budget": "2027-01-15T10:00+01:00"}})
    deadline = datetime(2027, 1, 15, 9, 0, tzinfo=timezone.utc).timestamp()
    assert time_left_text(run, deadline - 600) == "10 min"
    run.record = RunRecord.from_dict({"state": "", "config": {"time_budget": "30m"}})
    assert time_left_text(run, deadline) == "30 min once started"


# ------------------------------------------------------------------------------- the CueGUI plugin
def test_cuegui_summary_says_the_time_left(monkeypatch, tmp_path):
    cuegui = types.ModuleType("cuegui")
    cuegui.AbstractDockWidget = types.SimpleNamespace(AbstractDockWidget=QWidget)
    cuegui.Utils = types.SimpleNamespace(isJob=lambda obj: True)
    for name, module in (("cuegui", cuegui), ("cuegui.AbstractDockWidget", cuegui.AbstractDockWidget),
                         ("cuegui.Utils", cuegui.Utils)):
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("_cuetrain_plugin_time_left",
                                                  ROOT / "gui" / "cuegui_plugins" / "cuetrain_training_runs.py")
    plugin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plugin)
    run = Run(str(tmp_path / "timed"))
    run.record = RunRecord.from_dict({"state": "running", "budget": {"deadline_unix": T0 + 7500}})
    assert ", time left 2 h 05 min  -  " in plugin.run_summary(run, now=T0)
    assert "time left" not in plugin.run_summary(Run(str(tmp_path / "plain")), now=T0)

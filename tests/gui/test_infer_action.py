"""The Runs panel's "Apply to Shot on Farm..." action: ``cuetrain submit-infer`` out of process (issue 12).

A fake ``CUETRAIN_PYTHON`` (a shell script) records the exact argv :class:`gui.farm_process.ProcessFarm`
passes and answers like ``cuetrain submit-infer --json``; the last test runs the real command (dry run).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from qtpy.QtWidgets import QDialog

from cue_plugin.submit.templates import list_templates
from gui.controller import RunsController
from gui.farm_process import ProcessFarm
from gui.infer_dialog import InferDialog
from gui.runs_panel import INFER_ACTION, MODEL_FOLDER_ACTION, RunsPanel
from gui import actions
from tests.conftest import make_pairs

ROOT = Path(__file__).resolve().parents[2]


def _fake_python(tmp_path: Path, answer: str, code: int = 0) -> Path:
    """A stand-in for the cuetrain environment's python: writes its argv, one per line, then answers."""
    script = tmp_path / "fake-python"
    (tmp_path / "answer.json").write_text(answer)
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/argv.txt"\n'
                      f'cat "{tmp_path}/answer.json"\necho "farm says no" >&2\nexit {code}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


@pytest.fixture
def panel_with_run(qtbot, tmp_path, settings, monkeypatch):
    """A panel whose controller uses the real ProcessFarm, following one run submitted as show s, shot sh."""
    controller = RunsController(lambda: ProcessFarm(timeout_s=60), settings, poll_interval_ms=50)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    controller.add_run(str(run_dir), job={"show": "s", "shot": "sh", "user": "u"})
    panel = RunsPanel(controller)
    qtbot.addWidget(panel)
    panel.select_run(controller.runs()[0].run_dir)
    yield panel, run_dir
    controller.shutdown()


def _accepting_dialog(panel: RunsPanel, run_dir: str, values: tuple[str, str, int],
                      chunk: int | None = None) -> InferDialog:
    dialog = InferDialog(run_dir, panel)
    dialog.input_edit.setText(values[0])
    dialog.output_edit.setText(values[1])
    dialog.template_box.setCurrentIndex(values[2])
    if chunk is not None:
        dialog.chunk_box.setValue(chunk)
    dialog.exec = lambda: QDialog.DialogCode.Accepted  # the artist pressed OK
    return dialog


def test_apply_to_shot_runs_submit_infer_with_the_exact_arguments(qtbot, tmp_path, panel_with_run, monkeypatch):
    panel, run_dir = panel_with_run
    button = panel.buttons[INFER_ACTION]
    assert not button.isEnabled()  # no model.pt yet
    (run_dir / "model.pt").write_bytes(b"torchscript")
    panel.select_run(str(run_dir))
    panel._update_buttons()
    assert button.isEnabled()

    answer = {"submitted": {"job_id": "j-1", "job_name": "s-sh-u_cuetrain_infer_out", "run_dir": ""}, "frames": 3}
    python = _fake_python(tmp_path, json.dumps(answer))
    monkeypatch.setenv("CUETRAIN_PYTHON", str(python))
    template = list_templates()[0]
    panel.make_infer_dialog = lambda rd: _accepting_dialog(panel, rd, ("/shots/plates", "/shots/out", 1), chunk=25)
    assert panel.make_infer_dialog(str(run_dir)).values() == ("/shots/plates", "/shots/out", template, 25)
    button.click()
    qtbot.waitUntil(lambda: "submitted inference job" in panel.message.text(), timeout=30000)
    assert "s-sh-u_cuetrain_infer_out" in panel.message.text()
    argv = (tmp_path / "argv.txt").read_text().splitlines()
    assert argv == ["-m", "cuetrain", "submit-infer", "--model", os.path.join(str(run_dir), "model.pt"),
                    "--input", "/shots/plates", "--output", "/shots/out", "--template", template,
                    "--chunk", "25", "--show", "s", "--shot", "sh", "--json"]
    assert panel.controller.run(str(run_dir)).handle is None  # the inference job does not replace the run's job


def test_apply_to_shot_shows_the_farm_error_in_red(qtbot, tmp_path, panel_with_run, monkeypatch):
    panel, run_dir = panel_with_run
    (run_dir / "model.pt").write_bytes(b"torchscript")
    monkeypatch.setenv("CUETRAIN_PYTHON", str(_fake_python(tmp_path, '{"error": "no such show s"}', code=2)))
    panel.make_infer_dialog = lambda rd: _accepting_dialog(panel, rd, ("/in", "/out", 0))
    panel._update_buttons()
    panel.buttons[INFER_ACTION].click()
    qtbot.waitUntil(lambda: "no such show s" in panel.message.text(), timeout=30000)
    assert "e05050" in panel.message.styleSheet()
    argv = (tmp_path / "argv.txt").read_text().splitlines()
    assert "--template" not in argv  # "(defaults)" passes no template
    assert argv[argv.index("--chunk") + 1] == "10"  # the dialog's default chunk, as cuetrain's


def test_the_chunk_field_starts_at_the_default_and_refuses_zero(qtbot, tmp_path):
    dialog = InferDialog(str(tmp_path))
    qtbot.addWidget(dialog)
    assert dialog.values()[3] == 10
    dialog.chunk_box.setValue(0)  # below the range: Qt clamps to the minimum, a chunk of 0 frames cannot be asked
    assert dialog.values()[3] == 1
    dialog.chunk_box.setValue(40)
    assert dialog.values()[3] == 40


def _dry_run_layers(tmp_path: Path, frames: int, *extra: str) -> tuple[Path, list[ElementTree.Element]]:
    """``cuetrain submit-infer --dry-run --json`` on ``frames`` 16x16 input frames and a stand-in model.pt, with
    ``extra`` arguments; returns the model path and the spec's layer elements."""
    inp, _ = make_pairs(tmp_path / "shot", frames=frames, height=16, width=16)
    model = tmp_path / "run" / "model.pt"
    model.parent.mkdir()
    model.write_bytes(b"torchscript")
    out = subprocess.run([sys.executable, "-m", "cuetrain", "submit-infer", "--model", str(model), "--input",
                          str(inp), "--output", str(tmp_path / "out"), *extra, "--show", "s", "--shot", "sh",
                          "--dry-run", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         check=True).stdout
    spec = json.loads(out.strip().splitlines()[-1])["spec"]
    return model, ElementTree.fromstring(spec).findall("./job/layers/layer")


def test_the_chunk_reaches_the_built_inference_spec(tmp_path):
    _, layers = _dry_run_layers(tmp_path, 5, "--chunk", "2")
    assert layers[0].findtext("chunk") == "2"


def test_model_files_and_open_model_folder(qtbot, panel_with_run, monkeypatch):
    panel, run_dir = panel_with_run
    button = panel.buttons[MODEL_FOLDER_ACTION]
    panel._update_buttons()
    assert not button.isEnabled()
    assert "model.pt ✗ (missing)" in panel.model_files_label.text()
    (run_dir / "model.pt").write_bytes(b"torchscript")
    (run_dir / "model_nuke.nk").write_text("CatFileCreator {}\n")
    panel._update_buttons()
    text = panel.model_files_label.text()
    assert "model.pt ✓" in text and "model_nuke.nk ✓" in text
    assert "model.onnx ✗ (missing)" in text and "model.json ✗ (missing)" in text
    opened: list[str] = []
    monkeypatch.setattr(actions, "open_folder", lambda path: opened.append(path) or True)
    assert button.isEnabled()
    button.click()
    assert opened == [str(run_dir)]


def test_submit_infer_dry_run_json_is_a_spec_with_the_infer_layer(tmp_path):
    model, layers = _dry_run_layers(tmp_path, 3)
    assert [(layer.get("name"), layer.findtext("range")) for layer in layers] == [("infer", "1001-1003")]
    assert f"--model {model}" in layers[0].findtext("cmd")

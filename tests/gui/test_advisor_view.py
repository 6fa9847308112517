"""The submit dialog's "How many machines?" section: the advisor runs in its own process (QProcess).

Stub scripts stand in for ``cuetrain advise`` (table, table + JSON line, failure, a probe that hangs); one
test runs the real advisor on a tiny data set.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap

import pytest

from gui.advisor_view import AdviseRequest, AdvisorView, default_command, error_line, parse_recommendation
from gui.submit_dialog import SubmitDialog
from tests.conftest import make_pairs
from tests.gui.test_advisor_chart import advice

TABLE = """\
model small (169,843 parameters), crop 64 px, global batch 8, gradient compression none
link: 10 Gb/s, 100 us per hop (stated; 'cuetrain advise link' measures it); one 2-rank gradient sync: 0.74 ms

ranks crops/rank |      sync 1       |      sync 2       |      sync 4       |      sync 8
                 |  images/s    eff  |  images/s    eff  |  images/s    eff  |  images/s    eff
-------------------------------------------------------------------------------------------------
    1          8 |      80.1   1.00  |      82.0   1.02  |      83.1   1.04  |      83.5   1.04
    2          4 |     150.2   0.94  |     158.3   0.99  |     162.0   1.01  |     164.1   1.02
    4          2 |     270.4   0.84  |     296.0   0.92  |     310.9   0.97 *|     318.2   0.99
    8          1 |     380.7   0.59  |     470.5   0.73  |     540.2   0.84  |     590.1   0.92

recommended: 4 rank(s), sync interval 4: 310.9 images/s, 3.88x one rank, efficiency 0.97 (fewest ranks within 5% \
of the best setting with efficiency >= 0.7)
at sync interval 1 (the effective batch you chose): 4 rank(s), 270.4 images/s, efficiency 0.84
"""


def _stub(tmp_path, body: str) -> list[str]:
    script = tmp_path / "advise_stub.py"
    script.write_text("import sys, time\n" + textwrap.dedent(body))
    return [sys.executable, str(script)]


def _dialog(qtbot, controller, tmp_path, command: list[str] | None, **data) -> SubmitDialog:
    dialog = SubmitDialog(controller, template_folders=[], advisor_command=command)
    qtbot.addWidget(dialog)
    if not data:
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "gt").mkdir(exist_ok=True)
        data = {"input": tmp_path / "in", "target": tmp_path / "gt"}
    dialog.input_edit.setText(str(data["input"]))
    dialog.target_edit.setText(str(data["target"]))
    return dialog


def test_parse_recommendation_reads_the_advisors_line():
    rec = parse_recommendation(TABLE)
    assert (rec.world_size, rec.sync_interval) == (4, 4) and rec.line.startswith("recommended: 4 rank(s)")
    assert rec.line.endswith("efficiency >= 0.7)")
    assert parse_recommendation("  Recommended: 1 rank, sync interval 16: 30.0 images/s").sync_interval == 16
    assert parse_recommendation(TABLE.replace("recommended:", "advised:")) is None
    assert error_line("Traceback ...\n  File x\ntrainer.data.images.DataError: no frames in /in\n\n", 1) == \
        "trainer.data.images.DataError: no frames in /in"
    assert error_line("", 3) == "the advisor exited with code 3"


def test_request_arguments_are_the_cli_flags():
    args = AdviseRequest("/in", "/gt", "small", 64, 8, 1000, max_world_size=16, bandwidth_gbps=25).arguments()
    assert args == ["--input", "/in", "--target", "/gt", "--model-size", "small", "--crop-size", "64",
                    "--batch-size", "8", "--steps", "1000", "--max-world-size", "16", "--bandwidth-gbps", "25",
                    "--progress", "json", "--json"]
    assert default_command()[1:] == ["-m", "cuetrain", "advise"]
    with_noise = AdviseRequest("/in", "/gt", "small", 64, 8, 1000, noise_scale=4.5)
    assert with_noise.arguments()[-3:] == ["--noise-scale", "4.5", "--json"]
    # the quality probe measures the critical batch now, in place of an earlier run's noise scale
    probe = dataclasses.replace(with_noise, quality_probe=True).arguments()
    assert probe[-2:] == ["--quality-probe", "--json"] and "--noise-scale" not in probe


def test_advisor_shows_table_and_uses_recommendation(qtbot, controller, tmp_path):
    command = _stub(tmp_path, f"""
        open(sys.argv[0] + ".args", "w").write(" ".join(sys.argv[1:]))
        print({TABLE!r})
        """)
    dialog = _dialog(qtbot, controller, tmp_path, command)
    dialog.world_spin.setValue(12)
    dialog.batch_spin.setValue(16)
    view = dialog.advisor
    assert not view.body.isVisibleTo(dialog) and not view.use_button.isEnabled()
    view.bandwidth_spin.setValue(25)
    with qtbot.waitSignal(view.runner.probe_finished, timeout=10_000):
        assert view.advise()
        assert view.status.text().startswith("probing") and not view.advise_button.isEnabled()
    assert view.body.isVisibleTo(dialog) and view.advise_button.isEnabled() and not view.cancel_button.isEnabled()
    assert "    4          2 |     270.4   0.84" in view.table.toPlainText() and view.table.isReadOnly()
    # the tables sit folded under Details; this advisor printed no --json line, so no chart: a placeholder says so
    assert not view.table.isVisibleTo(dialog) and not view.details_button.isChecked()
    assert view.chart.placeholder.text().startswith("No chart: the advisor printed no JSON line")
    assert view.chart.placeholder.isVisibleTo(dialog) and not view.chart.plots.isVisibleTo(dialog)
    view.details_button.click()
    assert view.table.isVisibleTo(dialog) and view.table.toPlainText().startswith("model small")
    view.details_button.click()
    assert not view.table.isVisibleTo(dialog)
    assert view.recommended_label.text().startswith("recommended: 4 rank(s), sync interval 4: 310.9 images/s")
    assert view.status.text() == ""
    args = (tmp_path / "advise_stub.py.args").read_text()
    assert f"--input {tmp_path / 'in'} --target {tmp_path / 'gt'}" in args
    assert "--batch-size 16" in args and "--max-world-size 12" in args and "--bandwidth-gbps 25" in args
    assert "--quality-probe" not in args
    view.quality_box.setChecked(True)  # "Time to quality": the advisor trains its short probes too
    with qtbot.waitSignal(view.runner.probe_finished, timeout=10_000):
        assert view.advise()
        assert "short trainings at 1x, 4x and 16x the batch" in view.status.text()
    assert "--quality-probe" in (tmp_path / "advise_stub.py.args").read_text()
    view.use_button.click()
    assert (dialog.world_spin.value(), dialog.sync_spin.value()) == (4, 4)


def test_advisor_json_is_charted_with_one_sentence(qtbot, tmp_path):
    """The --json line's predictions become the chart (gui.advisor_chart); the tables stay under Details."""
    line = json.dumps(advice((4, 1), recommendation_basis="Measured by the quality probe."))
    command = _stub(tmp_path, f"print({TABLE!r})\nprint({line!r})\n")
    view = AdvisorView(lambda: AdviseRequest("/in", "/gt", "small", 64, 8, 3600), command)
    qtbot.addWidget(view)
    view.show()
    assert view.chart.placeholder.isVisibleTo(view.chart) and view.chart.placeholder.text().startswith("Advise… charts")
    with qtbot.waitSignal(view.runner.probe_finished, timeout=10_000):
        assert view.advise()
    assert view.chart.plots.isVisible() and not view.chart.placeholder.isVisible()
    x, hours = view.chart.time_curve.getData()  # 3,600 steps of 1 s on 1 rank / time-to-quality speedup
    assert list(x) == [1, 2, 4, 8] and list(hours) == pytest.approx([1.0, 1 / 1.8, 0.4, 1 / 2.6])
    assert list(view.chart.farm_curve.getData()[1]) == pytest.approx([1.0, 2 / 1.8, 1.6, 8 / 2.6])
    assert view.chart.time_line.value() == 4 == view.recommendation.world_size
    assert view.chart.sentence.isVisible() and view.chart.sentence.text() == (
        "4 ranks: a model as good as 3,600 steps on 1 rank, in 0.4 h, for 1.6 farm hours; "
        "more ranks cost more farm hours for little time saved.")
    assert view.chart.basis.text() == "Measured by the quality probe." and view.chart.basis.isVisible()
    assert not view.table.isVisible() and "270.4" in view.table.toPlainText()
    assert "{" not in view.table.toPlainText()  # the JSON line is read, not shown
    view.set_details_shown(True)
    assert view.table.isVisible() and view.details_button.isChecked()
    with qtbot.waitSignal(view.runner.probe_finished, timeout=10_000):  # a new probe clears the old chart first
        assert view.advise()
        assert view.chart.series is None and view.chart.placeholder.isVisible()
    assert view.chart.series is not None


def test_advisor_failure_is_shown_inline(qtbot, controller, tmp_path):
    command = _stub(tmp_path, """
        print("Traceback (most recent call last):", file=sys.stderr)
        print("trainer.data.images.DataError: crop 512 px is larger than the frames (48x40)", file=sys.stderr)
        sys.exit(1)
        """)
    dialog = _dialog(qtbot, controller, tmp_path, command)
    view = dialog.advisor
    with qtbot.waitSignal(view.runner.probe_failed, timeout=10_000):
        view.advise_button.click()
    assert view.status.text() == "Advisor failed: trainer.data.images.DataError: crop 512 px is larger than the frames (48x40)"
    assert view.table.toPlainText() == "" and not view.use_button.isEnabled() and view.advise_button.isEnabled()
    assert view.chart.series is None and view.chart.placeholder.isVisibleTo(dialog)
    dialog.world_spin.setValue(3)
    view.use_recommendation()
    assert dialog.world_spin.value() == 3  # nothing to use


def test_advisor_needs_the_data_folders_and_can_be_cancelled(qtbot, controller, tmp_path):
    command = _stub(tmp_path, "time.sleep(60)\n")
    dialog = _dialog(qtbot, controller, tmp_path, command, input="", target=tmp_path)
    view = dialog.advisor
    assert not view.advise()
    assert view.status.text().startswith("Input sequence folder is needed first") and not view.runner.is_running()
    dialog.input_edit.setText(str(tmp_path))
    assert view.advise() and view.runner.is_running() and view.cancel_button.isEnabled()
    with qtbot.waitSignal(view.runner.probe_cancelled, timeout=1000):
        view.cancel_button.click()
    assert not view.runner.is_running() and view.status.text() == "probe cancelled" and view.advise_button.isEnabled()
    assert view.advise() and view.runner.is_running()
    dialog.reject()  # closing the dialog stops the probe
    assert not view.runner.is_running()


def test_failed_start_is_shown_inline(qtbot, tmp_path):
    view = AdvisorView(lambda: AdviseRequest("/in", "/gt", "small", 64, 8, 100), [str(tmp_path / "no-python")])
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.runner.probe_failed, timeout=10_000):
        view.advise()
    assert view.status.text().startswith(f"Advisor failed: cannot start {tmp_path / 'no-python'}")
    assert view.advise_button.isEnabled()


def test_progress_records_cross_as_data_to_the_progress_bar(qtbot, tmp_path):
    """``--progress json`` lines drive the QProgressBar while the probe runs and never reach the tables; the JSON's
    confidence statement is shown under the recommendation, marked when the budget cut the probe short."""
    from gui.advisor_output import parse_progress

    rec = {"progress": {"phase": "steps", "label": "timing training steps", "done": 3, "total": 12,
                        "elapsed_s": 4.0, "budget_s": 90.0}}
    got = parse_progress(json.dumps(rec))
    assert (got.phase, got.done, got.total, got.budget_s) == ("steps", 3, 12, 90.0)
    assert parse_progress(TABLE.splitlines()[0]) is None and parse_progress('{"progress": {"done": "x"}}') is None
    statement = "the 5 s budget cut the probe short: measured 2 of 5 world sizes' batches; the answer is rough"
    line = json.dumps(advice((4, 1), confidence={"level": "rough", "truncated": True, "statement": statement}))
    records = [json.dumps({"progress": {**rec["progress"], "done": d}}) for d in (1, 2, 3)]
    # the stub waits for a go file between records, so the test sees the bar move while the probe still runs
    command = _stub(tmp_path, f"""
        import os
        for r in {records!r}:
            print(r, flush=True)
            while not os.path.exists(sys.argv[0] + ".go"):
                time.sleep(0.02)
            os.remove(sys.argv[0] + ".go")
        print({TABLE!r})
        print({line!r})
        """)
    go = tmp_path / "advise_stub.py.go"
    view = AdvisorView(lambda: AdviseRequest("/in", "/gt", "small", 64, 8, 3600), command)
    qtbot.addWidget(view)
    view.show()
    with qtbot.waitSignal(view.runner.probe_finished, timeout=20_000):
        assert view.advise()
        assert view.progress_bar.isVisible() and view.progress_bar.maximum() == 0  # busy before the first record
        for done in (1, 2, 3):
            qtbot.waitUntil(lambda d=done: view.progress_bar.value() == d, timeout=10_000)
            assert view.progress_bar.maximum() == 12 and "timing training steps" in view.progress_bar.format()
            assert "of 90 s" in view.progress_bar.format()
            go.write_text("")
    assert not view.progress_bar.isVisible()
    assert '"progress"' not in view.table.toPlainText() and "270.4" in view.table.toPlainText()
    assert view.recommendation.world_size == 4
    assert view.confidence_label.isVisible() and view.confidence_label.text() == f"How sure: {statement}"
    assert "color" in view.confidence_label.styleSheet()  # a rough answer is marked


@pytest.mark.timeout(120)
def test_real_advisor_recommends(qtbot, tmp_path):
    inp, tgt = make_pairs(tmp_path / "data")
    request = AdviseRequest(str(inp), str(tgt), "small", crop_size=16, batch_size=2, steps=10, max_world_size=2)
    view = AdvisorView(lambda: request, default_command() + ["--warmup", "1", "--iters", "2"])
    qtbot.addWidget(view)
    with qtbot.waitSignal(view.runner.probe_finished, timeout=60_000):
        assert view.advise()
    rows = [line.split("|")[0].split() for line in view.table.toPlainText().splitlines() if line[:5].strip().isdigit()]
    assert [r[0] for r in rows] == ["1", "2"]
    assert view.recommendation is not None and view.recommendation.world_size in (1, 2)
    assert view.recommended_label.text().startswith("recommended: ") and view.use_button.isEnabled()
    assert '"predictions"' not in view.table.toPlainText()  # the --json line is read, not shown
    assert [int(n) for n in view.chart.time_curve.getData()[0]] == [1, 2]  # and charted, one point per world size
    assert view.chart.time_line.value() == view.recommendation.world_size
    assert view.chart.sentence.text().startswith(f"{view.recommendation.world_size} rank")
    assert view.confidence_label.text().startswith("How sure: measured ")  # the real advisor's statement

"""gui.poller and gui.records: incremental reads, partial lines, sheets, run.json, series, decimation."""

from __future__ import annotations

import json
import math
import os

import numpy as np

from cue_plugin.submit.spec import JobStatus, RunState
from gui.poller import RunPoller, rows_to_columns
from gui.records import MetricSeries, Run, decimate, format_duration, retry_plan
from gui.synthetic import add_sheet, metrics_rows, write_run
from trainer.record.rundir import append_metrics
from trainer.record.runrecord import update_record


def test_first_poll_reads_everything_then_only_new(tmp_path):
    paths = write_run(tmp_path / "run", steps=1000, logged_to=500, sheet_interval=250)
    poller = RunPoller(paths.root)
    first = poller.poll()
    assert first.new_rows == 50 and first.metrics["step"][-1] == 500
    assert [s for s, _ in first.new_sheets] == [250, 500]
    assert first.record.config["steps"] == 1000 and first.error == ""
    again = poller.poll()
    assert not again.changed
    append_metrics(paths, metrics_rows(510, 600))
    add_sheet(paths, 750)
    third = poller.poll()
    assert list(third.metrics["step"]) == list(range(510, 601, 10))
    assert [s for s, _ in third.new_sheets] == [750] and third.record is None


def test_partial_last_line_waits_for_its_newline(tmp_path):
    paths = write_run(tmp_path / "run", steps=100, logged_to=20)
    poller = RunPoller(paths.root)
    assert poller.poll().new_rows == 2
    line = json.dumps({"step": 30, "loss": 0.5, "lr": 1e-3, "images_per_s": 10.0, "wall_s": 3.0})
    with open(paths.metrics, "a") as fh:
        fh.write(line[:15])  # the trainer is mid-write
    assert poller.poll().new_rows == 0
    with open(paths.metrics, "a") as fh:
        fh.write(line[15:] + "\n")
    res = poller.poll()
    assert list(res.metrics["step"]) == [30.0] and res.metrics["loss"][0] == 0.5


def test_restarted_metrics_are_reported_as_reset(tmp_path):
    paths = write_run(tmp_path / "run", steps=100, logged_to=50)
    poller = RunPoller(paths.root)
    poller.poll()
    os.remove(paths.metrics)
    append_metrics(paths, metrics_rows(10, 20))
    res = poller.poll()
    assert res.reset and list(res.metrics["step"]) == [10.0, 20.0]


def test_missing_run_dir_and_changed_run_json(tmp_path):
    poller = RunPoller(tmp_path / "not-yet")
    res = poller.poll()
    assert not res.changed and "does not exist yet" in res.error
    paths = write_run(tmp_path / "not-yet", steps=100, logged_to=10)
    assert poller.poll().record.state == "running"
    update_record(paths, state="succeeded")
    assert poller.poll().record.state == "succeeded"


def test_rows_to_columns_tolerates_missing_and_bad_values():
    cols = rows_to_columns([{"step": 1, "loss": 0.5}, {"loss": 1.0}, {"step": 2, "loss": "x", "lr": None}])
    assert list(cols["step"]) == [1.0, 2.0]
    assert cols["loss"][0] == 0.5 and math.isnan(cols["loss"][1]) and math.isnan(cols["lr"][0])


def test_metric_series_grows_and_decimates():
    series = MetricSeries()
    for start in range(0, 100_000, 5000):
        steps = np.arange(start, start + 5000, dtype=float)
        series.extend({"step": steps, "loss": 1.0 / (1.0 + steps), "lr": steps * 0, "images_per_s": steps * 0,
                       "wall_s": steps * 0.1})
    assert len(series) == 100_000 and series.last("step") == 99_999
    x, y = decimate(series.view("step"), series.view("loss"), 2000)
    assert len(x) <= 2001 and x[-1] == 99_999 and y[-1] == series.last("loss")
    assert np.all(np.diff(x) > 0)


def test_run_record_state_eta_and_retry_plan(tmp_path):
    run = Run(str(tmp_path / "r"))
    poller = RunPoller(write_run(run.run_dir, steps=1000, logged_to=500).root)
    res = poller.poll()
    run.adopt_record(res.record)
    run.metrics.extend(res.metrics)
    assert (run.step, run.total_steps, run.state, run.ranks_text) == (500, 1000, "running", "-/4")
    assert math.isclose(run.eta_s(), 500 * 0.066, rel_tol=1e-6) and format_duration(run.eta_s()) == "33s"
    run.status = JobStatus(RunState.CANCELLED, 0, 4)
    assert run.state == "cancelled" and run.is_finished
    run.job = {"show": "demo", "shot": "sh010", "user": "artist", "world_size": 4, "tags": ["gpu"]}
    mode, job = retry_plan(run)
    assert mode == "resume" and job.train.resume and job.tags == ("gpu",) and job.world_size == 4

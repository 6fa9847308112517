"""The GUI's farm runs out of process: ``cuetrain ... --json`` subprocesses of CUETRAIN_PYTHON.

The end-to-end test starts a GUI process (tests/gui/dcc_session.py) next to the Cuebot double, submits from
the dialog, describes and cancels, and checks that the GUI process never imported grpc, opencue,
outline or torch (the pytest process itself has imported them, so the check needs its own process).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cue_plugin.submit import jsonout
from cue_plugin.submit.spec import FarmError, InferenceLayer, JobHandle, JobStatus, RunState, TrainingJob
from gui.advisor_view import parse_output
from gui.farm_process import ProcessFarm, cuetrain_command
from tests.conftest import CHILD_PYTHONPATH, make_pairs
from tests.cuebot.double import CuebotDouble
from trainer.core.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]


def test_jobs_and_statuses_survive_the_json_round_trip(tmp_path):
    job = TrainingJob(train=TrainConfig(input_dir="/in", target_dir="/gt", run_dir=str(tmp_path)), world_size=3,
                      show="s", shot="sh", user="u", tags=("gpu", "a100"), extra_env={"A": "1"})
    assert jsonout.job_from_json(jsonout.job_to_json(job)) == job
    infer = InferenceLayer(model=f"{tmp_path}/model.pt", input_dir="/plates", output_dir="/out", frames=(1, 2, 5), chunk=2)
    with_infer = dataclasses.replace(job, infer=infer)
    assert jsonout.job_from_json(jsonout.job_to_json(with_infer)) == with_infer  # the submit dialog's infer layer
    status = JobStatus(RunState.RUNNING, 1, 3, "IN_PROGRESS", {"0": {"state": "RUNNING", "host": "n1"}})
    assert jsonout.status_from(json.loads(json.dumps(jsonout.status_dict(status)))) == status
    with pytest.raises(FarmError, match="not a cuetrain job"):
        jsonout.job_from_json('{"train": {}, "colour": 1}')


def test_advisor_json_line_is_read_and_not_shown():
    out = 'table\nrecommended: 9 rank(s), sync interval 9: text\n{"recommended": {"world_size": 3, ' \
          '"sync_interval": 2, "line": "recommended: 3 rank(s), sync interval 2"}, "predictions": []}\n'
    text, rec = parse_output(out)
    assert (rec.world_size, rec.sync_interval) == (3, 2) and not text.rstrip().endswith("}")


def test_a_missing_cuetrain_environment_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CUETRAIN_PYTHON", str(tmp_path / "nowhere" / "python"))
    assert cuetrain_command("status")[0] == str(tmp_path / "nowhere" / "python")
    with pytest.raises(FarmError, match="set CUETRAIN_PYTHON"):
        ProcessFarm().describe(JobHandle("id", "", ""))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_dialog_submits_describes_and_cancels_without_importing_the_farm_stack(tmp_path):
    inp, tgt = make_pairs(tmp_path / "data", frames=2)
    shim = tmp_path / "cuetrain-python"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} {ROOT / 'tests/gui/cuetrain_env_shim.py'} \"$@\"\n")
    shim.chmod(0o755)
    run_dir = tmp_path / "dcc"
    with CuebotDouble() as cuebot:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "USER": "trainer",
               "LOGNAME": "trainer", "CUEBOT_HOSTS": cuebot.address, "CUETRAIN_PYTHON": str(shim),
               "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": CHILD_PYTHONPATH}
        proc = subprocess.run([sys.executable, "-m", "tests.gui.dcc_session", str(inp), str(tgt), str(run_dir)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=200)
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        jobs = cuebot.jobs()
    assert seen["submit_started"] and seen["busy_text"] == "Submitting...", seen
    assert seen["failed"] == [] and seen["finished"] == ["cuetrain-sh010-trainer_cuetrain_dcc"], seen
    assert any("starting cuetrain" in line for line in seen["progress"]) and not seen["dialog_visible"], seen
    assert [job.name for job in jobs] == ["cuetrain-sh010-trainer_cuetrain_dcc"] and len(jobs[0].frames) == 2
    assert seen["state_before"] == "pending" and seen["ranks_before"] == "0/2", seen
    assert seen["acted"] == ["cancelled job cuetrain-sh010-trainer_cuetrain_dcc"], seen
    assert seen["state_after"] == "cancelled" and seen["farm_error"] == "", seen
    assert seen["imported"] == []  # the GUI process never loaded pycue, grpc, pyoutline or torch
    assert "NumPy" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-3000:]


def test_cli_json_answers_retry_and_errors(capsys, monkeypatch):
    import io

    from cue_plugin.submit import cli
    from tests.gui.conftest import RetryFarm

    farm = RetryFarm()
    assert cli.main(["retry", "job-name", "--json"], farm=farm) == 0
    assert json.loads(capsys.readouterr().out) == {"retried": 1, "job": {"job_id": "", "job_name": "job-name",
                                                                        "run_dir": ""}}
    monkeypatch.setattr("sys.stdin", io.StringIO("{}"))
    assert cli.main(["submit", "--job-json", "-", "--json"], farm=farm) == 2  # no "train": not a job
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "FarmError" and "not a cuetrain job" in out["error"]

"""The "Training Runs" CueGUI plugin, in real CueGUI (its own environment, offscreen), against the Cuebot
double with a real 2-rank cuetrain job that two real RQDs ran (one frame per rank).

CueGUI loads the plugin through its plugin paths (``Plugin_Paths``), the test clicks the job in CueGUI's
job monitor, and the dock must show the run's loss curve, its latest contact sheet and both rank frames.
Screenshots: docs/cuegui_job.png, docs/cuegui_frames.png, docs/cuegui_training_runs.png with
CUETRAIN_UPDATE_DOCS=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from cue_plugin.submit import templates
from cue_plugin.submit.opencue_farm import OpenCueFarm
from tests.conftest import CHILD_PYTHONPATH, make_pairs
from tests.cuebot.cuegui_setup import CUEGUI_PYTHON, run_cuegui_app
from tests.cuebot.double import CuebotDouble
from tests.cuebot.fixtures import RQD_START_TIMEOUT_S, free_port, frame_identity
from tests.cuebot.rqd_harness import RqdProcess
from trainer.core.config import TrainConfig
from trainer.record.rundir import RunPaths

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


@pytest.fixture
def training_farm(tmp_path):
    """The double and two RQDs that run frames as this user (as tests/cue_plugin/test_e2e_training.py)."""
    if not os.path.exists("/usr/bin/time"):
        pytest.fail("RQD runs frames through /usr/bin/time (Debian package 'time'; .ci/run installs it)")
    (tmp_path / "logs").mkdir()
    identity = frame_identity()
    cuebot = CuebotDouble(frame_uid=identity.uid, frame_gid=identity.gid, frame_user=identity.user,
                          log_root=str(tmp_path / "logs"))
    cuebot.start()
    rqds = [RqdProcess(cuebot.port, free_port(), f"rqd{i}", tmp_path / f"rqd{i}", become_job_user=False)
            for i in range(2)]
    try:
        for rqd in rqds:
            rqd.spawn()
        for rqd in rqds:
            rqd.wait_ready(RQD_START_TIMEOUT_S)
        yield cuebot
    finally:
        for rqd in rqds:
            rqd.stop()
        cuebot.stop()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_training_runs_plugin_shows_loss_sheet_and_rank_frames(training_farm, tmp_path):
    inp, tgt = make_pairs(tmp_path / "data")
    run = RunPaths.of(tmp_path / "flowers")
    cfg = TrainConfig(input_dir=str(inp), target_dir=str(tgt), run_dir=str(run.root), steps=40, batch_size=2,
                      crop_size=16, log_interval=2, checkpoint_interval=20, contact_sheet_interval=20)
    extra = {"PYTHONPATH": CHILD_PYTHONPATH, "OMP_NUM_THREADS": "1", "CUETRAIN_MAIN_HOST": "127.0.0.1",
             "CUEBOT_HOSTS": training_farm.address}
    job = templates.make_job(cfg, template="cpu-test", world_size=2, show="cuetrain", shot="sh010",
                             user="trainer", extra_env=extra, rendezvous_timeout_s=60, max_retries=0)
    cue = OpenCueFarm(hosts=[training_farm.address], allow_root=True)
    handle = cue.submit(job)
    deadline = time.monotonic() + 150
    while cue.describe(handle).native_state != "FINISHED" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cue.describe(handle).state.value == "succeeded", cue.describe(handle)

    shots = DOCS if os.environ.get("CUETRAIN_UPDATE_DOCS") == "1" else tmp_path
    shown = run_cuegui_app(training_farm.address, handle.job_id, shots, plugin=True, timeout_s=75,
                           wait=['["0", "SUCCEEDED"', '["1", "SUCCEEDED"', "step_000040.png", "succeeded, step 40/40"])
    assert shown["shown"], (shown.get("plugin"), shown["stderr"][-3000:])
    plugin = shown["plugin"]
    assert plugin["docked"] and plugin["curves"] == [str(run.root)] and plugin["points"] == 20  # steps 2..40
    assert plugin["sheet"] == str(run.contact_sheet(40))
    assert [row[:2] for row in plugin["ranks"]] == [["0", "SUCCEEDED"], ["1", "SUCCEEDED"]]
    assert plugin["label"].startswith(handle.job_name) and "ranks 0/2" in plugin["label"]
    assert "1x, start: random" in plugin["label"]  # same size, random weights (gui.upres)
    assert sorted(row[3] for row in shown["frames"]) == ["SUCCEEDED", "SUCCEEDED"]  # one frame per rank
    assert "NumPy" not in shown["stderr"] and "Traceback" not in shown["stderr"], shown["stderr"][-3000:]


#: Runs in CueGUI's environment: the dock, in a bare main window, shows each (run directory, run.json) it is
#: handed (as a poll would: ``run_updated``); prints ``[[label, tooltip], ...]``.
_SHOW_RECORDS = """
import json, sys
from qtpy.QtWidgets import QMainWindow
from tests.cuebot.cuegui_setup import cuegui_application
from gui.cuegui_plugins.cuetrain_training_runs import TrainingRunsDockWidget
from trainer.record.runrecord import RunRecord

app = cuegui_application()
dock = TrainingRunsDockWidget(QMainWindow(), farm_factory=lambda: None)
shown = []
for run_dir, record in json.loads(sys.argv[1]):
    dock.run_dir = dock.controller.add_run(run_dir).run_dir
    dock.controller.run(run_dir).record = RunRecord.from_dict(record)
    dock.controller.run_updated.emit(dock.run_dir)
    shown.append([dock.job_label.text(), dock.job_label.toolTip()])
print(json.dumps(shown))
"""


def _plugin_shows(runs: list[tuple[str, dict]], tmp_path: Path) -> list[list[str]]:
    """The dock's label and its tooltip for each ``(run directory, run.json object)``, in real CueGUI."""
    if not CUEGUI_PYTHON.exists():
        pytest.fail(f"{CUEGUI_PYTHON} is missing: run scripts/setup.sh (it makes CueGUI's environment)")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": CHILD_PYTHONPATH}
    proc = subprocess.run([str(CUEGUI_PYTHON), "-c", _SHOW_RECORDS, json.dumps(runs)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(90)
def test_training_runs_plugin_shows_upres_factor_and_head_start(tmp_path):
    source = {"path": "/runs/shot010_v1/checkpoints/step_000100.pt", "kind": "checkpoint", "step": 100,
              "weights": "/runs/shot010_v1/checkpoints/step_000100.pt", "run": "shot010_v1"}
    runs = [(str(tmp_path / "shot010_v2"), {"state": "running", "config": {"scale": 2, "steps": 400,
                                                                          "init_from": source["path"]},
                                            "init_from": source}),
            (str(tmp_path / "shot010_v3"), {"state": "running", "config": {"scale": 4, "init_from": "/runs/a"}}),
            (str(tmp_path / "shot020"), {"state": "succeeded", "config": {"scale": 1}}),
            (str(tmp_path / "old"), {"state": "succeeded", "config": {"steps": 40}}),  # before --scale: 1x
            (str(tmp_path / "new"), {})]  # nothing recorded yet
    shown = _plugin_shows(runs, tmp_path)
    labels = [label for label, _ in shown]
    assert "step 0/400" in labels[0] and "upres 2x, start: shot010_v1 step 100" in labels[0], labels[0]
    assert "upres 4x, start: a" in labels[1], labels[1]  # config.init_from before the trainer's record
    assert "1x, start: random" in labels[2] and "1x, start: random" in labels[3], labels[2:4]
    assert "-, start: -" in labels[4], labels[4]
    assert all(label.endswith(run_dir) for label, (run_dir, _) in zip(labels, runs))
    assert "kind: checkpoint" in shown[0][1] and "step: 100" in shown[0][1], shown[0][1]  # the Start tooltip
    assert shown[1][1] == "path: /runs/a" and shown[2][1] == "", shown[1:3]

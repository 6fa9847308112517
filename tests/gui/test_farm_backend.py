"""The GUI's controller with the real OpenCue backend against the Cuebot test double (no RQDs: frames
stay WAITING, which is all submit -> describe -> cancel needs), and the default backend's laziness.

Written against the controller's farm interface (``RunsController(farm_factory)``, its signals and
``Run.status``), so it holds whether the backend's calls run in this process or in a helper process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from opencue_proto import job_pb2

from cue_plugin.submit.opencue_farm import OpenCueFarm
from cue_plugin.submit.spec import JobHandle, RunState, TrainingJob
from gui.controller import RunsController
from tests.conftest import CHILD_PYTHONPATH, ROOT
from tests.cuebot.double import CuebotDouble
from tests.cuebot.fixtures import use_pycue
from trainer.core.config import TrainConfig
from trainer.record.rundir import RunPaths, read_json

pytestmark = pytest.mark.timeout(120)
SIGNAL_TIMEOUT_MS = 30_000  # worker-thread farm calls on a loaded 2-core machine


@pytest.fixture
def cuebot():
    with CuebotDouble() as double, use_pycue(double.address):  # pycue's hosts restored afterwards
        yield double


def test_gui_submit_describe_cancel_through_opencue(qtbot, qapp, settings, cuebot, tmp_path):
    run_dir = tmp_path / "denoise"
    train = TrainConfig(input_dir=str(tmp_path / "in"), target_dir=str(tmp_path / "gt"), run_dir=str(run_dir))
    job = TrainingJob(train=train, world_size=3, show="demo", shot="sh010", user="artist", name="denoise",
                      tags=("general",))
    ctl = RunsController(lambda: OpenCueFarm(allow_root=True), settings, poll_interval_ms=60_000)
    try:
        with qtbot.waitSignal(ctl.submit_finished, timeout=SIGNAL_TIMEOUT_MS) as submitted:
            ctl.submit(job)
        handle = submitted.args[0]
        [record] = cuebot.jobs()
        assert (handle.job_id, handle.job_name) == (record.id, record.name) == (record.id, "demo-sh010-artist_denoise")
        assert [f.name for f in record.frames] == ["0000-train", "0001-train", "0002-train"]  # one frame per rank
        assert record.layers[0].env["COPYCAT_WORLD_SIZE"] == "3"
        assert read_json(RunPaths.of(run_dir).run_json)["farm"]["job_id"] == record.id

        run = ctl.run(str(run_dir))
        assert run is not None and run.handle == handle
        ctl.poll_now()  # reads run.json (the backend's farm record) and describes through the backend
        assert run.farm_error == "" and run.handle == handle  # the recorded job is the submitted one
        assert (run.status.state, run.status.ranks_total, run.status.ranks_running) == (RunState.PENDING, 3, 0)
        assert run.status.native_state == "PENDING"

        with qtbot.waitSignal(ctl.action_finished, timeout=SIGNAL_TIMEOUT_MS) as acted:
            ctl.cancel(str(run_dir))
        assert acted.args == [run.run_dir, "cancelled job demo-sh010-artist_denoise"]
        assert cuebot.jobs()[0].state == job_pb2.FINISHED  # killed in Cuebot
        ctl.poll_now()
        assert run.status.state is RunState.CANCELLED and run.status.native_state == "FINISHED"
        with qtbot.waitSignal(ctl.action_finished, timeout=SIGNAL_TIMEOUT_MS):  # cancel is idempotent
            ctl.cancel(str(run_dir))
    finally:
        ctl.shutdown()


# In a fresh interpreter: make the default backend, look for a connection to Cuebot (none may exist),
# then use it once: it must reach the Cuebot named by CUEBOT_HOSTS (pycue's own configuration).
DEFAULT_FARM_PROBE = r"""
import json, os, sys
import psutil
from cue_plugin.submit.spec import FarmError, JobHandle
from gui.controller import default_farm

port = int(os.environ["CUEBOT_HOSTS"].rsplit(":", 1)[1])

def links():
    procs = [psutil.Process(), *psutil.Process().children(recursive=True)]
    conns = [c for p in procs for c in getattr(p, "net_connections", p.connections)(kind="tcp")]  # psutil 5 / 6+
    return sum(1 for c in conns if c.raddr and c.raddr.port == port)

farm = default_farm()
made = {"links": links(), "opencue_imported": "opencue" in sys.modules}
try:
    farm.describe(JobHandle("", "demo-sh010-artist_nosuchjob", ""))
    answer = "no error"
except FarmError as exc:
    answer = str(exc)
print(json.dumps({"made": made, "answer": answer}))
"""


def test_default_farm_contacts_no_cuebot_until_used(qapp, settings, cuebot, monkeypatch):
    """Made lazily: the controller calls the factory on first use only, once; making the default
    backend opens no connection (nor imports pycue); its first call reaches CUEBOT_HOSTS."""
    import gui.controller

    made = []
    monkeypatch.setattr(gui.controller, "default_farm", lambda: made.append(1) or object())
    ctl = RunsController(None, settings)
    try:
        assert made == []
        assert ctl.farm() is ctl.farm() and made == [1]
    finally:
        ctl.shutdown()

    env = {**os.environ, "CUEBOT_HOSTS": cuebot.address, "CUEBOT_FACILITY": "local", "PYTHONPATH": CHILD_PYTHONPATH}
    r = subprocess.run([sys.executable, "-c", DEFAULT_FARM_PROBE], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=90)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["made"] == {"links": 0, "opencue_imported": False}
    assert "Cuebot does not know it" in out["answer"] and "nosuchjob" in out["answer"]


def test_handle_from_gui_is_what_cuetrain_status_reads(qtbot, qapp, settings, cuebot, tmp_path):
    """The run.json farm record the GUI's submit leaves is the handle the CLI resolves a run dir to."""
    from cue_plugin.submit.opencue_farm import handle_from_run_dir

    run_dir = tmp_path / "graded"
    train = TrainConfig(input_dir=str(tmp_path), target_dir=str(tmp_path), run_dir=str(run_dir))
    ctl = RunsController(lambda: OpenCueFarm(allow_root=True), settings)
    try:
        with qtbot.waitSignal(ctl.submit_finished, timeout=SIGNAL_TIMEOUT_MS) as submitted:
            ctl.submit(TrainingJob(train=train, world_size=2, show="demo", shot="sh010", user="artist"))
    finally:
        ctl.shutdown()
    assert handle_from_run_dir(str(run_dir)) == JobHandle(submitted.args[0].job_id, submitted.args[0].job_name,
                                                          str(run_dir))

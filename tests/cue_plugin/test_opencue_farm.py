"""OpenCueFarm end to end: submit/describe/cancel/retry through pycue against the Cuebot double,
with real RQD processes running the frame entry point and a stub trainer.

The frames run as the double's frame user, who cannot read this test's interpreter (under /root),
so the layer's "python" is a wrapper that starts the system Python 3.11 on cue_plugin.frame (it
needs only the standard library) with the stub trainer (tests/cue_plugin/stub_trainer.py).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from cue_plugin.submit import cli, templates
from cue_plugin.submit.opencue_farm import OpenCueFarm
from cue_plugin.submit.spec import FarmError, JobHandle, RunState
from tests.cuebot.fixtures import cuebot_farm, skip_or_fail_missing_prerequisite  # noqa: F401  (fixture)
from trainer.core.config import TrainConfig
from trainer.record.rundir import RunPaths, read_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]
ROOT = Path(__file__).resolve().parents[2]
CHILD_PYTHONPATH = os.pathsep.join([str(ROOT / "tests" / "cpu_bf16"), str(ROOT)])  # as tests.conftest
STUB = Path(__file__).with_name("stub_trainer.py")
SYSTEM_PYTHON = "/usr/bin/python3"
SETTLE_S = 40
RESTART_BACKOFF_S = 0.2  # the frames' --restart-backoff-s: a dead frame's 3 gang restarts wait 1.4 s, not 14 s


@pytest.fixture
def farm_env(cuebot_farm):
    if not (os.access(SYSTEM_PYTHON, os.X_OK) and os.path.exists("/usr/bin/time")):
        skip_or_fail_missing_prerequisite("needs /usr/bin/python3 (3.11+) and /usr/bin/time for RQD frames")
    farm = cuebot_farm(rqds=2)
    wrapper = farm.workdir / "frame python"
    wrapper.write_text(  # --restart-backoff-s first: the frame reads options up to "--" (backoff doubling: test_frame.py)
        "#!/bin/sh\n# argv: -u -m cue_plugin.frame FRAME_ARGS -- TRAIN_ARGS\n"
        f"exec {SYSTEM_PYTHON} -c 'import sys; from cue_plugin.frame import main; "
        f"sys.exit(main([\"--restart-backoff-s\", \"{RESTART_BACKOFF_S}\", *sys.argv[4:]], "
        f"trainer_command=[sys.executable, \"{STUB}\"]))' \"$@\"\n")
    wrapper.chmod(0o755)
    return farm, str(wrapper)


def shared_run_dir(farm, name: str) -> Path:
    """A run directory the frame user can write (the submitter is root here, the frames are not)."""
    run = farm.out_dir / name
    paths = RunPaths.of(run)
    paths.create()
    for d in (paths.root, paths.logs, paths.rendezvous.parent, paths.checkpoints, paths.contact_sheets):
        d.chmod(0o777)
    return run


def make_training_job(run: Path, world_size: int = 2, **env: str):
    cfg = TrainConfig(input_dir=str(run / "in"), target_dir=str(run / "gt"), run_dir=str(run), batch_size=4)
    extra = {"PYTHONPATH": CHILD_PYTHONPATH, "CUETRAIN_MAIN_HOST": "127.0.0.1", **env}
    return templates.make_job(cfg, template="cpu-test", world_size=world_size, show="cuetrain", shot="sh010",
                              user="trainer", extra_env=extra, rendezvous_timeout_s=30)


def wait_state(farm: OpenCueFarm, handle: JobHandle, wanted: RunState, timeout: float = SETTLE_S, **extra):
    deadline = time.monotonic() + timeout
    while True:
        status = farm.describe(handle)
        if status.state is wanted and all(getattr(status, k) == v for k, v in extra.items()):
            return status
        assert time.monotonic() < deadline, f"never {wanted} {extra}: {status}"
        time.sleep(0.2)


def test_submit_runs_a_two_rank_gang_and_describe_follows_it(farm_env, capsys):
    farm, wrapper = farm_env
    run = shared_run_dir(farm, "gang")
    cue = OpenCueFarm(hosts=[farm.cuebot.address], allow_root=True, python=wrapper)
    handle = cue.submit(make_training_job(run))
    assert handle.job_name == "cuetrain-sh010-trainer_cuetrain_gang" and handle.run_dir == str(run)
    recorded = read_json(RunPaths.of(run).run_json)["farm"]
    assert (recorded["job_id"], recorded["attempts_at_submit"]) == (handle.job_id, 0)

    # describe reads the job, then its frames (two calls): the last frame can finish between them, so the
    # frames say SUCCEEDED while the job read a moment earlier is still PENDING; wait for Cuebot's FINISHED too
    status = wait_state(cue, handle, RunState.SUCCEEDED, native_state="FINISHED")
    assert (status.ranks_total, status.ranks_running, status.native_state) == (2, 0, "FINISHED")
    assert {f["state"] for f in status.frames.values()} == {"SUCCEEDED"}
    seen = [json.loads((run / f"stub_rank_{r}.json").read_text())["env"] for r in (0, 1)]
    assert [s["COPYCAT_RANK"] for s in seen] == ["0", "1"]
    assert seen[0]["COPYCAT_MAIN_PORT"] == seen[1]["COPYCAT_MAIN_PORT"]
    assert seen[0]["CUETRAIN_GANG_TOKEN"] == seen[1]["CUETRAIN_GANG_TOKEN"] and len(seen[0]["CUETRAIN_GANG_TOKEN"]) == 32
    for rank in (0, 1):
        assert f"[Step:1/1] loss=0.5 rank {rank}" in RunPaths.of(run).rank_log(rank).read_text()
    cue.cancel(handle)  # finished: nothing to do, no error
    assert cli.main(["status", str(run)], farm=cue) == 0
    assert "state    succeeded (OpenCue FINISHED), ranks running 0/2" in capsys.readouterr().out


def test_cancel_is_idempotent_and_describe_says_cancelled(farm_env):
    farm, wrapper = farm_env
    run = shared_run_dir(farm, "cancel")
    cue = OpenCueFarm(hosts=[farm.cuebot.address], allow_root=True, python=wrapper)
    handle = cue.submit(make_training_job(run, world_size=1, STUB_SLEEP="60"))
    wait_state(cue, handle, RunState.RUNNING, ranks_running=1)
    cue.cancel(handle)
    assert wait_state(cue, handle, RunState.CANCELLED, timeout=10).native_state == "FINISHED"
    cue.cancel(handle)
    cue.cancel(JobHandle("", "cuetrain-sh010-trainer_nosuchjob", ""))  # unknown: nothing to cancel
    with pytest.raises(FarmError, match="Cuebot does not know it"):
        cue.describe(JobHandle("", "cuetrain-sh010-trainer_nosuchjob", ""))


def test_dead_frames_fail_the_run_and_retry_restarts_them(farm_env):
    farm, wrapper = farm_env
    run = shared_run_dir(farm, "failing")
    cue = OpenCueFarm(hosts=[farm.cuebot.address], allow_root=True, python=wrapper)
    handle = cue.submit(make_training_job(run, world_size=1, STUB_EXIT="5"))
    status = wait_state(cue, handle, RunState.FAILED)
    assert status.frames["0"]["exit_status"] == 5 and status.native_state == "PENDING"
    assert cue.retry(handle) == 1
    assert wait_state(cue, handle, RunState.FAILED).frames["0"]["retries"] >= 1
    cue.cancel(handle)
    assert wait_state(cue, handle, RunState.FAILED, timeout=10).native_state == "FINISHED"

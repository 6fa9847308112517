"""Training across hosts with nothing set by hand (issue 9): 3 namespace hosts, real RQDs, real trainer.

Every job is submitted through real pyoutline (``OpenCueFarm.submit``, which passes ``CUEBOT_HOSTS``
on to the frames, as ``cuetrain submit`` does) with the ``cpu-test`` template, and its frames run
exactly what ``cuetrain submit`` writes, with only ``PYTHONPATH`` and ``OMP_NUM_THREADS=1`` added:
no ``CUETRAIN_MAIN_HOST``, no ``COPYCAT_LOCAL_ADDR``. On every host the host name resolves to
127.0.1.1 (bed.py), the trap that made frame 1 wait for frame 0 at its own loopback before.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from cue_plugin import templates
from cue_plugin.opencue_farm import OpenCueFarm
from cue_plugin.spec import JobHandle, RunState
from tests.conftest import ROOT, make_pairs
from tests.cuebot.fixtures import use_pycue
from tests.multihost.farm import FRAME_CORES, MultiHostFarm, multihost_farm  # noqa: F401  (a fixture)
from trainer.config import TrainConfig
from trainer.rundir import RunPaths, read_json, read_metrics

pytestmark = pytest.mark.slow


def submit(farm: MultiHostFarm, tmp_path: Path, name: str, *, world_size: int = 3, env: dict | None = None,
           max_retries: int = 0, rendezvous: str = "file", **train) -> tuple[OpenCueFarm, JobHandle, RunPaths]:
    inp, tgt = make_pairs(tmp_path / "data")
    values = dict(steps=4, batch_size=3, crop_size=16, model_size="small", log_interval=2, checkpoint_interval=2,
                  contact_sheet_interval=4)
    values.update(train)
    cfg = TrainConfig(input_dir=str(inp), target_dir=str(tgt), run_dir=str(tmp_path / name), **values)
    extra = {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    job = templates.make_job(cfg, template="cpu-test", world_size=world_size, show="cuetrain", shot="multihost",
                             user="trainer", extra_env=extra, rendezvous=rendezvous, rendezvous_timeout_s=40,
                             max_retries=max_retries, cores=FRAME_CORES)
    cue = OpenCueFarm(hosts=[farm.cuebot.bridge_address], allow_root=True)
    return cue, cue.submit(job), RunPaths.of(cfg.run_dir)


def wait_finished(cue: OpenCueFarm, handle: JobHandle, paths: RunPaths, timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        status = cue.describe(handle)
        if status.native_state == "FINISHED":
            return status
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-2500:]
                             for p in sorted(paths.logs.glob("rank_*.log")))
            pytest.fail(f"job not finished after {timeout} s: {status}\n{logs}")
        time.sleep(0.3)


def logs(paths: RunPaths) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(paths.logs.glob("rank_*.log")))


@pytest.mark.timeout(150)
def test_a_three_host_job_trains_with_no_address_settings(multihost_farm, tmp_path):
    farm = multihost_farm
    t0 = time.monotonic()
    with use_pycue(farm.cuebot.bridge_address):
        cue, handle, paths = submit(farm, tmp_path, "a")
        status = wait_finished(cue, handle, paths, timeout=120)
    took = time.monotonic() - t0
    assert status.state is RunState.SUCCEEDED, f"{status}\n{logs(paths)}"
    assert {f["host"] for f in status.frames.values()} == {h.ip for h in farm.bed.hosts}  # booked by cores
    record = read_json(paths.run_json)
    assert record["state"] == "succeeded" and record["world_size"] == 3 and record["final_step"] == 4
    assert [row["step"] for row in read_metrics(paths)] == [2, 4]
    pub_host = json.loads(paths.rendezvous.read_text())["host"] if paths.rendezvous.exists() else None
    frame0_ip = status.frames["0"]["host"]
    log0, log1 = paths.rank_log(0).read_text(), paths.rank_log(1).read_text()
    assert f"main address {frame0_ip}:" in log0 and pub_host in (None, frame0_ip)
    assert "routes to Cuebot" in log0  # why this IP: the interface that routes to CUEBOT_HOSTS
    assert "collective interface eth0" in log1 and "routes to the main address" in log1
    print(f"(a) 3 hosts, no address settings: submit -> SUCCEEDED in {took:.1f} s")

"""Training on the farm end to end: real pyoutline submission, the Cuebot double, two real RQDs and
the REAL trainer (``python -m cue_plugin.frame ... -- <train args>`` running ``python -m trainer``).

How the frames can run the trainer. The double sends every RunFrame with a non-root uid (RQD
refuses uid 0). With ``RQD_BECOME_JOB_USER=True`` (the harness default as root) RQD would ``su`` to
that user, who cannot read this interpreter (``/root/.pyenv``, mode 0700) and torch. So these RQDs
run with ``RQD_BECOME_JOB_USER=False`` in their ``[Override]`` config, a real RQD deployment mode:
frames run as the RQD process's own user (here the test user), RQD still checks the RunFrame uid,
and the layer command is the interpreter path pyoutline was given (``sys.executable``, as
``cuetrain submit`` does). The frames' environment comes from the job (``extra_env``):
``OMP_NUM_THREADS=1`` (2 cores shared by everything), ``PYTHONPATH`` = the repository,
``CUETRAIN_MAIN_HOST=127.0.0.1`` (both RQDs are on loopback, ``RQD_NETWORK_INTERFACE=lo``) and
``CUEBOT_HOSTS`` (frame 0 fails the layer through pycue on a gang timeout).

The first tests check the frame-side rules with a fake trainer in this process (fast); the
``slow`` ones are the acceptance runs: a 2-rank job that trains to the end (issue 3) and a 3-rank job
on 2 hosts failing cleanly after the gang timeout. A SIGKILLed rank resuming from the checkpoint
(issue 5) is in test_e2e_recovery.py, under Cuebot's completion rules.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

from cue_plugin.node import frame, layer_failure, rendezvous
from cue_plugin.node.publication import Publication, proof, signed_by

from cue_plugin.submit import templates
from cue_plugin.submit.opencue_farm import OpenCueFarm
from cue_plugin.submit.spec import JobHandle, RunState
from tests.conftest import CHILD_PYTHONPATH, make_pairs
from tests.cuebot.completion import CuebotRules
from tests.cuebot.double import CuebotDouble
from tests.cuebot.fixtures import (RQD_START_TIMEOUT_S, free_port, frame_identity, skip_or_fail_missing_prerequisite,
                                  use_pycue)
from tests.cuebot.rqd_harness import RqdProcess
from trainer.core.config import TrainConfig
from trainer.record.rundir import RunPaths, read_json, read_metrics

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "0123456789abcdef" * 2

# A trainer stand-in for the in-process tests: records each call in RUN_DIR/calls.jsonl, sleeps
# FAKE_SLEEP[port] seconds, writes $FAKE_RUN_JSON as run.json if set, and exits FAKE_CODES[port]
# (default $FAKE_DEFAULT, else 0) for its main port.
FAKE_TRAINER = r"""
import json, os, sys, time
run = sys.argv[sys.argv.index("--run-dir") + 1]
port = os.environ["COPYCAT_MAIN_PORT"]
with open(os.path.join(run, "calls.jsonl"), "a") as fh:
    fh.write(json.dumps({"port": int(port), "rank": os.environ["COPYCAT_RANK"], "argv": sys.argv[1:]}) + "\n")
time.sleep(json.loads(os.environ.get("FAKE_SLEEP", "{}")).get(port, 0))
if os.environ.get("FAKE_RUN_JSON"):
    with open(os.path.join(run, "run.json"), "w") as fh:
        fh.write(os.environ["FAKE_RUN_JSON"])
sys.exit(json.loads(os.environ.get("FAKE_CODES", "{}")).get(port, int(os.environ.get("FAKE_DEFAULT", "0"))))
"""
FAKE_COMMAND = [sys.executable, "-c", FAKE_TRAINER]


# -- frame-side rules, fast (fake trainer, no RQD) -------------------------------------------------


def frame_argv(run: Path, world: int = 2, timeout: float = 30) -> list[str]:
    return ["--world-size", str(world), "--rendezvous", "file", "--rendezvous-timeout", str(timeout), "--",
            "--input", str(run / "in"), "--target", str(run / "gt"), "--run-dir", str(run)]


@contextlib.contextmanager
def listener():
    """A TCP port that accepts connections, as rank 0's store does."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def publish(paths: RunPaths, port: int, attempt: str) -> Publication:
    pub = Publication("127.0.0.1", port, attempt, proof(TOKEN, "127.0.0.1", port, attempt),
                                 time.time(), 1)
    paths.rendezvous.parent.mkdir(parents=True, exist_ok=True)
    paths.rendezvous.write_text(json.dumps(pub.to_json()))
    return pub


def when_logged(path: Path, text: str, action, timeout: float = 20) -> threading.Thread:
    """Run ``action()`` on a thread once ``text`` appears in ``path``."""
    def run():
        deadline = time.monotonic() + timeout
        while not (path.exists() and text in path.read_text(errors="replace")):
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        action()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def calls(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "calls.jsonl").read_text().splitlines()]


@pytest.fixture
def frame_env(monkeypatch):
    for name in ("CUE_GPU_CORES", "CUE_THREADS", "CUE_JOB_ID", "CUE_JOB", "CUE_LAYER", "COPYCAT_SYNC_INTERVAL",
                 "FAKE_CODES", "FAKE_SLEEP", "FAKE_RUN_JSON", "FAKE_DEFAULT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUETRAIN_MAIN_HOST", "127.0.0.1")
    monkeypatch.setenv("CUETRAIN_GANG_TOKEN", TOKEN)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return monkeypatch


def test_a_rank_refused_by_a_stale_gang_waits_for_the_next_frame_0(tmp_path, frame_env):
    """Trainer exit 5 (rank already claimed in an old frame 0's gang): the frame marks that attempt
    stale and joins the next attempt of frame 0 instead of exiting."""
    run = tmp_path / "run"
    paths = RunPaths.of(run)
    with listener() as old_port, listener() as new_port:
        publish(paths, old_port, "node0:11:old")
        frame_env.setenv("FAKE_CODES", json.dumps({str(old_port): 5}))
        frame_env.setenv("CUE_IFRAME", "1")
        when_logged(paths.rank_log(1), "is stale", lambda: publish(paths, new_port, "node0:12:new"))
        assert frame.main(frame_argv(run), trainer_command=FAKE_COMMAND) == 0
    assert [c["port"] for c in calls(run)] == [old_port, new_port]
    log_text = paths.rank_log(1).read_text()
    assert "frame 0 attempt node0:11:old is stale: its gang refused this rank" in log_text
    assert "frame 0 attempt node0:11:old at" in log_text and "is stale (its gang refused" in log_text  # kept waiting


def test_a_rank_stuck_on_a_dead_frame_0_is_moved_to_its_next_attempt(tmp_path, frame_env):
    """A trainer still trying the old address when frame 0 publishes a new attempt is stopped."""
    frame_env.setattr(frame, "WATCH_S", 0.2)
    run = tmp_path / "run"
    paths = RunPaths.of(run)
    with listener() as old_port, listener() as new_port:
        publish(paths, old_port, "node0:11:old")
        frame_env.setenv("FAKE_SLEEP", json.dumps({str(old_port): 60}))
        frame_env.setenv("CUE_IFRAME", "1")
        when_logged(paths.rank_log(1), f"main 127.0.0.1:{old_port}", lambda: publish(paths, new_port, "node0:12:new"))
        t = time.monotonic()
        assert frame.main(frame_argv(run), trainer_command=FAKE_COMMAND) == 0
        assert time.monotonic() - t < 30
    assert [c["port"] for c in calls(run)] == [old_port, new_port]
    assert "frame 0 started again (attempt node0:12:new)" in paths.rank_log(1).read_text()


def test_stale_attempts_still_end_with_the_rendezvous_timeout(tmp_path, frame_env):
    run = tmp_path / "run"
    with listener() as port:
        publish(RunPaths.of(run), port, "node0:11:old")
        frame_env.setenv("FAKE_CODES", json.dumps({str(port): 5}))
        frame_env.setenv("CUE_IFRAME", "1")
        assert frame.main(frame_argv(run, timeout=2), trainer_command=FAKE_COMMAND) == 3
    text = RunPaths.of(run).rank_log(1).read_text()
    assert "rank 1 gave up after 2 s (rendezvous timeout): frame 0 attempt node0:11:old" in text


GANG_INCOMPLETE_RUN_JSON = json.dumps({"version": 1, "state": "failed", "failure_kind": "gang_incomplete",
                                       "error": "gang incomplete: ranks 2 did not join within "
                                       "the gang timeout; failing the whole gang instead of holding GPUs idle"})


def test_gang_timeout_on_frame_0_fails_the_layer_and_tells_waiting_ranks(tmp_path, frame_env):
    frame_env.setattr(layer_failure, "NOTICE_GRACE_S", 0.0)
    eaten = []
    frame_env.setattr(layer_failure, "eat_layer", lambda job, layer: eaten.append((job, layer)))
    run = tmp_path / "run"
    paths = RunPaths.of(run)
    frame_env.setenv("CUE_IFRAME", "0")
    frame_env.setenv("CUE_JOB", "show-sh010-artist_run")
    frame_env.setenv("CUE_LAYER", "train")
    frame_env.setenv("FAKE_DEFAULT", "3")  # whatever port frame 0 picks
    frame_env.setenv("FAKE_RUN_JSON", GANG_INCOMPLETE_RUN_JSON)
    assert frame.main(frame_argv(run, world=3), trainer_command=FAKE_COMMAND) == 3
    frame_env.delenv("FAKE_DEFAULT")
    assert eaten == [("show-sh010-artist_run", "train")]
    record = read_json(paths.run_json)
    assert record["state"] == "failed" and record["error"].startswith("gang incomplete")
    assert record["gang_failure"]["cuebot"] == "ate the frames of show-sh010-artist_run/train"
    notice = rendezvous.FileSource(paths.rendezvous).read()
    assert notice.failed.startswith("gang incomplete") and signed_by(notice, TOKEN)
    assert "frame 0 fails the whole layer 'train'" in paths.rank_log(0).read_text()
    # a rank that starts (or is still waiting) now stops at once and says why
    frame_env.setenv("CUE_IFRAME", "2")
    assert frame.main(frame_argv(run, world=3), trainer_command=FAKE_COMMAND) == 3
    assert "rank 2 stops: frame 0 (attempt" in paths.rank_log(2).read_text()
    assert "failed the gang: gang incomplete: ranks 2 did not join" in paths.rank_log(2).read_text()


def test_when_pycue_cannot_fail_the_layer_the_log_says_what_to_do(tmp_path, frame_env):
    frame_env.setattr(layer_failure, "NOTICE_GRACE_S", 0.0)

    def unreachable(job, layer):
        raise ConnectionError("failed to connect to all addresses; last error: UNAVAILABLE")

    frame_env.setattr(layer_failure, "eat_layer", unreachable)
    run = tmp_path / "run"
    frame_env.setenv("CUE_IFRAME", "0")
    frame_env.setenv("CUE_JOB", "show-sh010-artist_run")
    frame_env.setenv("FAKE_RUN_JSON", GANG_INCOMPLETE_RUN_JSON)
    frame_env.setenv("FAKE_DEFAULT", "3")
    assert frame.main(frame_argv(run, world=3), trainer_command=FAKE_COMMAND) == 3
    text = RunPaths.of(run).rank_log(0).read_text()
    assert "could not fail the layer through pycue (ConnectionError: failed to connect" in text
    assert "check CUEBOT_HOSTS / opencue.yaml on the render node" in text and "cuetrain cancel RUN_DIR" in text
    assert "could not fail the layer" in read_json(RunPaths.of(run).run_json)["gang_failure"]["cuebot"]


def test_port_in_use_on_rank_0_is_not_a_gang_timeout(tmp_path, frame_env):
    """Exit 3 with 'cannot listen' must not fail the layer: OpenCue's retry picks another port."""
    frame_env.setattr(layer_failure, "eat_layer", lambda job, layer: pytest.fail("ate the layer"))
    run = tmp_path / "run"
    frame_env.setenv("CUE_IFRAME", "0")
    frame_env.setenv("CUE_JOB", "show-sh010-artist_run")
    frame_env.setenv("FAKE_RUN_JSON", json.dumps({"version": 1, "state": "failed", "failure_kind": "port_in_use",
                                                      "error": "rank 0 cannot listen on ..."}))
    frame_env.setenv("FAKE_DEFAULT", "3")
    assert frame.main(frame_argv(run), trainer_command=FAKE_COMMAND) == 3
    assert "gang_failure" not in read_json(RunPaths.of(run).run_json)
    assert not RunPaths.of(run).rendezvous.exists()  # retracted as usual


# -- acceptance: Cuebot double + real RQDs + real trainer -------------------------------------------


class Farm:
    """The double and two RQDs with RQD_BECOME_JOB_USER=False (see module doc)."""

    def __init__(self, rqds: int = 2, rules: CuebotRules | None = None) -> None:
        """``rules``: the Cuebot version modelled (tests/cuebot/completion.CuebotRules; default: current)."""
        self.workdir = Path(tempfile.mkdtemp(prefix="cuetrain-e2e-"))
        identity = frame_identity()  # a non-root uid for the RunFrame: RQD refuses uid 0
        self.cuebot = CuebotDouble(frame_uid=identity.uid, frame_gid=identity.gid, frame_user=identity.user,
                                   log_root=str(self.workdir / "logs"), rules=rules)
        self.count = rqds
        self.rqds: list[RqdProcess] = []

    def start(self) -> "Farm":
        (self.workdir / "logs").mkdir()
        self.cuebot.start()
        self.rqds = [RqdProcess(self.cuebot.port, free_port(), f"rqd{i}", self.workdir / f"rqd{i}",
                                become_job_user=False) for i in range(self.count)]
        for rqd in self.rqds:  # spawn all, then wait: they boot in parallel
            rqd.spawn()
        for rqd in self.rqds:
            rqd.wait_ready(RQD_START_TIMEOUT_S)
        return self

    def stop(self) -> None:
        for rqd in self.rqds:
            rqd.stop()
        self.cuebot.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


@pytest.fixture
def farm():
    yield from running_farm(2)


def running_farm(rqds: int, rules: CuebotRules | None = None):
    """A started :class:`Farm` of ``rqds`` RQDs with pycue pointed at it (a fixture's body); stops it after."""
    if not os.path.exists("/usr/bin/time"):
        skip_or_fail_missing_prerequisite("RQD runs frames through /usr/bin/time")
    f = Farm(rqds, rules)
    try:
        f.start()
        with use_pycue(f.cuebot.address):
            yield f
    finally:
        f.stop()
        leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(f.workdir) in " ".join(p.info["cmdline"] or [])]
        for p in leftovers:  # trainers or frames a stopped RQD left behind (only this test's)
            with contextlib.suppress(psutil.Error):
                p.kill()


def submit(farm: Farm, tmp_path: Path, name: str, *, world_size: int = 2, max_retries: int = 0,
           **train) -> tuple[OpenCueFarm, JobHandle, RunPaths]:
    run = tmp_path / name
    values = dict(steps=4, batch_size=2, crop_size=16, model_size="small", log_interval=2, checkpoint_interval=2,
                  contact_sheet_interval=2)
    values.update(train)
    if "input_dir" not in values:
        values["input_dir"], values["target_dir"] = map(str, make_pairs(tmp_path / "data"))
    cfg = TrainConfig(run_dir=str(run), **values)
    extra = {"PYTHONPATH": CHILD_PYTHONPATH, "OMP_NUM_THREADS": "1", "CUETRAIN_MAIN_HOST": "127.0.0.1",
             "CUEBOT_HOSTS": farm.cuebot.address, "CUETRAIN_EXPORT_ONNX": "0"}  # model.onnx: test_export.py
    job = templates.make_job(cfg, template="cpu-test", world_size=world_size, show="cuetrain", shot="e2e",
                             user="trainer", extra_env=extra, rendezvous_timeout_s=60, max_retries=max_retries)
    cue = OpenCueFarm(hosts=[farm.cuebot.address], allow_root=True)
    return cue, cue.submit(job), RunPaths.of(run)


def wait_finished(cue: OpenCueFarm, handle: JobHandle, paths: RunPaths, timeout: float):
    """The job's status once OpenCue has FINISHED it (a DEAD frame alone already reads FAILED)."""
    deadline = time.monotonic() + timeout
    while True:
        status = cue.describe(handle)
        if status.native_state == "FINISHED":
            return status
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n" + p.read_text(errors="replace")[-3000:]
                             for p in sorted(paths.logs.glob("rank_*.log")))
            pytest.fail(f"job not finished after {timeout} s: {status}\n{logs}")
        time.sleep(0.3)


def assert_model_loads(paths: RunPaths) -> None:
    import warnings

    import torch

    with warnings.catch_warnings():  # torch 2.10+ deprecates TorchScript; the hosts still load it
        warnings.simplefilter("ignore", DeprecationWarning)
        model = torch.jit.load(str(paths.model))
    out = model(torch.rand(1, 3, 40, 48))
    assert out.shape == (1, 3, 40, 48) and torch.isfinite(out).all()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_issue_3_a_submitted_two_frame_job_trains_to_the_end(farm, tmp_path):
    t0 = time.monotonic()
    cue, handle, paths = submit(farm, tmp_path, "gang")
    status = wait_finished(cue, handle, paths, timeout=90)
    took = time.monotonic() - t0
    assert status.state is RunState.SUCCEEDED, status
    assert (status.ranks_total, status.native_state) == (2, "FINISHED")
    assert {f["state"] for f in status.frames.values()} == {"SUCCEEDED"}
    assert {f["host"] for f in status.frames.values()} == {"rqd0", "rqd1"}
    import opencue  # the job as any pycue user sees it

    job = opencue.api.getJob(handle.job_id)
    assert job.name() == handle.job_name and job.data.job_stats.succeeded_frames == 2

    record = read_json(paths.run_json)
    assert record["state"] == "succeeded" and record["world_size"] == 2 and record["final_step"] == 4
    assert record["farm"]["job_id"] == handle.job_id and [a["start_step"] for a in record["attempts"]] == [0]
    assert [row["step"] for row in read_metrics(paths)] == [2, 4]
    assert [s for s, _ in paths.list_contact_sheets()] == [2, 4]
    assert [s for s, _ in paths.list_checkpoints()] == [2, 4]
    assert_model_loads(paths)
    assert "gang of 2 formed (rank 1)" in paths.rank_log(1).read_text()
    assert "[Step:4/4]" in paths.rank_log(0).read_text()
    print(f"issue 3: submit -> SUCCEEDED in {took:.1f} s")


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_an_upres_job_with_a_head_start_trains_on_the_farm(farm, tmp_path):
    """--scale 2 and --init-from through pyoutline, the Cuebot double and two real RQDs: the frames train from
    an earlier run's model and export a 2x model."""
    from tests.conftest import make_upres_pairs
    from trainer.core.envvars import DistEnv
    from trainer.learn.train import train

    inp, tgt = make_upres_pairs(tmp_path / "updata", scale=2)
    earlier = tmp_path / "earlier"
    train(TrainConfig(input_dir=str(inp), target_dir=str(tgt), run_dir=str(earlier), steps=2, batch_size=2,
                      crop_size=8, scale=2, checkpoint_interval=2, contact_sheet_interval=2, log_interval=2),
          DistEnv(distributed=False, missing=("COPYCAT_MAIN_ADDR",)))
    cue, handle, paths = submit(farm, tmp_path, "upres", input_dir=str(inp), target_dir=str(tgt), crop_size=8,
                                scale=2, init_from=str(earlier))
    status = wait_finished(cue, handle, paths, timeout=90)
    assert status.state is RunState.SUCCEEDED, status
    record = read_json(paths.run_json)
    assert record["state"] == "succeeded" and record["config"]["scale"] == 2
    assert record["init_from"]["path"] == str(earlier) and record["init_from"]["kind"] == "run"
    assert all("weights from" in paths.rank_log(k).read_text() for k in (0, 1))
    import torch

    model = torch.jit.load(str(paths.model))
    assert model(torch.rand(1, 3, 20, 24)).shape == (1, 3, 40, 48)
    assert "outputScale 2" in (paths.root / "model_nuke.nk").read_text()


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_matte_job_trains_on_the_farm(farm, tmp_path):
    """--target-channels A (RGB in, the Ground Truth's alpha out) through pyoutline, the Cuebot double and two real
    RQDs: the frames train a matte model whose exports name the channels."""
    from tests.conftest import make_matte_pairs

    inp, tgt = make_matte_pairs(tmp_path / "mattedata")
    cue, handle, paths = submit(farm, tmp_path, "matte", input_dir=str(inp), target_dir=str(tgt),
                                target_channels="A", augment=0.5)
    status = wait_finished(cue, handle, paths, timeout=90)
    assert status.state is RunState.SUCCEEDED, status
    record = read_json(paths.run_json)
    assert record["state"] == "succeeded" and record["config"]["target_channels"] == "A"
    meta = json.loads((paths.root / "model.json").read_text())
    assert meta["channels_out"] == ["A"] and meta["task"] == "matte"
    assert "channelsOut rgba.alpha" in (paths.root / "model_nuke.nk").read_text()
    import torch

    matte = torch.jit.load(str(paths.model))(torch.rand(1, 3, 40, 48))
    assert matte.shape == (1, 1, 40, 48) and 0.0 <= float(matte.min()) and float(matte.max()) <= 1.0


def find_trainer(rank: int, run: Path, timeout: float = 30) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            if "-m" in cmd and cmd[cmd.index("-m") + 1:][:1] == ["trainer"] and str(run) in cmd:  # TRAINER_COMMAND
                with contextlib.suppress(psutil.Error):
                    if p.environ().get("COPYCAT_RANK") == str(rank):
                        return p
        time.sleep(0.1)
    pytest.fail(f"no trainer process of rank {rank} for {run}")


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_more_ranks_than_hosts_fails_the_layer_after_the_gang_timeout(farm, tmp_path):
    """World size 3 on 2 hosts: frame 2 never starts; frame 0's gang timeout fails the whole layer."""
    t0 = time.monotonic()
    cue, handle, paths = submit(farm, tmp_path, "toobig", world_size=3, batch_size=3, gang_timeout_s=8)
    status = wait_finished(cue, handle, paths, timeout=90)
    took = time.monotonic() - t0
    assert status.state is RunState.FAILED and status.native_state == "FINISHED", status
    assert {f["state"] for f in status.frames.values()} == {"EATEN"}
    record = read_json(paths.run_json)
    assert record["state"] == "failed" and record["error"].startswith("gang incomplete: ranks 2 did not join")
    assert record["gang_failure"]["cuebot"].startswith(("eating the frames of", "ate the frames of"))
    assert "frame 0 fails the whole layer 'train'" in paths.rank_log(0).read_text()
    assert "failed the gang: gang incomplete: ranks 2 did not join" in paths.rank_log(1).read_text()
    if paths.rank_log(2).exists():  # it may start on the host frame 1 freed: then it stops at once, saying why
        assert "rank 2 stops: frame 0 (attempt" in paths.rank_log(2).read_text()
    print(f"gang timeout: submit -> FAILED (layer eaten) in {took:.1f} s")

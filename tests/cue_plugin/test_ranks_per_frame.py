"""Ranks per frame: the CUE_GPU_CORES/CUE_THREADS split, the one supervisor running L ranks, a frame
of 2 ranks in process, and (slow) 2 frames x 2 ranks trained through the Cuebot double and real RQDs."""

import io
import json
import sys
import time
from pathlib import Path

import pytest

from cue_plugin.node import frame

from cue_plugin.submit import templates
from cue_plugin.submit.opencue_farm import OpenCueFarm
from cue_plugin.submit.spec import RunState
from tests.conftest import CHILD_PYTHONPATH, make_pairs
from tests.cue_plugin.test_e2e_training import ROOT, assert_model_loads, farm, wait_finished  # noqa: F401 (fixture)
from trainer.core.config import TrainConfig
from trainer.core.envvars import EnvError
from trainer.record.rundir import RunPaths, read_json, read_metrics
from trainer.agent.supervise import Devices, RankLogs, rank_envs, run_ranks, split_gpus

STUB = str(Path(__file__).with_name("stub_trainer.py"))


# -- the split of a frame's reservation -------------------------------------------------------------


def test_cue_gpu_cores_split_one_gpu_per_rank_in_order():
    assert split_gpus(("0", "1", "2", "3"), 4) == [("0",), ("1",), ("2",), ("3",)]
    assert split_gpus(("3", "5"), 1) == [("3", "5")]  # one rank per frame keeps every reserved GPU
    assert split_gpus(("0", "1", "2", "3"), 2) == [("0", "1"), ("2", "3")]  # 2 GPUs per rank
    assert split_gpus((), 3) == [(), (), ()]  # CPU frame: no CUDA variable


def test_gpus_that_do_not_split_evenly_name_the_variable_the_count_and_the_fix():
    with pytest.raises(EnvError, match=r"CUE_GPU_CORES=0,1,2 holds 3 GPU\(s\), which do not split evenly over 2 "
                                       r"ranks per frame; reserve a multiple of 2 GPUs per frame"):
        split_gpus(("0", "1", "2"), 2)


def test_rank_envs_give_each_rank_its_number_gpu_and_share_of_threads():
    base = {"COPYCAT_WORLD_SIZE": "8", "COPYCAT_RANK": "4", "KEEP": "x"}
    envs = rank_envs(base, 4, 4, Devices(gpus=("1", "3", "4", "6"), threads=32))
    assert [(e["COPYCAT_RANK"], e["CUDA_VISIBLE_DEVICES"], e["OMP_NUM_THREADS"]) for e in envs] == [
        ("4", "1", "8"), ("5", "3", "8"), ("6", "4", "8"), ("7", "6", "8")]
    assert all(e["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and e["KEEP"] == "x" and e["COPYCAT_WORLD_SIZE"] == "8"
               for e in envs)
    few = rank_envs(base, 0, 4, Devices(threads=2))  # fewer threads than ranks: 1 each, never 0
    assert [e["OMP_NUM_THREADS"] for e in few] == ["1"] * 4 and "CUDA_VISIBLE_DEVICES" not in few[0]
    assert "OMP_NUM_THREADS" not in rank_envs(base, 0, 2, Devices())[0]  # no CUE_THREADS: inherited


def test_frames_of_needs_a_multiple():
    assert frame.frames_of(4, 2) == 2
    with pytest.raises(ValueError, match="--world-size 6 is not a multiple of --ranks-per-frame 4"):
        frame.frames_of(6, 4)


def test_submit_dry_run_of_four_ranks_two_per_frame_is_one_layer_0_1(tmp_path, capsys, monkeypatch):
    from xml.etree import ElementTree

    from cue_plugin.submit import cli

    monkeypatch.delenv("CUETRAIN_TEMPLATE_PATH", raising=False)
    argv = ["submit", "--template", "cpu-test", "--world-size", "4", "--ranks-per-frame", "2", "--show", "s",
            "--shot", "t", "--user", "artist", "--dry-run", "--input", str(tmp_path / "in"), "--target",
            str(tmp_path / "gt"), "--run-dir", str(tmp_path / "run")]
    assert cli.main(argv, farm=OpenCueFarm(python="/py")) == 0
    layers = ElementTree.fromstring(capsys.readouterr().out).findall("./job/layers/layer")
    assert [(la.get("name"), la.findtext("range")) for la in layers] == [("train", "0-1")]
    assert "--ranks-per-frame 2" in layers[0].findtext("cmd")
    argv[argv.index("4")] = "3"
    assert cli.main(argv, farm=OpenCueFarm(python="/py")) == 2
    assert "world_size=3 is not a multiple of ranks_per_frame=2" in capsys.readouterr().err


def test_status_lists_frames_with_their_ranks():
    from cue_plugin.submit.cli import format_status
    from cue_plugin.submit.spec import JobHandle, JobStatus

    status = JobStatus(RunState.RUNNING, 1, 2, "PENDING", {"1": {"state": "RUNNING", "host": "n2", "retries": 0}})
    lines = format_status(JobHandle("i", "j", ""), status, ranks_per_frame=2)
    assert "ranks running 2/4 (frames 1/2 x 2 ranks)" in lines[1]
    assert lines[2].startswith("frame  1 (ranks 2-3) RUNNING")


# -- the supervisor -----------------------------------------------------------------------------------

SCRIPT = ("import os, sys, time; r = str(os.environ['COPYCAT_RANK']); print('hello from', r, flush=True); "
          "time.sleep(float(os.environ.get('SLEEP_' + r, '0'))); sys.exit(int(os.environ.get('EXIT_' + r, '0')))")


def test_a_failing_rank_stops_its_siblings_and_its_code_is_the_result(tmp_path):
    paths = RunPaths.of(tmp_path)
    out = io.StringIO()
    logs = RankLogs(paths, prefix=True, stream=out)
    envs = rank_envs({"PATH": "/usr/bin:/bin", "SLEEP_2": "60", "SLEEP_3": "0.5", "EXIT_3": "4"}, 2, 2)
    t = time.monotonic()
    result = run_ranks([sys.executable, "-c", SCRIPT], list(zip([2, 3], envs)), logs, stop_grace_s=5)
    logs.close()
    assert time.monotonic() - t < 30  # rank 2 (sleeping 60 s) was stopped, not waited for
    assert (result.code, result.rank, result.codes) == (4, 3, {2: 143, 3: 4})  # 143 = 128 + SIGTERM
    assert "[rank 2] hello from 2\n" in out.getvalue() and "[rank 3] hello from 3\n" in out.getvalue()
    assert paths.rank_log(3).read_text() == "hello from 3\n"  # files are not prefixed


def test_a_watch_reason_stops_every_rank(tmp_path):
    logs = RankLogs(RunPaths.of(tmp_path), prefix=False, stream=io.StringIO())
    envs = rank_envs({"PATH": "/usr/bin:/bin", "SLEEP_0": "60", "SLEEP_1": "60"}, 0, 2)
    result = run_ranks([sys.executable, "-c", SCRIPT], list(zip([0, 1], envs)), logs, watch=lambda: "moved on",
                       watch_s=0.2, stop_grace_s=5)
    logs.close()
    assert result.stopped == "moved on" and result.codes == {0: 143, 1: 143}


# -- one frame of two ranks, in process (stub trainer: rank 0 listens, rank 1 connects) ----------------


def test_a_frame_of_two_ranks_runs_both_with_its_split_reservation(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    for name in ("CUE_JOB_ID", "COPYCAT_SYNC_INTERVAL", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (("CUETRAIN_MAIN_HOST", "127.0.0.1"), ("CUETRAIN_GANG_TOKEN", "f" * 32), ("CUE_IFRAME", "0"),
                        ("CUE_GPU_CORES", "2,5"), ("CUE_THREADS", "6")):
        monkeypatch.setenv(name, value)
    argv = ["--frame", "0", "--world-size", "2", "--ranks-per-frame", "2", "--rendezvous", "file",
            "--rendezvous-timeout", "30", "--", "--input", str(run / "in"), "--target", str(run / "gt"),
            "--run-dir", str(run)]
    assert frame.main(argv, trainer_command=[sys.executable, STUB]) == 0
    got = {r: json.loads((run / f"stub_rank_{r}.json").read_text())["env"] for r in (0, 1)}
    assert [(got[r]["COPYCAT_RANK"], got[r]["CUDA_VISIBLE_DEVICES"], got[r]["OMP_NUM_THREADS"]) for r in (0, 1)] == [
        ("0", "2", "3"), ("1", "5", "3")]
    assert got[0]["COPYCAT_WORLD_SIZE"] == got[1]["COPYCAT_WORLD_SIZE"] == "2"
    paths = RunPaths.of(run)
    assert "frame 0 of 1" in paths.rank_log(0).read_text() and "rank(s) 0-1 of 2" in paths.rank_log(0).read_text()
    assert paths.rank_log(1).exists() and "[rank 1]" in capsys.readouterr().out


def test_a_frame_outside_the_layer_is_exit_code_2(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CUE_IFRAME", raising=False)
    argv = ["--frame", "2", "--world-size", "4", "--ranks-per-frame", "2", "--", "--input", "i", "--target", "t",
            "--run-dir", str(tmp_path / "run")]
    assert frame.main(argv) == 2
    assert "frame 2 is not a rank of a world of 2" in capsys.readouterr().err


# -- acceptance: 2 frames x 2 ranks through the Cuebot double and two real RQDs ----------------------


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_two_frames_of_two_ranks_train_to_the_end_on_two_hosts(farm, tmp_path):  # noqa: F811 (fixture)
    """World size 4, ranks per frame 2: ONE layer of 2 frames, each on its own RQD host (2 cores each, a
    frame asks 2 x 1 core), each running 2 real trainers with CUE_THREADS split into 1 thread each."""
    t0 = time.monotonic()
    inp, tgt = make_pairs(tmp_path / "data")
    run = tmp_path / "run"
    cfg = TrainConfig(input_dir=str(inp), target_dir=str(tgt), run_dir=str(run), steps=4, batch_size=4, crop_size=32,
                      log_interval=2, checkpoint_interval=2, contact_sheet_interval=2)
    extra = {"PYTHONPATH": CHILD_PYTHONPATH, "CUETRAIN_MAIN_HOST": "127.0.0.1", "CUEBOT_HOSTS": farm.cuebot.address}
    job = templates.make_job(cfg, template="cpu-test", world_size=4, ranks_per_frame=2, show="cuetrain", shot="e2e",
                             user="trainer", extra_env=extra, rendezvous_timeout_s=60, max_retries=0)
    cue = OpenCueFarm(hosts=[farm.cuebot.address], allow_root=True)
    handle = cue.submit(job)
    paths = RunPaths.of(run)
    status = wait_finished(cue, handle, paths, timeout=150)
    took = time.monotonic() - t0
    assert status.state is RunState.SUCCEEDED, status
    assert (status.ranks_total, set(status.frames)) == (2, {"0", "1"})  # frames: 2 of 2 ranks each
    assert {f["host"] for f in status.frames.values()} == {"rqd0", "rqd1"}
    record = read_json(paths.run_json)
    assert record["state"] == "succeeded" and record["world_size"] == 4 and record["final_step"] == 4
    assert record["farm"]["job"]["ranks_per_frame"] == 2
    assert [row["step"] for row in read_metrics(paths)] == [2, 4]
    for rank in range(4):
        assert f"gang of 4 formed (rank {rank})" in paths.rank_log(rank).read_text()
    assert "frame 1 of 2" in paths.rank_log(2).read_text() and "rank(s) 2-3 of 4" in paths.rank_log(2).read_text()
    assert_model_loads(paths)
    print(f"2 frames x 2 ranks: submit -> SUCCEEDED in {took:.1f} s")

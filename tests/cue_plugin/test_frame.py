"""The frame entry point: rank from the frame number, file rendezvous between real processes, stale
publications, the rendezvous timeout, GPU/thread mapping, retries resuming, the per-rank log tee."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cue_plugin.node import frame, rendezvous
from cue_plugin.node.publication import Publication, proof
from trainer.core.envvars import CueFrameEnv
from trainer.record.rundir import RunPaths, atomic_write_json, read_json
from trainer.record.runrecord import update_record

ROOT = Path(__file__).resolve().parents[2]
CHILD_PYTHONPATH = os.pathsep.join([str(ROOT / "tests" / "cpu_bf16"), str(ROOT)])  # as tests.conftest
STUB = str(Path(__file__).with_name("stub_trainer.py"))
TOKEN = "feedfacefeedfacefeedfacefeedface"
RUNNER = ("import sys; from cue_plugin.frame import main; "
          f"sys.exit(main(sys.argv[1:], trainer_command=[sys.executable, {STUB!r}]))")


def frame_args(run_dir: Path, world: int = 2, timeout: float = 30, frame_no: str = "#IFRAME#") -> list[str]:
    return ["--frame", frame_no, "--world-size", str(world), "--rendezvous", "file", "--rendezvous-timeout",
            str(timeout), "--", "--input", str(run_dir / "in"), "--target", str(run_dir / "gt"), "--run-dir", str(run_dir)]


def start_frame(run_dir: Path, rank: int, **env: str) -> subprocess.Popen[str]:
    """Start one frame process as RQD would (CUE_IFRAME set, #IFRAME# already replaced)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("COPYCAT_", "CUE", "CUDA_", "OMP_"))}
    full.update(PYTHONPATH=CHILD_PYTHONPATH, CUE_IFRAME=str(rank), CUETRAIN_MAIN_HOST="127.0.0.1",
                CUETRAIN_GANG_TOKEN=TOKEN, COPYCAT_SYNC_INTERVAL="2", **env)
    return subprocess.Popen([sys.executable, "-c", RUNNER, *frame_args(run_dir, frame_no=str(rank))], env=full,
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_for_text(path: Path, text: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text(errors="replace")):
        assert time.monotonic() < deadline, f"{text!r} not in {path} after {timeout} s"
        time.sleep(0.05)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stale_publication(paths: RunPaths) -> Publication:
    """What a dead earlier attempt of frame 0 left behind: this job's token, a port nobody listens on."""
    port = closed_port()
    pub = Publication("127.0.0.1", port, "old-host:1:dead",
                                 proof(TOKEN, "127.0.0.1", port, "old-host:1:dead"), time.time() - 60, 1)
    paths.rendezvous.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(paths.rendezvous, pub.to_json())
    return pub


@pytest.mark.slow
def test_two_frames_meet_through_the_run_dir_ignoring_a_stale_publication(tmp_path):
    run = tmp_path / "run dir"
    paths = RunPaths.of(run)
    stale = stale_publication(paths)
    rank1 = start_frame(run, 1, CUE_GPU_CORES="1,3", CUE_THREADS="4")  # OpenCue may start rank 1 first
    try:
        wait_for_text(paths.rank_log(1), "does not accept connections")
        rank0 = start_frame(run, 0)
        out0, _ = rank0.communicate(timeout=60)
        out1, _ = rank1.communicate(timeout=60)
    finally:
        if rank1.poll() is None:
            rank1.kill()
    assert (rank0.returncode, rank1.returncode) == (0, 0), out0 + out1
    seen = [json.loads((run / f"stub_rank_{r}.json").read_text()) for r in (0, 1)]
    for rank, s in enumerate(seen):
        assert s["env"]["COPYCAT_RANK"] == str(rank) and s["env"]["COPYCAT_WORLD_SIZE"] == "2"
        assert s["env"]["COPYCAT_MAIN_ADDR"] == "127.0.0.1" and s["env"]["COPYCAT_SYNC_INTERVAL"] == "2"
        assert s["env"]["CUETRAIN_GANG_TOKEN"] == TOKEN and s["argv"][-1] == str(run)
    assert seen[0]["env"]["COPYCAT_MAIN_PORT"] == seen[1]["env"]["COPYCAT_MAIN_PORT"] != str(stale.port)
    assert seen[1]["env"]["CUDA_VISIBLE_DEVICES"] == "1,3" and seen[1]["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert seen[1]["env"]["OMP_NUM_THREADS"] == "4" and seen[0]["env"]["CUDA_VISIBLE_DEVICES"] is None
    for rank, out in ((0, out0), (1, out1)):  # tee: the frame log (stdout) and the rank log get the same lines
        log_text = paths.rank_log(rank).read_text()
        assert f"[Step:1/1] loss=0.5 rank {rank}" in out and f"[Step:1/1] loss=0.5 rank {rank}" in log_text
        assert f"[frame {rank}]" in out and "trainer exited with code 0" in log_text
    assert "old-host:1:dead" in paths.rank_log(1).read_text()  # it said what it ignored
    assert not paths.rendezvous.exists()  # frame 0 retracted its publication
    assert oct(paths.rank_log(0).stat().st_mode & 0o777) == "0o640"


def run_in_process(run_dir: Path, argv: list[str], monkeypatch, **env: str) -> int:
    for name in ("CUE_GPU_CORES", "CUE_THREADS", "CUE_JOB_ID", "COPYCAT_SYNC_INTERVAL", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CUETRAIN_MAIN_HOST", "127.0.0.1")
    monkeypatch.setenv("CUETRAIN_GANG_TOKEN", TOKEN)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return frame.main(argv, trainer_command=[sys.executable, STUB])


def test_rendezvous_timeout_is_a_clear_error_with_exit_code_3(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    stale_publication(RunPaths.of(run))
    code = run_in_process(run, frame_args(run, timeout=1.2), monkeypatch, CUE_IFRAME="1")
    assert code == 3
    text = RunPaths.of(run).rank_log(1).read_text()
    assert "rank 1 gave up after 1 s (rendezvous timeout)" in text and "does not accept connections" in text
    assert "gave up" in capsys.readouterr().out


def test_frame_zero_publishes_runs_the_trainer_and_passes_its_exit_code(tmp_path, monkeypatch):
    run = tmp_path / "run"
    stale_publication(RunPaths.of(run))
    args = frame_args(run, world=1)
    args[args.index("--"):args.index("--")] = ["--max-restarts", "0"]
    code = run_in_process(run, args, monkeypatch, CUE_IFRAME="0", STUB_EXIT="7", CUE_GPU_CORES="2", CUE_THREADS="8")
    assert code == 7
    env = json.loads((run / "stub_rank_0.json").read_text())["env"]
    assert (env["CUDA_VISIBLE_DEVICES"], env["OMP_NUM_THREADS"], env["COPYCAT_RANK"]) == ("2", "8", "0")
    notice = rendezvous.FileSource(RunPaths.of(run).rendezvous).read()  # no restart left: the others are told
    assert notice is not None and "restart budget is spent (0 of --max-restarts 0)" in notice.failed


def test_frame_zero_restarts_a_failed_gang_with_resume_until_the_budget_is_spent(tmp_path, monkeypatch):
    """The node agent: a failed trainer is started again (new generation, --resume, backoff), not the frame."""
    run = tmp_path / "run"
    args = frame_args(run, world=1)
    args[args.index("--"):args.index("--")] = ["--max-restarts", "2", "--restart-backoff-s", "0.2"]
    t = time.monotonic()
    code = run_in_process(run, args, monkeypatch, CUE_IFRAME="0", STUB_EXIT="4")
    assert code == 4 and time.monotonic() - t >= 0.2 + 0.4  # backoff 0.2 s, then doubled
    gang = read_json(RunPaths.of(run).run_json)["gang"]
    assert (gang["generation"], gang["restarts"]) == (3, 2)
    assert [e["reason"].split(":")[0] for e in gang["events"]] == ["first gang of the job", "restart 1", "restart 2"]
    assert "--resume" in json.loads((run / "stub_rank_0.json").read_text())["argv"]  # the last start resumed
    text = RunPaths.of(run).rank_log(0).read_text()
    assert "for generation 3: 1 rank(s)" in text and "restart budget is spent (2 of --max-restarts 2)" in text


@pytest.mark.parametrize("argv_frame,cue_frame,expected", [("3", None, 3), ("#IFRAME#", 2, 2), ("1", 1, 1)])
def test_rank_comes_from_the_frame_number(argv_frame, cue_frame, expected):
    assert frame.frame_rank(argv_frame, CueFrameEnv(frame=cue_frame), 4) == expected


@pytest.mark.parametrize("argv_frame,cue_frame", [("#IFRAME#", None), ("4", None)])
def test_bad_frame_numbers(argv_frame, cue_frame):
    with pytest.raises(ValueError):
        frame.frame_rank(argv_frame, CueFrameEnv(frame=cue_frame), 4)


def test_bad_frame_is_exit_code_2(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("CUE_IFRAME", raising=False)
    assert frame.main(frame_args(tmp_path / "run", frame_no="5")) == 2
    assert "frame 5 is not a rank" in capsys.readouterr().err


def test_gpu_and_thread_mapping():
    assert frame.device_env(CueFrameEnv(frame=0, gpu_cores=("0", "2"), threads=6), None) == {
        "CUDA_VISIBLE_DEVICES": "0,2", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "OMP_NUM_THREADS": "6"}
    assert frame.device_env(CueFrameEnv(frame=0, threads=6), "2") == {}  # OMP_NUM_THREADS already set: kept


def test_a_retry_of_the_same_job_resumes(tmp_path):
    paths = RunPaths.of(tmp_path)
    args = ["--run-dir", str(tmp_path)]
    assert frame.resume_args(args, paths, "job-1") == args  # no run.json
    update_record(paths, farm={"job_id": "job-1", "attempts_at_submit": 1}, attempts=[{"attempt": 1}])
    assert frame.resume_args(args, paths, "job-1") == args  # the attempt predates this job
    update_record(paths, attempts=[{"attempt": 1}, {"attempt": 2}])
    assert frame.resume_args(args, paths, "job-1") == [*args, "--resume"]
    assert frame.resume_args(args, paths, "job-2") == args  # another job's run.json


@pytest.mark.slow
def test_two_frames_train_with_the_real_trainer(tmp_path):
    """The whole contract with trainer.cli: reserved port handed to rank 0's TCPStore, gang token, outputs."""
    from tests.conftest import make_pairs

    inp, tgt = make_pairs(tmp_path / "data")
    run = tmp_path / "run"
    args = ["--world-size", "2", "--rendezvous", "file", "--rendezvous-timeout", "60", "--", "--input", str(inp),
            "--target", str(tgt), "--run-dir", str(run), "--steps", "3", "--batch-size", "4", "--crop-size", "32",
            "--log-interval", "1", "--checkpoint-interval", "3", "--contact-sheet-interval", "3"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COPYCAT_", "CUE", "CUDA_"))}
    env.update(PYTHONPATH=CHILD_PYTHONPATH, CUETRAIN_MAIN_HOST="127.0.0.1", CUETRAIN_GANG_TOKEN=TOKEN, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-m", "cue_plugin.frame", "--frame", str(r), *args], env=env,
                              cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in (1, 0)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(outs)
    paths = RunPaths.of(run)
    assert paths.model.exists() and "[Step:3/3]" in paths.rank_log(0).read_text()
    assert "gang of 2 formed (rank 1)" in paths.rank_log(1).read_text()

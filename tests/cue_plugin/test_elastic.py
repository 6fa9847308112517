"""The elastic gang end to end: three real frame processes (node agents) with the real trainer shrink to
two when frame 2's host dies, and grow back to three when it returns; the weights and Adam's state at a
checkpoint after the grow-back match an uninterrupted three-rank run's (issue 10, item 3; COMPARE_AT).

No RQD here (tests/cue_plugin/test_e2e_recovery.py has the farm): each frame runs as RQD would start
it (``CUE_IFRAME``, its own process group), and "the host dies" is a SIGKILL of frame 2's group.

Precision: the comparison is float32-exact, so both runs pin ``--precision fp32`` (``auto`` trains in bfloat16
on a CPU with AVX512-BF16/AMX; the bfloat16 regroup has its own test, tests/trainer/learn/test_bf16.py).

The grow-back cannot lose the race: a 2-rank gang of small crops trains its remaining steps in about a second,
faster than a new frame process starts. So once the 2-rank gang trains, the test holds it deterministically: it
SIGSTOPs both trainers (not their node agents), starts frame 2 again, waits until frame 0's agent has seen frame 2
back and asked its trainer to regroup (the SIGUSR1 stays pending while the trainer is stopped), then SIGCONTs the
trainers, which stop at their next checkpoint and grow to 3. Both trainers stop within a millisecond of each
other, and the hold is bounded by HOLD_S, well under the collective timeout, so no collective times out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from tests.conftest import CHILD_PYTHONPATH, make_pairs
from trainer.core.config import TrainConfig
from trainer.learn.model import build_model
from trainer.record.rundir import RunPaths, read_metrics
from trainer.record.runrecord import read_record_or_empty

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "e1a5c0de" * 4
STEPS, EVERY = 100, 10  # steps, checkpoint interval [steps]
COLLECTIVE_TIMEOUT_S, HOLD_S = 90, 60  # [s]: the held gang's collectives must not time out during the hold
# Float32 sums in another order (2 ranks instead of 3) differ by ~1e-8, and training can amplify that past
# the peak of the schedule (step 50): seed 11 ended 7e-8 (max abs) from the uninterrupted run at step 100 but
# 7e-3 at step 160; seed 12's per-step losses matched to 1e-9 from the shrink (step 21) to step 62, then grew
# 100x by step 64 and its weights ended 5.1e-3 apart at step 100 (Adam on near-zero gradients; measured, stops
# 13 and 33). So the weights are compared at COMPARE_AT, after the shrink and the grow-back and before that
# peak, to 1e-6; the run itself still trains to STEPS, frame 2 returns at once.
COMPARE_AT = 40  # [steps]: a checkpoint after the grow-back (its resume at step 30) and before the peak


def frame_cmd(run: Path, data: Path, elastic: bool) -> list[str]:
    agent = ["--min-world-size", "2", "--elastic-window-s", "3", "--restart-backoff-s", "0.5"] if elastic else []
    return [sys.executable, "-u", "-m", "cue_plugin.frame", "--world-size", "3", "--rendezvous", "file",
            "--rendezvous-timeout", "120", *agent, "--",
            "--input", str(data / "input"), "--target", str(data / "target"), "--run-dir", str(run),
            "--steps", str(STEPS), "--batch-size", "5", "--crop-size", "16", "--model-size", "small", "--seed", "11",
            "--checkpoint-interval", str(EVERY), "--log-interval", "1", "--contact-sheet-interval", "100000",
            "--collective-timeout-s", str(COLLECTIVE_TIMEOUT_S), "--gang-timeout-s", "60",
            "--keep-checkpoints", str(STEPS // EVERY),  # COMPARE_AT's checkpoint stays
            "--precision", "fp32",  # float32-exact comparison (module doc)
            "--optimizer", "adam"]  # the figures above were measured with Adam; state_at reads Adam's state


def start_frame(cmd: list[str], frame: int, log_dir: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COPYCAT_", "CUE", "CUDA_"))}
    env.update(PYTHONPATH=CHILD_PYTHONPATH, CUE_IFRAME=str(frame), CUETRAIN_MAIN_HOST="127.0.0.1", CUETRAIN_GANG_TOKEN=TOKEN,
               OMP_NUM_THREADS="1", CUETRAIN_EXPORT_ONNX="0")
    out = open(log_dir / f"frame_{frame}_{time.monotonic_ns()}.out", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def wait_for(what: str, check, procs: list[subprocess.Popen], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        dead = [p.args[-1] for p in procs if p.poll() not in (None, 0)]
        assert not dead, f"a frame failed while waiting for {what}"
        assert time.monotonic() < deadline, f"{what}: not after {timeout} s"
        time.sleep(0.1)


def publication(run: RunPaths) -> dict | None:
    try:
        return json.loads(run.rendezvous.read_text())
    except (OSError, ValueError):
        return None


def state_at(run: RunPaths, step: int) -> dict[str, torch.Tensor]:
    """The weights and Adam's state of ``run``'s checkpoint at ``step``, flattened into one dict."""
    assert step in dict(run.list_checkpoints()), (step, run.list_checkpoints())
    ckpt = torch.load(run.checkpoint(step), map_location="cpu", weights_only=True)
    out = {f"model.{k}": v for k, v in ckpt["model"].items()}
    for pid, state in ckpt["optimizer"]["state"].items():
        out.update({f"adam.{pid}.{k}": v for k, v in state.items() if torch.is_tensor(v)})
    return out


def trainers(agents: list[subprocess.Popen]) -> list[psutil.Process]:
    """The trainer processes the node agents ``agents`` run (their children)."""
    return [child for agent in agents for child in psutil.Process(agent.pid).children()]


def hold(procs: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in procs:
        proc.send_signal(sig)


def finish_all(procs: list[subprocess.Popen], timeout: float = 180) -> list[int]:
    return [p.wait(timeout) for p in procs]


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_gang_of_3_shrinks_to_2_and_grows_back_matching_an_uninterrupted_run(tmp_path):
    data = tmp_path / "data"
    make_pairs(data)
    logs = tmp_path / "out"
    logs.mkdir()

    ref = RunPaths.of(tmp_path / "reference")
    assert finish_all([start_frame(frame_cmd(ref.root, data, False), f, logs) for f in range(3)]) == [0, 0, 0]

    run = RunPaths.of(tmp_path / "elastic")
    cmd = frame_cmd(run.root, data, True)
    frames = {f: start_frame(cmd, f, logs) for f in range(3)}
    procs = list(frames.values())
    wait_for("step 2 x checkpoint", lambda: (read_metrics(run) or [{"step": 0}])[-1]["step"] >= 2 * EVERY, procs)
    assert (read_metrics(run) or [{"step": STEPS}])[-1]["step"] < STEPS // 2, "too fast to test: raise STEPS"
    os.killpg(frames[2].pid, signal.SIGKILL)  # frame 2's host is gone
    frames[2].wait()
    t_fault = time.monotonic()
    # The step reached at the fault, read once the kill is confirmed: the survivors cannot pass the step whose
    # all-reduce frame 2 never joined, so the last metrics line (one per step) is that step or the one before.
    reached = read_metrics(run)[-1]["step"]
    procs.remove(frames[2])
    wait_for("a gang of 2", lambda: (publication(run) or {}).get("members") == [0, 1], procs)
    t_shrunk = time.monotonic()
    wait_for("the 2-rank gang training", lambda: [a["world_size"] for a in read_record_or_empty(run).attempts] ==
             [3, 2] and read_record_or_empty(run).state == "running" and len(trainers(procs)) == 2, procs)
    held = trainers(procs)
    hold(held, signal.SIGSTOP)  # the 2-rank gang is held (module doc)
    t_held = time.monotonic()
    try:
        left = STEPS - (read_metrics(run) or [{"step": 0}])[-1]["step"]
        assert left > EVERY, f"the 2-rank gang was {left} steps from the end when held: too fast to test, raise STEPS"
        frames[2] = start_frame(cmd, 2, logs)  # the farm runs frame 2 again (a retry on another host)
        procs.append(frames[2])
        wait_for("frame 0's agent to see frame 2 back", lambda: "grows at its next checkpoint" in
                 run.rank_log(0).read_text(), procs, timeout=HOLD_S)
    finally:
        hold(held, signal.SIGCONT)
    print(f"the 2-rank gang was held {time.monotonic() - t_held:.1f} s while frame 2 came back")
    wait_for("a gang of 3 again", lambda: [a["world_size"] for a in read_record_or_empty(run).attempts] == [3, 2, 3],
             procs)
    t_grown = time.monotonic()
    assert finish_all(procs) == [0, 0, 0]

    record = read_record_or_empty(run)
    assert record.state == "succeeded" and record.final_step == STEPS
    sizes = [a["world_size"] for a in record.attempts]
    starts = [a["start_step"] for a in record.attempts]
    assert sizes == [3, 2, 3], sizes
    assert all(s % EVERY == 0 for s in starts) and starts[0] == 0 and starts[1] < starts[2], starts
    lost = reached - starts[1]
    assert 0 <= lost <= EVERY, f"the 2-rank gang resumed at step {starts[1]}, {lost} steps before the fault at " \
        f"step {reached}: more than one checkpoint interval ({EVERY}) lost"
    assert record.gang["restarts"] == 1 and record.gang["generation"] == 3  # the regroup is not a restart
    assert "grows at its next checkpoint" in run.rank_log(0).read_text()

    # Same seed and steps: the (seed, step) crops are split over whatever ranks there are, so the weights and
    # Adam's state match within float32 summation order (tests/trainer/gang/test_regroup.py measured 3e-8).
    assert run.list_checkpoints()[-1][0] == ref.list_checkpoints()[-1][0] == STEPS
    assert starts[2] < COMPARE_AT, f"the 3-rank gang grew back at step {starts[2]}: after COMPARE_AT"
    got, want = state_at(run, COMPARE_AT), state_at(ref, COMPARE_AT)
    assert got.keys() == want.keys()
    worst = max(float((got[k] - want[k]).abs().max()) for k in want)
    torch.manual_seed(11)  # the trainer's initial weights: seed, then build the model
    initial = build_model("small", TrainConfig("i", "t", "r").architecture_name).state_dict()
    moved = max(float((want[f"model.{k}"] - v).abs().max()) for k, v in initial.items())
    print(f"elastic 3->2->3: starts {starts}, fault at step {reached} ({lost} steps lost), shrunk {t_shrunk - t_fault:.1f} s after the fault, grew back "
          f"{t_grown - t_shrunk:.1f} s after frame 2 returned; max |diff| vs uninterrupted at step {COMPARE_AT} "
          f"{worst:.2e}")
    assert worst < 1e-6, worst
    assert moved > 1000 * 1e-6, moved  # training moved the weights far more than the tolerance

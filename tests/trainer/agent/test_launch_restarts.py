"""``cuetrain local`` restarts the gang by the same rules as a farm frame, and stops it within the grace order.

Issue 20's defects, each shown by a test that failed before the fix:
- rank 0's port was picked free and closed ("hope"), not reserved for the gang's life;
- a gang that exits 2 (bad input) was restarted ``--max-restarts`` times, printing the same error each time;
- a gang stopped by SIGTERM (a wrangler, systemd) was restarted, because the "terminated" flag was dropped;
- supervisors sent SIGKILL before the trainer's checkpoint grace ran out (the frame after 10 s, the trainer's
  default grace 20 s; a raised ``--stop-grace-s`` was ignored by ``cuetrain local``).

The ranks here are tiny stand-in scripts (the supervisor only sees processes and exit codes); each start
appends one line to a file, so the test counts gang starts.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trainer.agent import launch
from trainer.gang import stopvote as stop
from trainer.core.config import TrainConfig
from trainer.core.exitcodes import ExitCode

FAKE_RANK = textwrap.dedent("""
    import os, signal, sys, time
    with open(os.environ["STARTS_FILE"], "a") as fh:
        fh.write(os.environ["COPYCAT_RANK"] + "\\n")
    mode = os.environ["FAKE_MODE"]

    def every_rank_started():  # else a slow rank is stopped before it counts (a gang start is `world` lines)
        world, deadline = int(os.environ["COPYCAT_WORLD_SIZE"]), time.monotonic() + 10
        while len(open(os.environ["STARTS_FILE"]).read().splitlines()) % world and time.monotonic() < deadline:
            time.sleep(0.01)

    if mode == "usage":
        every_rank_started()
        print("cuetrain: error: frame sizes do not match", flush=True)
        sys.exit(2)
    if mode == "done_then_abort":  # rank 0 records the run as complete, then dies as in interpreter finalization
        if os.environ["COPYCAT_RANK"] == "0":
            every_rank_started()  # a fresh-clone suite once counted 1 start: rank 1 was stopped before it wrote
            import datetime, json
            now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            with open(os.path.join(os.environ["FAKE_RUN_DIR"], "run.json"), "w") as fh:
                json.dump({"version": 1, "state": "succeeded", "final_step": 4, "config": {"steps": 4},
                           "finished_at": now}, fh)
            os.abort()
        sys.exit(0)
    if mode == "port":  # another program tries to take rank 0's port while the gang runs
        import socket
        with socket.socket() as other:
            try:
                other.bind(("", int(os.environ["COPYCAT_MAIN_PORT"])))
            except OSError:
                sys.exit(0)
        sys.exit(10)
    if mode == "teardown":  # as the real rank: the stop checkpoint written, the default handler is back while it
        stopped = []        # tears down (DDP, gloo, the interpreter), which takes a while
        signal.signal(signal.SIGTERM, lambda *a: (stopped.append(1), signal.signal(signal.SIGTERM, signal.SIG_DFL)))
        deadline = time.monotonic() + 30
        while not stopped and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)
        sys.exit(75)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(75))  # a checkpoint written at the agreed step
    time.sleep(float(os.environ.get("FAKE_SLEEP_S", "4")))
    sys.exit(0)
""")


def _starts(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str) -> Path:
    script = tmp_path / "fake_rank.py"
    script.write_text(FAKE_RANK)
    starts = tmp_path / "starts.txt"
    monkeypatch.setattr(launch, "TRAINER_COMMAND", (sys.executable, str(script)))
    monkeypatch.setenv("STARTS_FILE", str(starts))
    monkeypatch.setenv("FAKE_MODE", mode)
    return starts


def test_local_gang_exiting_2_is_not_restarted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    starts = _fake(monkeypatch, tmp_path, "usage")
    code = launch.launch_local(["--run-dir", str(tmp_path / "run")], 2, str(tmp_path / "run"), max_restarts=2,
                               threads_per_rank=1)
    assert code == ExitCode.USAGE
    assert _starts(starts) == 2, "bad input gives the same error again: the gang must start once (2 ranks)"


def test_local_gang_whose_rank_dies_after_the_run_completed_is_not_restarted(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    """Failed before (3 gangs, exit 134): rank 0 recorded the run as succeeded at its last step, then aborted
    (seen in the elastic test: SIGABRT in interpreter finalization); the agent restarted a finished run."""
    starts = _fake(monkeypatch, tmp_path, "done_then_abort")
    monkeypatch.setenv("FAKE_RUN_DIR", str(tmp_path / "run"))
    code = launch.launch_local(["--run-dir", str(tmp_path / "run")], 2, str(tmp_path / "run"), max_restarts=2,
                               threads_per_rank=1)
    assert (code, _starts(starts)) == (0, 2)


def test_local_gang_port_is_reserved_while_the_gang_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Failed before: ``cuetrain local`` picked a free port and closed it, so any program could take it."""
    _fake(monkeypatch, tmp_path, "port")
    code = launch.launch_local(["--run-dir", str(tmp_path / "run")], 2, str(tmp_path / "run"), threads_per_rank=1)
    assert code == 0, f"a rank could bind rank 0's port {code == 10 and '(exit 10)' or code}: it was not reserved"


LOCAL_UNDER_SIGTERM = textwrap.dedent("""
    import sys
    from trainer.agent import launch
    launch.TRAINER_COMMAND = (sys.executable, sys.argv[1])
    sys.exit(launch.launch_local(["--run-dir", sys.argv[2]], 2, sys.argv[2], max_restarts=2, threads_per_rank=1))
""")


@pytest.mark.parametrize("mode", ["sleep", "teardown"])
def test_local_gang_stopped_by_sigterm_is_not_restarted(tmp_path: Path, mode: str) -> None:
    """``teardown`` failed before (exit 143; the lease test failed so once in a fresh clone's suite): the
    supervisor passed SIGTERM on, then sent every rank a second one while stopping the gang, which killed a rank
    whose stop checkpoint was written and whose handler was restored."""
    script = tmp_path / "fake_rank.py"
    script.write_text(FAKE_RANK)
    starts = tmp_path / "starts.txt"
    env = {**os.environ, "STARTS_FILE": str(starts), "FAKE_MODE": mode, "FAKE_SLEEP_S": "3"}
    proc = subprocess.Popen([sys.executable, "-c", LOCAL_UNDER_SIGTERM, str(script), str(tmp_path / "run")], env=env)
    try:
        deadline = time.monotonic() + 30
        while _starts(starts) < 2:  # both ranks are up
            assert time.monotonic() < deadline, "the ranks never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == ExitCode.STOPPED, "a stopped gang ends with the ranks' 75, not a restarted gang's result"
    assert _starts(starts) == 2, "SIGTERM means stop: the gang must not be started again"


def test_supervisors_kill_strictly_after_the_trainer_checkpoint_grace() -> None:
    from cue_plugin.node import frame

    trainer_grace = next(f.default for f in dataclasses.fields(TrainConfig) if f.name == "stop_grace_s")
    assert trainer_grace == stop.DEFAULT_GRACE_S
    for name, kill_after in (("cue_plugin.frame", frame.STOP_GRACE_S), ("trainer.agent.launch", launch.STOP_GRACE_S),
                             ("trainer.gang.stopvote", stop.SUPERVISOR_GRACE_S)):
        assert kill_after > trainer_grace, f"{name} sends SIGKILL {kill_after} s after SIGTERM, before the " \
                                           f"trainer's {trainer_grace} s checkpoint grace ends"


def test_local_supervisor_waits_longer_than_a_raised_stop_grace(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    seen: list[float] = []

    def fake_run_ranks(command, envs, logs, *, stop_grace_s, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(stop_grace_s)
        from trainer.agent.supervise import GangExit
        return GangExit(0)

    monkeypatch.setattr(launch, "run_ranks", fake_run_ranks)
    for argv in (["--stop-grace-s", "45"], ["--stop-grace-s=45"]):
        launch.launch_local(["--run-dir", str(tmp_path), *argv], 1, str(tmp_path), threads_per_rank=1)
    assert len(seen) == 2 and all(s > 45 for s in seen), seen

"""A rank dies with the supervisor that started it (trainer.core.signals.die_with_supervisor).

The defect this guards (a fresh clone's CI, the soak's run 3): ``cuetrain local`` killed with SIGKILL left its two
ranks training on, in their own sessions, unaware; the restarted supervisor's gang trained in the same run
directory, and the old rank 0, once its rank 1 was gone, recorded the finished run ``failed``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import CHILD_PYTHONPATH, ROOT
from trainer.core.envvars import EnvError, read_agent_pid_env
from trainer.core.signals import die_with_supervisor

# a rank: calls die_with_supervisor(argv[1]), writes what it returned to argv[2], then lives 60 s
RANK = textwrap.dedent("""
    import sys, time
    from trainer.core.signals import die_with_supervisor
    result = die_with_supervisor(int(sys.argv[1]))
    with open(sys.argv[2] + ".tmp", "w") as fh:
        fh.write(str(result))
    import os; os.replace(sys.argv[2] + ".tmp", sys.argv[2])
    time.sleep(60)
""")
# a supervisor: starts the rank in its own session (as cuetrain local does), naming SUPERVISOR as its supervisor
# ("self": this process), prints the rank's pid, then lives 60 s
AGENT = textwrap.dedent("""
    import os, subprocess, sys, time
    supervisor = os.getpid() if sys.argv[1] == "self" else int(sys.argv[1])
    rank = subprocess.Popen([sys.executable, "-c", sys.argv[2], str(supervisor), sys.argv[3]], start_new_session=True)
    print(rank.pid, flush=True)
    time.sleep(60)
""")


def _start(tmp_path: Path, supervisor: str) -> tuple[subprocess.Popen[str], psutil.Process, Path]:
    said = tmp_path / "said.txt"
    agent = subprocess.Popen([sys.executable, "-c", AGENT, supervisor, RANK, str(said)], stdout=subprocess.PIPE,
                             text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH})
    rank = psutil.Process(int(agent.stdout.readline()))
    return agent, rank, said


def _wait_for(path: Path, rank: psutil.Process) -> str:
    deadline = time.monotonic() + 30
    while not path.exists():
        if _ended(rank) or time.monotonic() > deadline:
            return ""
        time.sleep(0.02)
    return path.read_text()


def _ended(rank: psutil.Process) -> bool:
    """True once ``rank`` has ended (a zombie its living parent has not reaped counts as ended)."""
    try:
        return rank.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _gone(rank: psutil.Process, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _ended(rank):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _cleanup(*procs: object) -> None:
    for proc in procs:
        try:
            proc.kill()  # type: ignore[attr-defined]
        except (psutil.Error, ProcessLookupError, OSError):
            pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_rank_dies_within_seconds_of_its_supervisors_sigkill(tmp_path: Path) -> None:
    agent, rank, said = _start(tmp_path, "self")
    try:
        assert _wait_for(said, rank) == "True", "the death signal was not set"
        agent.kill()
        agent.wait()
        assert _gone(rank, 10), "the rank outlived its supervisor's SIGKILL by 10 s: an orphaned gang trains on"
    finally:
        _cleanup(agent, rank)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_rank_whose_supervisor_is_already_gone_ends_at_once(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that was a process and is none now (not the rank's parent)
    agent, rank, said = _start(tmp_path, str(dead.pid))
    try:
        assert _wait_for(said, rank) == "", "the rank went on after naming a supervisor that had died"
        assert _gone(rank, 10)
    finally:
        _cleanup(agent, rank)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_rank_under_a_wrapper_lives_while_its_supervisor_does(tmp_path: Path) -> None:
    agent, rank, said = _start(tmp_path, str(os.getpid()))  # the supervisor (this test) lives; its parent is another
    try:
        assert _wait_for(said, rank) == "True"
        time.sleep(0.3)
        assert rank.is_running() and rank.status() != psutil.STATUS_ZOMBIE
    finally:
        _cleanup(agent, rank)


def test_without_a_supervisor_nothing_is_set() -> None:
    assert die_with_supervisor(None) is False


def test_the_supervisor_pid_variable_is_read_and_checked() -> None:
    assert read_agent_pid_env({}) is None
    assert read_agent_pid_env({"CUETRAIN_AGENT_PID": " 4242 "}) == 4242
    with pytest.raises(EnvError, match=r"CUETRAIN_AGENT_PID='vm:12' is not a process id.*unset it"):
        read_agent_pid_env({"CUETRAIN_AGENT_PID": "vm:12"})


def test_a_rank_with_a_bad_supervisor_pid_exits_2_naming_it() -> None:
    env = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, "CUETRAIN_AGENT_PID": "0"}
    done = subprocess.run([sys.executable, "-m", "trainer", "--help"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "CUETRAIN_AGENT_PID='0'" in done.stderr, done.stderr

"""How a rank process ends (trainer.core.signals.exit_rank): its exit code is its own, whatever finalization does.

Each test's child registers ``os.abort`` with ``atexit``: it stands for torch's C++ destructors aborting the
interpreter's finalization ("terminate called without an active exception", exit 134, seen once after a rank
had trained to its last step). Before exit_rank every one of these children exited -6 (SIGABRT).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.conftest import CHILD_PYTHONPATH, ROOT
from trainer.core.exitcodes import ExitCode

ABORT_AT_FINALIZATION = "import atexit, os; atexit.register(os.abort)"  # what a C++ destructor's terminate does


def child(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COPYCAT_", "MASTER_", "RANK", "WORLD_SIZE"))}
    env.update(PYTHONPATH=CHILD_PYTHONPATH, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-c", f"{ABORT_AT_FINALIZATION}\n{code}"], env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout)


def run_module(module: str, *args: str) -> str:
    """Child code that runs ``python -m module args`` (what a supervisor starts) after the abort is registered."""
    return f"import runpy, sys\nsys.argv = {[module, *args]!r}\nrunpy.run_module({module!r}, run_name='__main__')"


def test_a_rank_that_trained_to_the_end_exits_0_even_if_finalization_would_abort(pairs, tmp_path):
    inp, tgt = pairs
    run = tmp_path / "run"
    done = child(run_module("trainer", "--input", str(inp), "--target", str(tgt), "--run-dir", str(run),
                            "--steps", "2", "--batch-size", "2", "--crop-size", "16", "--log-interval", "1"))
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((run / "run.json").read_text())
    assert (record["state"], record["final_step"]) == ("succeeded", 2)
    assert "[Step:2/2]" in done.stdout  # the streams were flushed before the process ended
    assert "model small" in done.stderr  # and the logging handlers


def test_bad_input_keeps_its_exit_code_and_message_through_trainer_cli(tmp_path):
    missing = tmp_path / "nowhere"
    done = child(run_module("trainer.cli", "train", "--input", str(missing), "--target", str(missing),
                            "--run-dir", str(tmp_path / "run"), "--steps", "1"))
    assert done.returncode == ExitCode.USAGE, done.stderr[-3000:]
    assert "cuetrain: error:" in done.stderr and str(missing) in done.stderr


def test_an_uncaught_exception_prints_its_traceback_and_exits_1():
    done = child("from trainer.core.signals import exit_rank\nexit_rank(lambda: 1 / 0)")
    assert done.returncode == 1 and "ZeroDivisionError" in done.stderr and "Traceback" in done.stderr


def test_a_system_exit_message_is_printed_and_exits_1_and_a_code_is_kept():
    said = child("import sys\nfrom trainer.core.signals import exit_rank\n"
                 "exit_rank(lambda: sys.exit('no such shot'))")
    assert (said.returncode, said.stderr.strip()) == (1, "no such shot")
    coded = child("import sys\nfrom trainer.core.signals import exit_rank\nexit_rank(lambda: sys.exit(75))")
    assert coded.returncode == 75


def test_an_uncaught_keyboard_interrupt_ends_the_process_by_sigint():
    done = child("from trainer.core.signals import exit_rank\n"
                 "def stop():\n    raise KeyboardInterrupt\nexit_rank(stop)")
    assert done.returncode == -signal.SIGINT, (done.returncode, done.stderr)


def test_the_cuetrain_console_script_ends_as_a_rank_does():
    """pyproject's ``cuetrain`` entry point is ``console_main``: with finalization set to abort, a bad argument
    still exits with its own code (2) and message, so a hand-started ``cuetrain train`` rank cannot end in 134."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, func = scripts["cuetrain"].split(":")
    done = child(f"import sys\nsys.argv = ['cuetrain', 'train', '--steps', '1']\n"
                 f"from {module} import {func}\n{func}()")
    assert done.returncode == ExitCode.USAGE, (done.returncode, done.stderr[-3000:])
    assert "cuetrain: error: missing required argument(s)" in done.stderr

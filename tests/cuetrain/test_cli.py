"""The front door (cuetrain/cli.py): one ``cuetrain`` for the trainer's, the farm's and the GUI's commands."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import CHILD_PYTHONPATH, ROOT
from cuetrain.cli import OTHER_COMMANDS, main


def test_help_lists_every_command_of_the_three_packages(capsys):
    try:
        main(["--help"])
    except SystemExit as exc:
        assert exc.code == 0
    out = capsys.readouterr().out
    for command in ("train", "local", "infer", "demo", "advise", *OTHER_COMMANDS):
        assert f"    {command} " in out or f"    {command}\n" in out, command


def test_farm_commands_go_to_the_farm_and_trainer_commands_to_the_trainer(pairs, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SHOW", "demo")
    monkeypatch.setenv("SHOT", "sh010")
    argv = ["--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir", str(tmp_path / "run")]
    assert main(["submit", "--template", "cpu-test", "--dry-run", *argv]) == 0
    assert "-m cue_plugin.frame --frame '#IFRAME#'" in capsys.readouterr().out
    assert main(["local", "--world-size", "0", *argv]) == 2  # the trainer's own check and exit code
    assert "--world-size 0 must be >= 1" in capsys.readouterr().err


def test_output_into_a_closed_pipe_ends_quietly_with_exit_1(pairs, tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (e.g. `| head`) is gone before the command writes
    env = {**os.environ, "SHOW": "demo", "SHOT": "sh010", "PYTHONPATH": CHILD_PYTHONPATH}
    done = subprocess.run([sys.executable, "-m", "cuetrain", "submit", "--template", "cpu-test", "--dry-run",
                           "--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir", str(tmp_path / "run")],
                          stdout=write_end, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT, timeout=120)
    os.close(write_end)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr

"""Trust boundaries of a run directory (see docs/failure_handling.md, "Trust boundaries").

- Checkpoints are data, never code: they load with ``weights_only=True``, so a file in
  ``checkpoints/`` that would run code when unpickled is skipped, not executed.
- Run-directory files are group-readable (artists and wranglers of the show read them) and none is
  world-writable (nobody outside the group can plant a checkpoint or edit run.json).
- The gang needs the per-job token: a process without it cannot join. That is tested where the
  gang is, ``tests/trainer/gang/test_formation.py::test_wrong_token_cannot_join`` (and the signed
  rendezvous publication in ``tests/cue_plugin/test_rendezvous.py::
  test_a_publication_of_another_job_is_not_used``); not repeated here.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import CHILD_PYTHONPATH, ROOT
from trainer.learn.run_writer import load_latest_checkpoint
from trainer.record.rundir import RunPaths


class PlantedCode:
    """Unpickling this calls ``open(marker, "w")``: a stand-in for any code an attacker could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_a_checkpoint_that_would_run_code_is_skipped_not_executed(tmp_path, caplog):
    paths = RunPaths.of(tmp_path)
    paths.create()
    marker = tmp_path / "code-ran"
    torch.save({"model": {"w": torch.ones(2)}, "step": 2}, paths.checkpoint(2))
    torch.save({"model": {"w": torch.zeros(2)}, "step": 3, "extra": PlantedCode(marker)}, paths.checkpoint(3))
    with caplog.at_level(logging.WARNING, logger="trainer.learn.run_writer"):
        ckpt = load_latest_checkpoint(paths)
    assert not marker.exists()  # nothing ran
    assert ckpt["step"] == 2 and torch.equal(ckpt["model"]["w"], torch.ones(2))  # the newest SAFE checkpoint
    assert f"skipping unreadable checkpoint {paths.checkpoint(3)}" in caplog.text
    torch.load(paths.checkpoint(3), weights_only=False)  # control: the file really runs code when trusted
    assert marker.exists()


def test_only_planted_checkpoints_means_a_fresh_start(tmp_path):
    paths = RunPaths.of(tmp_path)
    paths.create()
    torch.save({"step": 5, "x": PlantedCode(tmp_path / "code-ran")}, paths.checkpoint(5))
    assert load_latest_checkpoint(paths) is None and not (tmp_path / "code-ran").exists()


def short_local_run(pairs, run: Path, umask: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COPYCAT_", "CUETRAIN_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=CHILD_PYTHONPATH)
    args = ["local", "--world-size", "2", "--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir", str(run),
            "--steps", "4", "--batch-size", "2", "--crop-size", "16", "--log-interval", "2",
            "--checkpoint-interval", "2", "--contact-sheet-interval", "2"]
    return subprocess.run([sys.executable, "-m", "trainer.cli", *args], env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=180, umask=umask)


def modes(run: Path) -> dict[str, int]:
    out = {}
    for folder, dirs, files in os.walk(run):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            out[str(path.relative_to(run))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def test_run_directory_is_group_readable_and_never_world_writable(pairs, tmp_path):
    run = tmp_path / "run"
    done = short_local_run(pairs, run, umask=0o022)  # the usual login umask
    assert done.returncode == 0, done.stdout + done.stderr
    found = modes(run)
    assert {"run.json", "metrics.jsonl", "model.pt", "model.json", "logs/rank_0.log", "logs/rank_1.log",
            "checkpoints/step_000004.pt", "contact_sheets/step_000004.png"} <= set(found)
    for name, mode in found.items():
        is_dir = (run / name).is_dir()
        assert mode & stat.S_IRGRP and (not is_dir or mode & stat.S_IXGRP), f"{name} {oct(mode)} not group-readable"
        assert not mode & stat.S_IWOTH, f"{name} {oct(mode)} is world-writable"
    assert not [n for n in found if n.endswith(".tmp") or "/." in f"/{n}"]  # no temp files left


def test_run_directory_is_never_world_writable_even_with_umask_0(pairs, tmp_path):
    run = tmp_path / "run"
    done = short_local_run(pairs, run, umask=0)
    assert done.returncode == 0, done.stdout + done.stderr
    writable = {n: oct(m) for n, m in modes(run).items() if m & stat.S_IWOTH}
    assert not writable

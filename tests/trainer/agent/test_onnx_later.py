"""``cuetrain local`` leaves model.onnx to a detached process started once the gang succeeded (trainer.agent.launch,
trainer.export.deferred): its ranks train with CUETRAIN_EXPORT_ONNX=0, and model.json marks model.onnx pending.

The ranks and the export here are tiny stand-in scripts: the supervisor only sees processes, environments and files.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
import time
from pathlib import Path

import pytest

from trainer.agent import launch
from trainer.export import deferred

FAKE_RANK = textwrap.dedent("""
    import json, os, sys
    run = os.environ["FAKE_RUN_DIR"]
    with open(os.path.join(run, f"onnx_env_{os.environ['COPYCAT_RANK']}.txt"), "w") as fh:
        fh.write(os.environ.get("CUETRAIN_EXPORT_ONNX", "unset"))
    if os.environ["COPYCAT_RANK"] == "0":
        with open(os.path.join(run, "model.json"), "w") as fh:
            json.dump({"exports": {"model.pt": {}}}, fh)
    sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
""")
FAKE_EXPORT = textwrap.dedent("""
    import json, os, sys
    print("fake export", " ".join(sys.argv[1:]), "session leader:", os.getsid(0) == os.getpid(), flush=True)
    print("lease:", os.environ.get("CUETRAIN_RUN_LEASE", "none"), flush=True)
""")


@pytest.fixture()
def fakes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The run directory; ranks and the export replaced by the scripts above."""
    rank, export = tmp_path / "fake_rank.py", tmp_path / "fake_export.py"
    rank.write_text(FAKE_RANK)
    export.write_text(FAKE_EXPORT)
    run = tmp_path / "run"
    monkeypatch.setattr(launch, "TRAINER_COMMAND", (sys.executable, str(rank)))
    monkeypatch.setattr(launch, "EXPORT_COMMAND", (sys.executable, str(export), "--background"))
    monkeypatch.setenv("FAKE_RUN_DIR", str(run))
    return run


def _export_log(run: Path, timeout_s: float = 20.0, lines: int = 1) -> str:
    """``logs/export.log`` once the detached export wrote its ``lines`` lines."""
    path, deadline = run / "logs" / "export.log", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().endswith("\n") and path.read_text().count("\n") >= lines:
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written")


def test_the_two_rooms_name_the_pending_key_alike():
    assert launch.PENDING_KEY == deferred.PENDING_KEY


def test_ranks_skip_onnx_and_a_detached_export_follows_the_gang(fakes, monkeypatch, caplog):
    monkeypatch.setenv("CUETRAIN_EXPORT_ONNX", "1")
    with caplog.at_level(logging.INFO, logger="trainer.agent.launch"):
        assert launch.launch_local(["--run-dir", str(fakes)], 2, str(fakes), threads_per_rank=1) == 0
    assert [(fakes / f"onnx_env_{r}.txt").read_text() for r in (0, 1)] == ["0", "0"]
    assert json.loads((fakes / "model.json").read_text())[deferred.PENDING_KEY] == ["model.onnx"]
    lines = _export_log(fakes, lines=2).splitlines()
    assert lines[0] == f"fake export --background --run-dir {fakes} session leader: True"
    assert "model.onnx: written in the background by pid" in caplog.text
    # the supervisor handed its lease to the export instead of removing it: no other run writes here meanwhile
    assert lines[1] == f"lease: {json.loads((fakes / 'lease.json').read_text())['holder']}"


def test_without_onnx_the_ranks_environment_is_left_alone_and_nothing_follows(fakes, monkeypatch):
    monkeypatch.setenv("CUETRAIN_EXPORT_ONNX", "0")
    assert launch.launch_local(["--run-dir", str(fakes)], 2, str(fakes), threads_per_rank=1) == 0
    assert [(fakes / f"onnx_env_{r}.txt").read_text() for r in (0, 1)] == ["0", "0"]
    assert deferred.PENDING_KEY not in json.loads((fakes / "model.json").read_text())
    assert not (fakes / "logs" / "export.log").exists()


def test_a_failed_gang_starts_no_export(fakes, monkeypatch):
    monkeypatch.setenv("CUETRAIN_EXPORT_ONNX", "1")
    monkeypatch.setenv("FAKE_EXIT", "2")
    assert launch.launch_local(["--run-dir", str(fakes)], 2, str(fakes), threads_per_rank=1) == 2
    assert deferred.PENDING_KEY not in json.loads((fakes / "model.json").read_text())
    assert not (fakes / "logs" / "export.log").exists()

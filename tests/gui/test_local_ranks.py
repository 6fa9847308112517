"""The Ranks column counts a local run's live rank processes (no farm to ask)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from gui.localranks import count_local_ranks

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="rank processes are counted in /proc")


def _rank_like(run_dir, cwd) -> subprocess.Popen:
    """A process with a rank's command line (``... -m trainer --run-dir DIR``) that only sleeps."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-m", "trainer",
                             "--run-dir", str(run_dir)], cwd=cwd)


def _run_json(run_dir, host: str) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"state": "running", "world_size": 2,
                                                  "attempts": [{"attempt": 1, "host": host}]}))


def test_ranks_column_shows_live_local_ranks(controller, tmp_path):
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    _run_json(here, socket.gethostname())
    _run_json(elsewhere, "another-host")
    procs = [_rank_like("here", tmp_path), _rank_like(here, "/"), _rank_like(elsewhere, "/")]  # relative + absolute
    try:
        controller.add_run(str(here))
        controller.add_run(str(elsewhere))
        controller.poll_now()
        assert count_local_ranks()[str(here)] == 2
        assert controller.run(str(here)).ranks_text == "2/2"
        assert controller.run(str(elsewhere)).ranks_text == "-/2"  # ran on another machine: not counted here
        procs[0].kill()
        procs[0].wait()
        controller.poll_now()
        assert controller.run(str(here)).ranks_text == "1/2"
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()

"""A ``cuetrain local`` killed with SIGKILL takes its ranks with it (trainer.core.signals.die_with_supervisor).

Before: the ranks, each in its own session, trained on after their supervisor died, writing checkpoints and
``run.json`` into the run directory beside the gang of a restarted supervisor; the soak once saw the old rank 0
record the new gang's finished run ``failed`` (its rank 1 had gone).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from tests.conftest import CHILD_PYTHONPATH, ROOT
from trainer.record.recordlock import remove_stale_temp_files
from trainer.record.rundir import RunPaths


def test_the_ranks_of_a_killed_cuetrain_local_die_with_it_and_write_no_more(pairs, tmp_path):
    run = RunPaths.of(tmp_path / "run")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": CHILD_PYTHONPATH}
    args = ["local", "--world-size", "2", "--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir",
            str(run.root), "--steps", "100000", "--batch-size", "2", "--crop-size", "16", "--checkpoint-interval", "10",
            "--log-interval", "100000"]
    launcher = subprocess.Popen([sys.executable, "-m", "trainer.cli", *args], env=env, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ranks: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while not run.list_checkpoints():  # both ranks are training
            assert time.monotonic() < deadline and launcher.poll() is None, "the gang never wrote a checkpoint"
            time.sleep(0.1)
        ranks = [c for c in psutil.Process(launcher.pid).children() if "COPYCAT_RANK" in c.environ()]
        assert len(ranks) == 2
        launcher.kill()
        launcher.wait()
        _, alive = psutil.wait_procs(ranks, timeout=10)
        assert not alive, f"ranks {[p.environ()['COPYCAT_RANK'] for p in alive]} outlived cuetrain local by 10 s"
        written = sorted(run.root.rglob("*"))
        time.sleep(1.0)
        assert sorted(run.root.rglob("*")) == written
        # a write the kill cut (a checkpoint's temp file, as RQD's killpg leaves one) is what the next start removes;
        # a lease renewal's is swept by the next claim once the lease's ttl has passed (trainer.record.lease)
        remove_stale_temp_files(run)
        assert not [p for p in run.root.rglob("*.tmp") if not p.name.startswith((".lease.", "..lease."))]
    finally:
        for proc in ranks:
            try:
                proc.kill()
            except psutil.Error:
                pass
        if launcher.poll() is None:
            launcher.kill()

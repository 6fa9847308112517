"""``run.json`` writers in several processes (submit, frame 0's agent, rank 0) lose nothing.

Before issue 20 every writer read, merged and rewrote the file with no lock: two writers that read the
same version both wrote, and the later one dropped the earlier one's change (commit f4036ee fixed one
lost ``job_id``; the race remained). Here 3 processes each record :data:`ATTEMPTS` attempts (read the
attempts list, append, write: the same read-merge-write every writer does) and update ``farm`` at the
same time; every attempt and the last farm write must survive.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from trainer.record import runrecord
from trainer.record.rundir import RunPaths

ATTEMPTS = 25  # per writer process
WRITERS = 3

WRITER = textwrap.dedent("""
    import sys, time
    from trainer.record import runrecord
    from trainer.record.rundir import RunPaths
    paths = RunPaths.of(sys.argv[1])
    me = int(sys.argv[2])
    start = float(sys.argv[3])
    while time.time() < start:  # start together
        time.sleep(0.001)
    for i in range(int(sys.argv[4])):
        runrecord.start_attempt(paths, config={"steps": 10}, world_size=1, start_step=i, backend="gloo",
                                host=f"writer{me}", pid=me, versions={})
        runrecord.update_record(paths, farm={"job_id": f"job-{me}-{i}"})
""")


def test_concurrent_writers_from_3_processes_lose_nothing(tmp_path: Path) -> None:
    import time

    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    start = time.time() + 1.5
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(paths.root), str(me), str(start), str(ATTEMPTS)],
                              env=env) for me in range(WRITERS)]
    assert [p.wait(timeout=120) for p in procs] == [0] * WRITERS
    record = runrecord.read_record(paths)
    hosts = [a["host"] for a in record.attempts]
    assert len(record.attempts) == WRITERS * ATTEMPTS, f"lost {WRITERS * ATTEMPTS - len(record.attempts)} attempt(s)"
    assert [a["attempt"] for a in record.attempts] == list(range(1, WRITERS * ATTEMPTS + 1))
    assert {h: hosts.count(h) for h in set(hosts)} == {f"writer{me}": ATTEMPTS for me in range(WRITERS)}
    assert record.farm["job_id"].endswith(f"-{ATTEMPTS - 1}")  # some writer's last farm write is the final one
    assert not list(paths.root.glob(".*.tmp*")) and not list(paths.root.glob("*.tmp"))  # nothing half-written


def test_the_lock_file_is_beside_run_json_and_survives(tmp_path: Path) -> None:
    paths = RunPaths.of(tmp_path)
    runrecord.update_record(paths, state="starting")
    runrecord.update_record(paths, state="running")
    assert runrecord.read_record(paths).state == "running"
    assert (tmp_path / "run.json.lock").exists()  # never removed: removing it would let two writers lock two files

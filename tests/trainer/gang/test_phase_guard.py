"""No hangs after the gang formed (issue 9): process-group creation and the first collective are bounded,
and a rank that fails there stops the others (trainer.gang.formation.PhaseGuard). Loopback only."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.conftest import CHILD_PYTHONPATH, ROOT
from trainer.core.ports import free_port

BLOCKED = r"""
import sys, time
from trainer.gang import formation as gang
from trainer.core.envvars import DistEnv
env = DistEnv(True, rank=0, world_size=2, main_addr="127.0.0.1", main_port=int(sys.argv[1]))
store = gang.connect(env, 10, master=True)
guard = gang.PhaseGuard(env, "host h, interface lo 127.0.0.1", 1.0, on_abort=lambda e: print("recorded", e.exit_code))
with guard.phase("process-group creation"):
    time.sleep(60)  # stands for gloo blocked in C++ waiting for a peer that cannot connect
"""


def test_a_phase_blocked_past_its_timeout_ends_the_process_with_one_line_and_exit_3():
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-c", BLOCKED, str(free_port())], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH})
    took = time.monotonic() - t0
    assert done.returncode == 3, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("cuetrain: error:")]
    assert errors == ["cuetrain: error: rank 0 (host h, interface lo 127.0.0.1): process-group creation did not finish "
                      "within 1 s (--collective-timeout-s): a rank cannot connect to another; set COPYCAT_LOCAL_ADDR "
                      "on the failing ranks to the interface that reaches the other hosts (every rank logs its "
                      "'collective interface' and why), and allow TCP between the hosts"], done.stderr
    assert "recorded 3" in done.stdout and "Traceback" not in done.stderr
    assert took < 40, took  # not the 60 s the phase would have blocked


def test_a_rank_whose_gloo_cannot_start_stops_its_peer_too(pairs, tmp_path):
    """Rank 1's gloo cannot use its interface; rank 0 (which could wait in connectFullMesh) stops with its reason."""
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("COPYCAT_", "GLOO_", "NCCL_"))}
    base.update(OMP_NUM_THREADS="1", PYTHONPATH=CHILD_PYTHONPATH, COPYCAT_MAIN_ADDR="127.0.0.1", COPYCAT_MAIN_PORT=str(port),
                COPYCAT_WORLD_SIZE="2")
    args = [sys.executable, "-m", "trainer.cli", "train", "--input", str(pairs[0]), "--target", str(pairs[1]),
            "--run-dir", str(tmp_path / "run"), "--steps", "2", "--batch-size", "2", "--crop-size", "16",
            "--collective-timeout-s", "60"]
    envs = [{**base, "COPYCAT_RANK": "0"}, {**base, "COPYCAT_RANK": "1", "GLOO_SOCKET_IFNAME": "nosuchif0"}]
    t0 = time.monotonic()
    procs = [subprocess.Popen(args, cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for e in envs]
    outs = [p.communicate(timeout=120) for p in procs]
    took = time.monotonic() - t0
    assert [p.returncode for p in procs] == [3, 3], outs
    err0, err1 = (o[1] for o in outs)
    assert "rank 1 (host " in err1 and "interface nosuchif0" in err1 and "process-group creation failed" in err1
    assert "cuetrain: error: rank 0 (host " in err0 and "stops during process-group creation: rank 1 (host" in err0
    assert "Traceback" not in err0 + err1
    assert took < 50, took  # well inside the 60 s collective timeout: rank 1 told rank 0


THREE = r"""
import sys, time
from trainer.gang import formation as gang
from trainer.core.envvars import DistEnv
rank = int(sys.argv[2])
env = DistEnv(True, rank=rank, world_size=3, main_addr="127.0.0.1", main_port=int(sys.argv[1]))
if rank == 0:
    store = gang.connect(env, 10, master=True)
if rank == 2:
    gang.GUARD_POLL_S = 3.0  # a loaded rank: its guard looks at the store late
guard = gang.PhaseGuard(env, f"host h{rank}, interface lo 127.0.0.1", 30.0)
try:
    with guard.phase("process-group creation"):
        if rank == 1:
            time.sleep(1.0)
            raise RuntimeError("Connection refused")  # stands for gloo failing on this rank's interface
        time.sleep(60)  # gloo blocked in C++ waiting for the failed peer
except gang.GangError as exc:  # as trainer.cli ends a rank
    sys.exit(exc.exit_code)
"""


def test_rank_0_keeps_the_store_until_a_slow_rank_has_read_why_the_gang_aborts():
    """Failed before (the multihost test d under load): rank 0 read rank 1's abort reason and exited at once, so a
    rank whose guard looked later found the store gone and said only "lost the gang's store ... rank 0 exited"."""
    port = str(free_port())
    env = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH}
    procs = []
    for rank in range(3):
        procs.append(subprocess.Popen([sys.executable, "-c", THREE, port, str(rank)], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        time.sleep(0.5 if rank == 0 else 0.0)  # rank 0's store first
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [3, 3, 3], outs
    err2 = outs[2][1]
    assert "lost the gang's store" not in err2, err2
    assert "cuetrain: error: rank 2 (host h2, interface lo 127.0.0.1) stops during process-group creation: rank 1 " \
           "(host h1" in err2, err2


def test_a_backend_misuse_is_not_reported_as_a_network_failure():
    """Two ranks on one GPU made NCCL fail with ncclInvalidUsage, and the error advised COPYCAT_LOCAL_ADDR."""
    from trainer.gang.formation import BackendError, connect_failure
    from trainer.record.runrecord import FailureKind

    nccl = RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:3325, invalid usage (run with NCCL_DEBUG=WARN for "
                        "details), NCCL version 2.27.5\nncclInvalidUsage: This usually reflects invalid usage of NCCL")
    err = connect_failure(1, "host h, interface lo 127.0.0.1", "the first collective", nccl)
    assert isinstance(err, BackendError) and err.kind is FailureKind.ERROR and err.exit_code == 3
    assert "COPYCAT_LOCAL_ADDR" not in str(err) and "ncclInvalidUsage" in str(err)
    assert str(err).startswith("rank 1 (host h, interface lo 127.0.0.1): the first collective failed: RuntimeError:")

    refused = connect_failure(1, "host h", "process-group creation", RuntimeError("Connection refused"))
    assert not isinstance(refused, BackendError) and refused.kind is FailureKind.NETWORK
    assert "set COPYCAT_LOCAL_ADDR on the failing ranks" in str(refused)

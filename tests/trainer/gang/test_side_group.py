"""The stop vote's and the shot watch's gloo groups end a collective at --collective-timeout-s, like the default group.

``torch.distributed.new_group`` without a timeout takes gloo's default of 30 minutes: a rank SIGSTOPped while its peer
waited in one of those groups stalled the gang for as long as the stop lasted, with no timeout and no restart (the
lost run of the 100-fault soak, docs/failure_handling.md "Randomized fault soak").
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import CHILD_PYTHONPATH, ROOT
from trainer.core.ports import free_port

TIMEOUT_S = 2  # --collective-timeout-s of the two ranks [s]

# Each rank joins the gang, makes the group under test; rank 1 then stops itself (SIGSTOP, as the soak does) and
# rank 0 runs one collective on that group and says how it ended.
RANK = r"""
import os, signal, sys, time
from trainer.core.envvars import DistEnv
from trainer.gang import distributed
from trainer.gang.stopvote import GangStop, StopSignal
from trainer.data.shot_loading import ShotWatch

what, rank, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rt = distributed.setup(DistEnv(True, rank, 2, "127.0.0.1", port), collective_timeout_s=float(sys.argv[4]),
                       gang_timeout_s=30)

class Unchanged:
    def changes(self):
        return ""

if what == "shotwatch":
    watch = ShotWatch(Unchanged(), f"rank {rank}", rt, every=1, interval_s=3600)
    collective = lambda: watch(0)
else:
    vote = GangStop(StopSignal(60), True, lambda: distributed.side_group(rt))
    collective = lambda: (vote.poll(), vote.poll())  # the second poll waits for the first's all-reduce
if rank == 1:
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(0)
time.sleep(0.5)  # rank 1 is stopped by now
t = time.monotonic()
try:
    collective()
    print(f"completed after {time.monotonic() - t:.1f} s", flush=True)
except Exception as exc:
    print(f"raised after {time.monotonic() - t:.1f} s: {type(exc).__name__}", flush=True)
os._exit(0)
"""


@pytest.mark.parametrize("what", ["shotwatch", "stopvote"])
def test_a_collective_of_a_side_group_with_a_stopped_peer_raises_at_the_collective_timeout(what):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COPYCAT_", "CUETRAIN_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=CHILD_PYTHONPATH)
    port = free_port()
    ranks = [subprocess.Popen([sys.executable, "-c", RANK, what, str(r), str(port), str(TIMEOUT_S)], env=env,
                              cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(2)]
    try:
        # gloo's default for a group made without a timeout is 30 minutes: rank 0 would still be waiting at 60 s
        out, _ = ranks[0].communicate(timeout=60)
    except subprocess.TimeoutExpired:
        ranks[0].kill()
        out = ranks[0].communicate()[0]
        pytest.fail(f"rank 0 still waited on its stopped peer after 60 s (collective timeout {TIMEOUT_S} s):\n{out}")
    finally:
        for p in ranks:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait()
    line = next((x for x in out.splitlines() if x.startswith(("raised", "completed"))), "")
    assert line.startswith("raised after"), out
    assert float(line.split()[2]) < TIMEOUT_S + 8, out  # the collective timeout, not the length of the stop


def test_a_side_group_needs_a_runtime_with_a_collective_timeout():
    import torch

    from trainer.core.envvars import DistEnv
    from trainer.gang.distributed import Runtime, side_group

    with pytest.raises(ValueError, match="collective_timeout_s 0"):
        side_group(Runtime(DistEnv(True, 0, 2, "127.0.0.1", 1), torch.device("cpu"), "gloo"))

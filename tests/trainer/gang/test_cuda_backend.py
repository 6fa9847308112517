"""The gang's backend on CUDA (trainer/gang/distributed.py): NCCL only when every rank has a GPU of its own.

On an H100 (stop 28, the lent device) ``cuetrain local --world-size 2`` on one GPU failed its first collective
with NCCL's ``ncclInvalidUsage`` (two ranks of one communicator on one GPU), so ``cuetrain demo`` (2 ranks by
default) could not run on a one-GPU workstation. The choice is made from the GPU ids every rank publishes in
the gang's store; these tests run it without a GPU."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from trainer.gang.distributed import cuda_backend, exchange_gpus
from trainer.core.envvars import DistEnv


def test_a_gpu_per_rank_keeps_nccl():
    assert cuda_backend(["GPU-a", "GPU-b", "GPU-c"]) == ("nccl", "")


def test_two_ranks_on_one_gpu_move_the_whole_gang_to_gloo_and_say_which():
    backend, why = cuda_backend(["GPU-a", "GPU-a", "GPU-b"])
    assert backend == "gloo"
    assert why.startswith("ranks 0, 1 on GPU-a: NCCL needs a GPU per rank, so this gang uses gloo")


def test_every_shared_gpu_is_named():
    backend, why = cuda_backend(["GPU-a", "GPU-b", "GPU-a", "GPU-b"])
    assert backend == "gloo" and "ranks 0, 2 on GPU-a; ranks 1, 3 on GPU-b" in why


def _env(rank: int, world: int) -> DistEnv:
    return DistEnv(True, rank, world, "127.0.0.1", 1)


def test_every_rank_reads_the_same_list_from_the_store():
    store = dist.HashStore()
    got: dict[int, list[str]] = {}

    def rank(r: int, gpu: str) -> None:
        got[r] = exchange_gpus(store, _env(r, 3), gpu, timeout_s=10)

    threads = [threading.Thread(target=rank, args=(r, g)) for r, g in enumerate(["GPU-x", "GPU-y", "GPU-x"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert got == {r: ["GPU-x", "GPU-y", "GPU-x"] for r in range(3)}
    assert {cuda_backend(v)[0] for v in got.values()} == {"gloo"}  # one choice for the whole gang


def test_a_rank_that_never_publishes_ends_the_wait_at_the_timeout():
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=30))
    with pytest.raises(Exception, match="(?i)timeout|timed out|wait"):
        exchange_gpus(store, _env(0, 2), "GPU-x", timeout_s=0.5)

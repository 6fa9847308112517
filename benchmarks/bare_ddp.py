"""A bare DDP training loop, the baseline cuetrain is measured against.

Usage: bare_ddp.py RANK WORLD PORT GLOBAL_BATCH STEPS MODEL_SIZE CROP. Prints images/s (rank 0).
Same model, optimizer, L1 loss and per-rank batch as cuetrain; crops are pre-made random tensors,
no data pipeline, no logging, no outputs. It gets the same glibc allocator tuning as the trainer
(``trainer.tuning``), so the ratio measures cuetrain's overhead, not the allocator.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer.model import build_model
from trainer.tuning import tune_allocator

WARMUP = 20  # untimed steps


def main() -> None:
    rank, world, port, batch, steps = (int(a) for a in sys.argv[1:6])
    tune_allocator()
    size, crop = sys.argv[6], int(sys.argv[7])
    torch.manual_seed(0)
    model = build_model(size)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=timedelta(seconds=120))
        model = DDP(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    local = batch // world
    x, y = torch.rand(local, 3, crop, crop), torch.rand(local, 3, crop, crop)
    for i in range(WARMUP + steps):
        if i == WARMUP:
            t0 = time.perf_counter()
        loss = (model(x) - y).abs().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    rate = steps * batch / (time.perf_counter() - t0)
    if world > 1:
        dist.barrier()  # nobody tears down while a peer still talks to it
        dist.destroy_process_group()
    if rank == 0:
        print(f"{rate:.3f}")


if __name__ == "__main__":
    main()

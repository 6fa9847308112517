"""A bare DDP training loop, the baseline cuetrain is measured against.

Usage: bare_ddp.py RANK WORLD PORT GLOBAL_BATCH STEPS MODEL_SIZE CROP [PRECISION MEMORY_FORMAT [DEVICE [compile]
[untuned]]].
Prints images/s (rank 0). Same model, optimizer, L1 loss and per-rank batch as cuetrain; crops are
pre-made random tensors, no data pipeline, no logging, no outputs. PRECISION (fp32, bf16, fp16;
default fp32) autocasts the forward pass as cuetrain does, with fp16's gradient scaler;
MEMORY_FORMAT is channels_last or contiguous (default); DEVICE cpu (default) or cuda. It gets the same glibc allocator
tuning as the trainer (``trainer.core.allocator``), so the ratio measures cuetrain's overhead, not the allocator;
``untuned`` leaves glibc's defaults, as a plain loop that a user writes runs.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer.core.config import TrainConfig
from trainer.learn.model import build_model
from trainer.learn.precision import Precision, configure_backends, memory_format
from trainer.core.allocator import tune_allocator

WARMUP = 20  # untimed steps
#: The network cuetrain trains for a colour task (``--architecture auto`` resolves to it; ``auto`` is not a network).
ARCHITECTURE = TrainConfig("-", "-", "-").architecture_name


def main() -> None:
    rank, world, port, batch, steps = (int(a) for a in sys.argv[1:6])
    if "untuned" not in sys.argv[11:]:
        tune_allocator()
    size, crop = sys.argv[6], int(sys.argv[7])
    name, fmt_name, dev = (sys.argv[8:11] + ["fp32", "contiguous", "cpu"][len(sys.argv[8:11]):])
    device, fmt = torch.device(dev), memory_format(fmt_name)
    prec = Precision(name, name, device.type, "benchmark")
    configure_backends(device)
    torch.manual_seed(0)
    model = build_model(size, ARCHITECTURE).to(device, memory_format=fmt)
    if world > 1:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world, timeout=timedelta(seconds=120))
        model = DDP(model)
    if "compile" in sys.argv[11:]:
        model = torch.compile(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = prec.grad_scaler()
    local = batch // world
    x = torch.rand(local, 3, crop, crop, device=device).contiguous(memory_format=fmt)
    y = torch.rand(local, 3, crop, crop, device=device).contiguous(memory_format=fmt)
    for i in range(WARMUP + steps):
        if i == WARMUP:
            _sync(device)
            t0 = time.perf_counter()
        with prec.autocast():
            out = model(x)
        scaler.scale((out.float() - y).abs().mean()).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
    _sync(device)
    rate = steps * batch / (time.perf_counter() - t0)
    if world > 1:
        dist.barrier()  # nobody tears down while a peer still talks to it
        dist.destroy_process_group()
    if rank == 0:
        print(f"{rate:.3f}")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    main()

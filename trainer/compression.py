"""Gradient compression through DDP communication hooks (``torch.distributed.algorithms.ddp_comm_hooks``).

- ``none``: DDP's default all-reduce of float32 gradient buckets.
- ``fp16``: buckets cast to float16 before the all-reduce, halving the bytes sent
  (``default_hooks.fp16_compress_hook``).
- ``powersgd``: low-rank PowerSGD (Vogels et al., NeurIPS 2019) with rank-1 approximation, after
  ``start_powerSGD_iter`` plain all-reduce steps and with error feedback (``powerSGD_hook``).
"""

from __future__ import annotations

import logging

from torch.nn.parallel import DistributedDataParallel as DDP

log = logging.getLogger(__name__)

#: Plain all-reduce updates before PowerSGD starts compressing (the hook's own default is 1000;
#: short artist runs need compression sooner).
POWERSGD_START_ITER = 10


def register_hook(model: DDP, kind: str) -> None:
    """Register the communication hook named ``kind`` on a DDP model.

    Raises:
        ValueError: unknown ``kind`` (valid: none, fp16, powersgd).
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if kind == "none":
        return
    if kind == "fp16":
        model.register_comm_hook(state=None, hook=default_hooks.fp16_compress_hook)
    elif kind == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                            start_powerSGD_iter=POWERSGD_START_ITER, use_error_feedback=True,
                                            warm_start=True)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:
        raise ValueError(f"grad_compression={kind!r} is not one of none, fp16, powersgd")
    log.info("gradient compression: %s", kind)

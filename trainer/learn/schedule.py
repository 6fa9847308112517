"""The optimizer and learning-rate schedule of every rank (``--optimizer``, ``--adam-beta1``, ``--adam-beta2``,
``--lr-scaling``, ``--lr-schedule``, ``--warmup-steps``).

The peak LR follows the effective batch of an update (``batch_size x sync_interval`` crops) by the
square-root rule for Adam (Malladi et al., "On the SDEs and Scaling Rules for Adaptive Gradient
Algorithms", NeurIPS 2022: ``lr x sqrt(effective_batch / lr_reference_batch)``; the default) or the
linear rule of Goyal et al., "Accurate, Large Minibatch SGD", 2017 (``lr x effective_batch /
lr_reference_batch``, derived for SGD). It is warmed up linearly from 1/10 over ``warmup_steps``
updates (Goyal et al. 2017), then decays by cosine to ``--lr-floor`` of the peak at the last update
(``TrainConfig.cosine_floor``: by job with Muon, ``trainer.core.recipe.MUON_LR_FLOOR``, else a tenth); or one-cycle
(Smith & Topin 2019).
"""

from __future__ import annotations

import math

import torch

from trainer.core.config import TrainConfig
from trainer.core.recipe import DEFAULT_LR_FLOOR, ENCODER_MODULES
from trainer.learn.optim import MuonAdam


def build_optimizer(cfg: TrainConfig, net: torch.nn.Module, lr: float) -> torch.optim.Adam | MuonAdam:
    """The trainer's optimizer for ``net`` at ``lr`` [1]: Adam with betas ``(cfg.adam_beta1, cfg.beta2)``, fused
    (one pass over every parameter; CPU since torch 2.4: 2% of a small step, ``benchmarks/studies/bench_adam.py``), or
    with ``cfg.optimizer_name`` ``muon`` (``--optimizer muon``, or ``auto`` on a colour task) Muon for the hidden
    convolutions and that Adam for the rest (``trainer.learn.optim.MuonAdam``), the encoder's Muon weights at
    ``cfg.encoder_lr`` of ``lr`` (a head start's, ``trainer.core.recipe.ENCODER_MODULES``). Build it after ``net`` is
    on its device and memory format. The trainer, the advisor's timing probe and its quality probe all build this
    one, so they train the same update."""
    if cfg.optimizer_name == "muon":
        scales = {m: cfg.encoder_lr for m in ENCODER_MODULES[cfg.architecture_name]} if cfg.encoder_lr != 1 else None
        return MuonAdam(net, lr, (cfg.adam_beta1, cfg.beta2), lr_scales=scales)
    return torch.optim.Adam(net.parameters(), lr=lr, betas=(cfg.adam_beta1, cfg.beta2), fused=True)


def optimizer_record(cfg: TrainConfig, opt: torch.optim.Adam | MuonAdam, requested: str, reason: str
                     ) -> dict[str, str]:
    """``run.json``'s ``optimizer``: ``name`` (what trains), ``requested`` (``--optimizer`` as given), ``reason``
    (one sentence, :attr:`TrainConfig.optimizer_reason` or a resume's) and, for Muon, ``newton_schulz``: the dtype of
    its orthogonalisation on this device (``trainer.learn.optim.orthogonalisation_dtype``)."""
    record = {"name": cfg.optimizer_name, "requested": requested, "reason": reason}
    if isinstance(opt, MuonAdam):
        record["newton_schulz"] = str(opt.muon.ns_dtype).removeprefix("torch.")
    return record


def effective_lr(cfg: TrainConfig, sync_interval: int) -> float:
    """Peak LR for ``cfg.batch_size x sync_interval`` crops per update under ``cfg.lr_scaling`` (module doc):
    ``sqrt``: ``lr * sqrt(batch * sync / reference)``; ``linear``: ``lr * batch * sync / reference``; ``none``: lr
    (``lr``: ``cfg.base_lr``, the model size's default unless ``--lr`` is given)."""
    if cfg.lr_scaling == "none":
        return cfg.base_lr
    ratio = cfg.batch_size * sync_interval / cfg.lr_reference_batch
    return cfg.base_lr * (ratio if cfg.lr_scaling == "linear" else math.sqrt(ratio))


def lr_at(update: int, total_updates: int, peak: float, warmup: int, schedule: str = "cosine",
          floor: float = DEFAULT_LR_FLOOR) -> float:
    """LR for optimizer update ``update`` (0-based) of ``total_updates``.

    ``cosine``: linear warmup over ``warmup`` updates from peak/10, then cosine decay to ``peak * floor`` (``floor``:
    a fraction from 0 to 1, ``TrainConfig.cosine_floor``; SGDR's cosine from a maximum to a
    minimum, Loshchilov & Hutter 2017, eq. 5).
    ``onecycle`` (Smith & Topin 2019, "Super-Convergence"): linear rise from peak/25 over the first 30% of the
    updates, then cosine decay to peak/1e4 (``warmup`` is not used), as ``benchmarks/bench_time_to_quality.py``
    measures it.
    """
    if schedule == "onecycle":
        rise = max(1, int(0.3 * total_updates))
        if update < rise:
            return peak * (1 / 25 + (1 - 1 / 25) * update / rise)
        low, progress = peak / 1e4, min(1.0, (update - rise) / max(1, total_updates - rise))
        return low + (peak - low) * 0.5 * (1.0 + math.cos(math.pi * progress))
    if update < warmup:
        return peak * (0.1 + 0.9 * update / warmup)
    span = max(1, total_updates - warmup)
    progress = min(1.0, (update - warmup) / span)
    return peak * (floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress)))

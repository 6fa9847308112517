"""Exponential moving average (EMA) of the weights, the model rank 0 exports when ``--ema-decay`` is set.

Averaging the iterates (Polyak & Juditsky 1992) gives a smoother model than the last one; restoration
networks are usually evaluated and shipped with an EMA of their weights (e.g. NAFNet, Chen et al. 2022).
The decay warms up as TensorFlow's ``tf.train.ExponentialMovingAverage`` with ``num_updates`` does, with the
constant :data:`EMA_WARMUP` in place of its 10: ``min(decay, (1 + n) / (20 + n))`` after ``n`` updates, so the
first updates are not an average dominated by the random initial weights and, until the cap, the average
covers about the last ``n / 19`` updates. ``benchmarks/bench_time_to_quality.py`` measured the EMA and
``benchmarks/studies/bench_ema_warmup.py`` the constant (docs/studies/time_to_quality.md, "The EMA's warm-up
constant").

Only rank 0 keeps one (DDP keeps every rank's weights identical); it is saved in the checkpoint, so a resumed
or restarted gang continues the same average.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

import torch

#: k of the warm-up decay ``(1 + n) / (k + n)``. 20, not TensorFlow's 10: on one trajectory of the default
#: recipe, 20 was 0.02-0.05 dB higher than 10 at every evaluation on both clips of the time-to-quality benchmark,
#: 40 the same as 20, 4 and 2 lower (studies/bench_ema_warmup.py, bench_recipe.py variants;
#: docs/studies/time_to_quality.md).
EMA_WARMUP = 20


class WeightEMA:
    """An EMA copy of ``net``'s parameters (buffers are copied as they are).

    Args:
        net: the training network (float32 master weights; the copy keeps its device and memory format).
        decay: the long-run decay per optimizer update, in (0, 1) [1] (e.g. 0.999: ~1000 updates of memory).
        warmup: k of the warm-up decay ``(1 + n) / (k + n)``, above 1 [1]: :data:`EMA_WARMUP` (the trainer's);
            other values are for benchmarks/studies/bench_ema_warmup.py and its kind.

    Raises:
        ValueError: ``decay`` is not in (0, 1), or ``warmup`` is not above 1 (the average would never move).
    """

    def __init__(self, net: torch.nn.Module, decay: float, warmup: float = EMA_WARMUP) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"EMA decay {decay} must be between 0 and 1 (e.g. 0.999)")
        if not warmup > 1.0:
            raise ValueError(f"EMA warm-up constant {warmup} must be above 1 (the trainer's is {EMA_WARMUP})")
        self.decay, self.warmup = decay, warmup
        self.updates = 0  # optimizer updates averaged so far [updates]
        self.module = copy.deepcopy(net).eval()
        self.module.requires_grad_(False)

    def current_decay(self) -> float:
        """The decay the next update uses: ``min(decay, (1 + n) / (warmup + n))`` after ``n`` updates."""
        return min(self.decay, (1 + self.updates) / (self.warmup + self.updates))

    @torch.no_grad()
    def update(self, net: torch.nn.Module) -> None:
        """Average ``net``'s parameters (after an optimizer update) into the copy."""
        weight = 1.0 - self.current_decay()
        # one multi-tensor kernel per dtype and device, not one per parameter (a GPU step is launch-bound); under
        # no_grad the parameters need no .detach() (one dispatcher call each, 47 per step of the small v3)
        torch._foreach_lerp_(list(self.module.parameters()), list(net.parameters()), weight)
        for ema_b, b in zip(self.module.buffers(), net.buffers()):
            ema_b.copy_(b)
        self.updates += 1

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: decay, updates and the averaged weights."""
        return {"decay": self.decay, "updates": self.updates, "model": self.module.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any] | None, net: torch.nn.Module) -> None:
        """Continue the average of a checkpoint; without one (a checkpoint written with no EMA) the average
        starts again from ``net``'s weights."""
        if state:
            self.module.load_state_dict(state["model"])
            self.updates = int(state.get("updates", 0))
        else:
            self.module.load_state_dict(net.state_dict())
            self.updates = 0

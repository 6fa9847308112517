"""Muon for the hidden convolutions, Adam for the rest (``--optimizer muon``).

Muon (Jordan et al. 2024, https://kellerjordan.github.io/posts/muon/) replaces each weight matrix's update by
its momentum orthogonalised with a few Newton-Schulz iterations; ``torch.optim.Muon`` implements it for 2-D
parameters, and its ``match_rms_adamw`` rule (Liu et al. 2025, "Muon is Scalable for LLM Training",
arXiv:2502.16982) scales the step to Adam's update size, so one learning rate and one schedule serve both.
As in Jordan's CIFAR-10 runs, a conv filter bank (O, I, kh, kw) is updated as the matrix (O, I kh kw), and the
network's first and last convolutions and every bias stay with Adam.

The matrices here are views of the convolutions' own weights (no copy, no reparametrisation: the network,
its state dict, EMA and export are the same as with Adam). Their gradients are copied in at each step, after
DDP's all-reduce and after fp16's loss scaler has unscaled them: the 4-D weights sit in a param group of their
own, which the scaler unscales and the schedule sets the learning rate of.
"""

from __future__ import annotations

from typing import Any

import torch


def optimizer_of(state: Any) -> str:
    """Which ``--optimizer`` wrote an optimizer state dict: ``muon`` for :meth:`MuonAdam.state_dict`'s
    ``{"adam", "muon"}``, else ``adam`` (torch's Adam, and every checkpoint written before Muon was an option)."""
    return "muon" if isinstance(state, dict) and set(state) == {"adam", "muon"} else "adam"


def _as_matrix(w: torch.Tensor) -> torch.Tensor:
    """(O, I, kh, kw) -> (O, I kh kw) (contiguous) or (O, kh kw I) (channels_last), a view of ``w``'s memory."""
    if w.is_contiguous():
        return w.view(w.shape[0], -1)
    if w.is_contiguous(memory_format=torch.channels_last):
        return w.permute(0, 2, 3, 1).view(w.shape[0], -1)
    raise ValueError(f"conv weight of shape {tuple(w.shape)} and strides {w.stride()} is neither contiguous nor "
                     "channels_last; build the optimizer after moving the network (net.to(memory_format=...))")


class MuonAdam:
    """Muon for every conv weight but the first and last conv's, Adam for every other parameter.

    Args:
        net: the network (its first and last ``Conv2d``, in ``net.modules()`` order, keep Adam).
        lr: the learning rate of both [1] (Muon's scaled by ``match_rms_adamw``).
        betas: Adam's ``(beta1, beta2)`` [1]. Muon's momentum is torch's 0.95 (Nesterov); no weight decay.

    Like a ``torch.optim.Optimizer`` it has ``param_groups`` (the last is the Muon weights, 4-D), ``step``,
    ``zero_grad``, ``state_dict`` and ``load_state_dict``. Raises ValueError for a network without at least three
    convolutions or a conv weight whose memory is neither contiguous nor channels_last.
    """

    def __init__(self, net: torch.nn.Module, lr: float, betas: tuple[float, float]) -> None:
        convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
        if len(convs) < 3:
            raise ValueError(f"--optimizer muon needs a network with 3 or more convolutions, this one has {len(convs)}")
        hidden = {id(c.weight) for c in convs[1:-1]}
        self.weights = [p for p in net.parameters() if id(p) in hidden]  # 4-D, as the network holds them
        self.matrices = [torch.nn.Parameter(_as_matrix(p.data)) for p in self.weights]  # views of their memory
        self.adam = torch.optim.Adam([p for p in net.parameters() if id(p) not in hidden], lr=lr, betas=betas,
                                     fused=True)
        self.muon = torch.optim.Muon(self.matrices, lr=lr, weight_decay=0.0, adjust_lr_fn="match_rms_adamw")
        self._weights_group: dict[str, Any] = {"params": self.weights, "lr": lr}

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """Adam's groups, then the Muon weights' (4-D): the schedule sets each one's ``lr``, a loss scaler
        unscales their gradients. Read anew each time: ``load_state_dict`` replaces Adam's group dicts."""
        return [*self.adam.param_groups, self._weights_group]

    def step(self) -> None:
        """One update: Adam's parameters, then each matrix from its weight's gradient (None: not updated)."""
        self.muon.param_groups[0]["lr"] = self._weights_group["lr"]
        for w, m in zip(self.weights, self.matrices):
            m.grad = None if w.grad is None else _as_matrix(w.grad.contiguous(memory_format=_format(w)))
        self.adam.step()
        self.muon.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every gradient, the matrices' copies included."""
        self.adam.zero_grad(set_to_none=set_to_none)
        self.muon.zero_grad(set_to_none=True)
        for w in self.weights:
            if set_to_none:
                w.grad = None
            elif w.grad is not None:
                w.grad.zero_()

    def state_dict(self) -> dict[str, Any]:
        """``{"adam": ..., "muon": ...}``: each optimizer's own state dict (moments, momentum buffers, lr)."""
        return {"adam": self.adam.state_dict(), "muon": self.muon.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output. Raises ValueError for an Adam-only state (a run trained with
        ``--optimizer adam``: resume it with that, or start a new run)."""
        if optimizer_of(state) != "muon":
            raise ValueError("this checkpoint's optimizer state is not --optimizer muon's (it has "
                             f"{sorted(state)}); resume with the optimizer it was trained with, or start a new run")
        self.adam.load_state_dict(state["adam"])
        self.muon.load_state_dict(state["muon"])
        self._weights_group["lr"] = self.muon.param_groups[0]["lr"]


def _format(w: torch.Tensor) -> torch.memory_format:
    return torch.contiguous_format if w.is_contiguous() else torch.channels_last

"""Muon for the hidden convolutions, Adam for the rest (``--optimizer muon``).

Muon (Jordan et al. 2024, https://kellerjordan.github.io/posts/muon/) replaces each weight matrix's update by
its momentum orthogonalised with a few Newton-Schulz iterations; ``torch.optim.Muon`` implements it for 2-D
parameters, and its ``match_rms_adamw`` rule (Liu et al. 2025, "Muon is Scalable for LLM Training",
arXiv:2502.16982) scales the step to Adam's update size, so one learning rate and one schedule serve both.
:class:`DeviceMuon` is ``torch.optim.Muon`` (same update, same state dict) with its Newton-Schulz iterations run
at the precision the device multiplies fast: ``torch.optim.Muon`` casts every iteration to bfloat16, which a CPU
without AVX512-BF16/AMX emulates (docs/studies/trainer_speed.md, "Muon's orthogonalisation").
As in Jordan's CIFAR-10 runs, a conv filter bank (O, I, kh, kw) is updated as the matrix (O, I kh kw), and the
network's first and last convolutions and every bias stay with Adam.

The matrices here are views of the convolutions' own weights (no copy, no reparametrisation: the network,
its state dict, EMA and export are the same as with Adam). Their gradients are copied in at each step, after
DDP's all-reduce and after fp16's loss scaler has unscaled them: the 4-D weights sit in a param group of their
own, which the scaler unscales and the schedule sets the learning rate of.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable, Mapping, Sequence

import torch

from trainer.learn.precision import fast_bf16_matmul

#: Newton-Schulz coefficients and iteration count, Keller Jordan's (https://kellerjordan.github.io/posts/muon/),
#: as ``torch.optim.Muon`` uses them (torch/optim/_muon.py: DEFAULT_A, DEFAULT_B, DEFAULT_C, DEFAULT_NS_STEPS).
NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
NS_STEPS = 5
NS_EPS = 1e-7


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


def orthogonalisation_dtype(device: torch.device) -> torch.dtype:
    """The dtype :class:`DeviceMuon` runs its Newton-Schulz iterations in on ``device``: bfloat16 where the device
    multiplies it fast (:func:`trainer.learn.precision.fast_bf16_matmul`: CUDA compute capability >= 8.0, a CPU with
    AVX512-BF16 or AMX), else float32. Measured (one thread, v3 medium's 30 matrices): bf16 47 ms against fp32
    173 ms on an AVX512-BF16 EPYC; on the same CPU limited to AVX2, bf16 3,656 ms against fp32 179 ms."""
    return torch.bfloat16 if fast_bf16_matmul(device) else torch.float32


def newton_schulz(updates: torch.Tensor, dtype: torch.dtype, coefficients: tuple[float, float, float] = NS_COEFFICIENTS,
                  steps: int = NS_STEPS, eps: float = NS_EPS) -> torch.Tensor:
    """Orthogonalise a stack of matrices: ``steps`` quintic Newton-Schulz iterations of Jordan et al. 2024
    (https://kellerjordan.github.io/posts/muon/), each matrix first divided by its Frobenius norm, as
    ``torch.optim.Muon``'s ``_zeropower_via_newtonschulz`` does one matrix, but batched and in ``dtype``.

    Args:
        updates: (N, R, C) float, N matrices of one shape.
        dtype: the iterations' dtype (``torch.bfloat16`` as torch's, or ``torch.float32``).

    Returns:
        (N, R, C) in ``dtype``: each matrix's approximate U S' V^T (S' about Uniform(0.5, 1.5), Jordan's note).

    Raises:
        ValueError: ``updates`` is not 3-D.
    """
    if updates.dim() != 3:
        raise ValueError(f"newton_schulz takes (N, R, C) stacked matrices, got shape {tuple(updates.shape)}")
    a, b, c = coefficients
    x = updates.to(dtype)
    tall = x.size(1) > x.size(2)
    if tall:  # iterate on the wide side: X X^T is the smaller Gram matrix
        x = x.mT
    x = x / x.norm(dim=(1, 2), keepdim=True).clamp(min=eps)  # spectral norm <= Frobenius norm <= 1
    for _ in range(steps):
        gram = x @ x.mT  # (N, R, R)
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # b G + c G^2
        x = torch.baddbmm(x, poly, x, beta=a)  # a X + (b G + c G^2) X
    return x.mT if tall else x


def adjusted_lr(lr: float, adjust_lr_fn: str | None, shape: torch.Size) -> float:
    """Muon's per-matrix learning rate for an (A, B) matrix, as ``torch.optim.Muon`` adjusts it:
    ``match_rms_adamw`` 0.2 sqrt(max(A, B)) lr (Liu et al. 2025, arXiv:2502.16982), ``original`` or None
    sqrt(max(1, A / B)) lr (Jordan et al. 2024)."""
    rows, cols = shape[:2]
    if adjust_lr_fn == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(rows, cols))
    return lr * math.sqrt(max(1.0, rows / cols))


class DeviceMuon(torch.optim.Muon):
    """``torch.optim.Muon`` whose orthogonalisation runs in ``ns_dtype`` and stacks same-shape matrices.

    The update is torch's (Nesterov momentum 0.95, five Newton-Schulz iterations, the ``adjust_lr_fn`` rule,
    decoupled weight decay) and so is the state dict (``momentum_buffer`` per matrix, the same param-group keys),
    so checkpoints load either way. With ``ns_dtype=torch.bfloat16`` it matches torch's update to bf16 rounding;
    with float32 it is closer to the exact iteration than torch's (tests/trainer/learn/test_optim.py states both
    tolerances).

    Args:
        params: 2-D parameters.
        lr: learning rate before :func:`adjusted_lr`.
        ns_dtype: the Newton-Schulz dtype (:func:`orthogonalisation_dtype`).
        adjust_lr_fn: ``match_rms_adamw`` (cuetrain's), ``original`` or None.
        lr_scales: one factor per parameter of ``params``, in order, that its step is multiplied by [1]; None: all 1.
            Not in the state dict: the caller derives them from the run's config again.

    Raises:
        ValueError: as ``torch.optim.Muon`` (a parameter that is not 2-D, a negative lr), or ``lr_scales`` not one
            factor per parameter.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, ns_dtype: torch.dtype,
                 adjust_lr_fn: str | None = "match_rms_adamw", lr_scales: Sequence[float] | None = None) -> None:
        params = list(params)
        if lr_scales is not None and len(lr_scales) != len(params):
            raise ValueError(f"lr_scales has {len(lr_scales)} factors for {len(params)} parameters; give one each")
        super().__init__(params, lr=lr, weight_decay=0.0, adjust_lr_fn=adjust_lr_fn)
        self.ns_dtype = ns_dtype
        self.lr_scales = {id(p): float(f) for p, f in zip(params, lr_scales)} if lr_scales is not None else {}

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        """One Muon update of every matrix that has a gradient (``closure`` as torch's optimizers take it)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            self._step_group(group)
        return loss

    def _step_group(self, group: dict[str, Any]) -> None:
        params = [p for p in group["params"] if p.grad is not None]
        by_shape: dict[tuple[int, ...], list[torch.Tensor]] = defaultdict(list)
        for p in params:
            buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p.grad))
            buf.lerp_(p.grad, 1 - group["momentum"])
            by_shape[tuple(p.shape)].append(p)
        for shape, same in by_shape.items():
            grads = torch.stack([p.grad for p in same])
            bufs = torch.stack([self.state[p]["momentum_buffer"] for p in same])
            update = grads.lerp_(bufs, group["momentum"]) if group["nesterov"] else bufs
            ortho = newton_schulz(update, self.ns_dtype, group["ns_coefficients"], group["ns_steps"], group["eps"])
            step = adjusted_lr(group["lr"], group["adjust_lr_fn"], torch.Size(shape))
            for p, o in zip(same, ortho):
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(o, alpha=-step * self.lr_scales.get(id(p), 1.0))


class MuonAdam:
    """Muon for every conv weight but the first and last conv's, Adam for every other parameter.

    Args:
        net: the network (its first and last ``Conv2d``, in ``net.modules()`` order, keep Adam).
        lr: the learning rate of both [1] (Muon's scaled by ``match_rms_adamw``).
        betas: Adam's ``(beta1, beta2)`` [1]. Muon's momentum is torch's 0.95 (Nesterov); no weight decay.
        ns_dtype: Muon's Newton-Schulz dtype; None: :func:`orthogonalisation_dtype` of the network's device.
        lr_scales: module name -> factor [1]: a Muon weight whose name (``net.named_parameters()``) starts with the
            module's name and a dot steps at ``lr`` times the factor (a head start's encoder,
            ``trainer.core.recipe.ENCODER_MODULES``); the other weights at ``lr``. None: every one at ``lr``.

    Like a ``torch.optim.Optimizer`` it has ``param_groups`` (the last is the Muon weights, 4-D), ``step``,
    ``zero_grad``, ``state_dict`` and ``load_state_dict``. Raises ValueError for a network without at least three
    convolutions, a conv weight whose memory is neither contiguous nor channels_last, or a module of ``lr_scales``
    that holds no Muon weight or whose factor is negative.
    """

    def __init__(self, net: torch.nn.Module, lr: float, betas: tuple[float, float],
                 ns_dtype: torch.dtype | None = None, lr_scales: Mapping[str, float] | None = None) -> None:
        convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d)]
        if len(convs) < 3:
            raise ValueError(f"--optimizer muon needs a network with 3 or more convolutions, this one has {len(convs)}")
        hidden = {id(c.weight) for c in convs[1:-1]}
        self.weights = [p for p in net.parameters() if id(p) in hidden]  # 4-D, as the network holds them
        self.matrices = [torch.nn.Parameter(_as_matrix(p.data)) for p in self.weights]  # views of their memory
        self.adam = torch.optim.Adam([p for p in net.parameters() if id(p) not in hidden], lr=lr, betas=betas,
                                     fused=True)
        if ns_dtype is None:
            ns_dtype = orthogonalisation_dtype(self.weights[0].device)
        scales = _weight_scales(net, self.weights, lr_scales) if lr_scales else None
        self.muon = DeviceMuon(self.matrices, lr=lr, ns_dtype=ns_dtype, lr_scales=scales)
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


def _weight_scales(net: torch.nn.Module, weights: list[torch.Tensor], lr_scales: Mapping[str, float]) -> list[float]:
    """Each Muon weight's lr factor: its module's in ``lr_scales`` (by name prefix), else 1."""
    names = {id(p): name for name, p in net.named_parameters()}
    scales = []
    for w in weights:
        module = [m for m in lr_scales if names[id(w)].startswith(m + ".")]
        scales.append(lr_scales[module[0]] if module else 1.0)
    for module, factor in lr_scales.items():
        if not factor >= 0:
            raise ValueError(f"the lr factor of {module!r} is {factor}; give a fraction of the peak lr >= 0 (e.g. 0.5)")
        if not any(names[id(w)].startswith(module + ".") for w in weights):
            raise ValueError(f"no Muon weight of this network is in a module named {module!r}, so its lr factor "
                             "would change nothing; name one of its modules (trainer.core.recipe.ENCODER_MODULES)")
    return scales


def _format(w: torch.Tensor) -> torch.memory_format:
    return torch.contiguous_format if w.is_contiguous() else torch.channels_last

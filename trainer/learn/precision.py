"""Mixed precision, memory format and backend switches of the training step, per device.

``--precision``:

- ``fp32``: plain float32 everywhere.
- ``bf16``: the forward pass runs under ``torch.autocast(dtype=torch.bfloat16)``; bfloat16 has
  float32's exponent range, so no loss scaling is needed.
- ``fp16``: autocast to float16 plus a gradient scaler (``torch.amp.GradScaler``): float16 gradients
  underflow without it (Micikevicius et al., "Mixed Precision Training", ICLR 2018).
- ``auto``: bf16 where the device is fast at it (CUDA compute capability >= 8.0, i.e. Ampere and
  later, whose tensor cores run bfloat16; a CPU with AVX512-BF16 or AMX, which oneDNN uses for
  bfloat16 convolutions), fp16 with the scaler on older CUDA GPUs (tensor cores since Volta, 7.0),
  else fp32. A CPU without those instructions runs bfloat16 convolutions through a slow reference
  path (measured on this project's 2-core AVX2 EPYC: 25x slower than float32), so ``auto`` never
  picks it there.

In every mode the parameters (master weights), their gradients, the Adam state and the loss stay
float32: autocast only changes the dtype of the activations inside eligible ops
(https://pytorch.org/docs/stable/amp.html), and the loop computes the L1 loss on the output cast
back to float32. DDP therefore all-reduces float32 gradient buckets, so the compression hooks
(``trainer.gang.compression``) see what they always did.

``--memory-format channels_last`` stores activations NHWC, which oneDNN (CPU) and cuDNN (tensor
cores) run without layout conversions (https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, ContextManager

import torch

from trainer.core.config import MEMORY_FORMATS, PRECISIONS

log = logging.getLogger(__name__)

_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Precision:
    """The precision a rank trains in.

    Attributes:
        name: ``fp32``, ``bf16`` or ``fp16`` (never ``auto``).
        requested: what the config asked for (``auto`` or one of the above).
        device_type: ``cpu`` or ``cuda``.
        reason: one sentence on why (logged and recorded in run.json).
    """

    name: str
    requested: str
    device_type: str
    reason: str

    @property
    def dtype(self) -> torch.dtype | None:
        """Autocast dtype, or None for fp32."""
        return _DTYPES[self.name]

    def autocast(self) -> ContextManager[Any]:
        """Context for the forward pass: autocast to :attr:`dtype`, or nothing for fp32."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A gradient scaler, enabled for fp16 only (a disabled one passes loss and step through)."""
        return torch.amp.GradScaler(self.device_type, enabled=self.name == "fp16")

    def to_dict(self) -> dict[str, str]:
        """For run.json and model.json."""
        return {"precision": self.name, "requested": self.requested, "device": self.device_type,
                "reason": self.reason}


def cpu_has_fast_bf16() -> bool:
    """True when this CPU has AVX512-BF16 or AMX tiles (what oneDNN's bfloat16 kernels need).

    Uses ``torch.cpu._is_avx512_bf16_supported`` / ``_is_amx_tile_supported`` (cpuinfo-based, as
    torch's inductor uses them); False where this torch lacks them.
    """
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    return any(bool(check()) for check in checks if check is not None)


def fast_bf16_matmul(device: torch.device) -> bool:
    """True where ``device`` multiplies bfloat16 matrices in hardware: CUDA compute capability >= 8.0 (Ampere's
    tensor cores), or a CPU with AVX512-BF16 or AMX (:func:`cpu_has_fast_bf16`). Elsewhere bfloat16 matmuls are
    emulated (12x slower than float32 on an AVX2 CPU for Muon's matrices: docs/studies/trainer_speed.md)."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0] >= 8
    return device.type == "cpu" and cpu_has_fast_bf16()


def resolve_precision(requested: str, device: torch.device) -> Precision:
    """The precision to train in on ``device`` for the configured ``requested`` (see module doc).

    Raises:
        ValueError: ``requested`` is not one of auto, fp32, bf16, fp16.
    """
    if requested not in PRECISIONS:
        raise ValueError(f"precision={requested!r} is not one of {', '.join(PRECISIONS)}")
    kind = device.type
    if requested != "auto":
        return Precision(requested, requested, kind, "set by --precision")
    if kind == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if major >= 8:
            return Precision("bf16", requested, kind, f"CUDA compute capability {major}.{minor} >= 8.0 runs bf16")
        if major >= 7:
            return Precision("fp16", requested, kind, f"CUDA compute capability {major}.{minor} < 8.0: fp16 with "
                             "a gradient scaler")
        return Precision("fp32", requested, kind, f"CUDA compute capability {major}.{minor} has no tensor cores")
    if kind == "cpu" and cpu_has_fast_bf16():
        return Precision("bf16", requested, kind, "CPU has AVX512-BF16/AMX")
    return Precision("fp32", requested, kind, f"{kind} without fast bf16 (no AVX512-BF16/AMX): fp32")


def memory_format(name: str) -> torch.memory_format:
    """``torch.channels_last`` or ``torch.contiguous_format`` for a ``--memory-format`` value.

    Raises:
        ValueError: unknown name (the valid ones are listed).
    """
    if name not in MEMORY_FORMATS:
        raise ValueError(f"memory_format={name!r} is not one of {', '.join(MEMORY_FORMATS)}")
    return torch.channels_last if name == "channels_last" else torch.contiguous_format


def configure_backends(device: torch.device) -> None:
    """Per-process backend switches for training on ``device``.

    CUDA: ``torch.backends.cudnn.benchmark = True`` (cuDNN times its convolution algorithms once
    per input shape and keeps the fastest; the crops have one fixed shape, so this pays off after
    the first step). CPU: nothing to switch.
    """
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True


def maybe_compile(model: torch.nn.Module, enabled: bool) -> torch.nn.Module:
    """``torch.compile(model)`` when ``enabled`` (``--compile``), else ``model`` unchanged.

    Compile the DDP-wrapped model (not the inner one), so DDP's graph-break logic
    (``DDPOptimizer``) splits the graph at gradient-bucket boundaries and overlaps communication.
    """
    if not enabled:
        return model
    log.info("torch.compile: compiling the training model (the first steps take longer)")
    return torch.compile(model)  # type: ignore[return-value]


def float32_contiguous(model: torch.nn.Module) -> torch.nn.Module:
    """A CPU copy of ``model`` with float32, contiguous (NCHW) parameters: what ``model.pt`` holds,
    whatever the run trained in (the hosts expect float32)."""
    import copy

    return copy.deepcopy(model).cpu().float().to(memory_format=torch.contiguous_format)

"""Gradient compression through DDP communication hooks (``torch.distributed.algorithms.ddp_comm_hooks``).

- ``none``: DDP's default all-reduce of float32 gradient buckets.
- ``fp16``: buckets cast to float16 before the all-reduce, halving the bytes sent
  (``default_hooks.fp16_compress_hook``).
- ``powersgd``: low-rank PowerSGD (Vogels et al., NeurIPS 2019) with rank-1 approximation, after
  ``start_powerSGD_iter`` plain all-reduce steps and with error feedback (``powerSGD_hook``).

Bytes per gradient sync, two ways that must agree (tests/trainer/gang/test_compression.py checks it):

- counted: :func:`register_hook` with a :class:`CommCounter` wraps the hook in :func:`counting_hook`,
  which adds up every tensor the hook hands to ``torch.distributed.all_reduce``;
- predicted: :func:`sync_payload` computes the same from the parameter shapes, by the hooks' rules
  (the scaling advisor, ``trainer.advise.advisor``, uses it).

Both are *payload* bytes per rank; a ring all-reduce puts ``2 (N-1)/N`` times the payload on each
rank's link.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from torch.nn.parallel import DistributedDataParallel as DDP

log = logging.getLogger(__name__)

#: Plain all-reduce updates before PowerSGD starts compressing (the hook's own default is 1000;
#: short artist runs need compression sooner).
POWERSGD_START_ITER = 10
#: PowerSGD settings used by :func:`register_hook` and assumed by :func:`sync_payload`.
POWERSGD_RANK = 1  # matrix_approximation_rank [columns of P and Q]
POWERSGD_MIN_COMPRESSION_RATE = 2.0  # the hook's default: compress a matrix only if it shrinks > 2x

#: DDP's default gradient bucket caps [bytes]: a small first bucket, then 25 MiB
#: (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` and ``bucket_cap_mb=25``).
FIRST_BUCKET_BYTES = 1024 * 1024
BUCKET_BYTES = 25 * 1024 * 1024

KINDS = ("none", "fp16", "powersgd")

Hook = Callable[[Any, Any], Any]  # (state, GradBucket) -> torch.futures.Future[Tensor]


@dataclass
class CommCounter:
    """Gradient traffic counted by :func:`counting_hook` (mutable; one per DDP model).

    Attributes:
        bytes: payload handed to ``all_reduce`` by the hook [bytes].
        calls: ``all_reduce`` calls made by the hook [count].
        buckets: gradient buckets the hook was called for [count].
        syncs: gradient synchronisations, i.e. backward passes that all-reduced [count].
        marks: ``bytes`` when each sync began (see :meth:`per_sync`).
    """

    bytes: int = 0
    calls: int = 0
    buckets: int = 0
    syncs: int = 0
    marks: list[int] = field(default_factory=list)
    in_sync: bool = field(default=False, repr=False)  # between a sync's first and last bucket

    def per_sync(self) -> list[int]:
        """Bytes all-reduced by each sync so far [bytes] (PowerSGD: plain ones first, then compressed)."""
        return [b - a for a, b in zip(self.marks, [*self.marks[1:], self.bytes])]

    def reset(self) -> None:
        """Zero every count."""
        self.bytes = self.calls = self.buckets = self.syncs = 0
        self.marks, self.in_sync = [], False


def register_hook(model: DDP, kind: str, counter: CommCounter | None = None,
                  observe: Callable[[Any], None] | None = None) -> Any:
    """Register the communication hook named ``kind`` on a DDP model; returns the hook's state.

    With ``counter``, the hook is wrapped in :func:`counting_hook` (for ``none``, DDP's built-in
    all-reduce is replaced by the equivalent ``default_hooks.allreduce_hook`` so it can be counted).
    With ``observe``, each bucket's local gradient (before any all-reduce or compression) is passed to
    it first (:func:`observing_hook`; the noise scale, ``trainer.learn.noise_scale``).

    Raises:
        ValueError: unknown ``kind`` (valid: none, fp16, powersgd).
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    state: Any = None
    if kind == "none":
        hook: Hook | None = default_hooks.allreduce_hook if counter is not None or observe is not None else None
    elif kind == "fp16":
        hook = default_hooks.fp16_compress_hook
    elif kind == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=POWERSGD_RANK,
                                            start_powerSGD_iter=POWERSGD_START_ITER, use_error_feedback=True,
                                            warm_start=True, min_compression_rate=POWERSGD_MIN_COMPRESSION_RATE)
        hook = powerSGD_hook.powerSGD_hook
    else:
        raise ValueError(f"grad_compression={kind!r} is not one of {', '.join(KINDS)}")
    if hook is not None:
        hook = counting_hook(hook, counter) if counter is not None else hook
        model.register_comm_hook(state, observing_hook(hook, observe) if observe is not None else hook)
    if kind != "none":
        log.info("gradient compression: %s", kind)
    return state


def observing_hook(inner: Hook, observe: Callable[[Any], None]) -> Hook:
    """A comm hook that hands each bucket's flat local gradient (``bucket.buffer()``, this rank's, before the
    all-reduce) to ``observe``, then runs ``inner``."""

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects string annotations here
        observe(bucket.buffer())
        return inner(state, bucket)

    return hook


def counting_hook(inner: Hook, counter: CommCounter) -> Hook:
    """A comm hook that runs ``inner`` and counts, into ``counter``, what it all-reduces.

    While any bucket's hook is in flight (from the call until its returned future completes,
    which covers PowerSGD's chained P and Q all-reduces), ``torch.distributed.all_reduce`` is
    wrapped to add each tensor's size. DDP runs nothing else through ``all_reduce`` during its
    backward pass, so the count is exactly the hook's traffic. One counted model per process.
    """

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP rejects string annotations here
        if not counter.in_sync:  # first bucket of a sync
            counter.marks.append(counter.bytes)
            counter.in_sync = True
        counter.buckets += 1
        if bucket.is_last():
            counter.syncs += 1
            counter.in_sync = False
        _Intercept.enter(counter)
        try:
            fut = inner(state, bucket)
        except BaseException:
            _Intercept.leave()
            raise

        def done(f: Any) -> Any:
            _Intercept.leave()
            return f.value()

        return fut.then(done)

    return hook


class _Intercept:
    """Reference-counted wrapper around ``torch.distributed.all_reduce`` (internal).

    Counts are added under a lock: PowerSGD's chained all-reduces run on gloo's callback threads.
    """

    _lock = threading.Lock()
    _depth = 0
    _original: Any = None

    @classmethod
    def enter(cls, counter: CommCounter) -> None:
        import torch.distributed as dist

        with cls._lock:
            if cls._depth == 0:
                cls._original = original = dist.all_reduce

                def counted_all_reduce(tensor: Any, *args: Any, **kwargs: Any) -> Any:
                    with cls._lock:
                        counter.bytes += tensor.numel() * tensor.element_size()
                        counter.calls += 1
                    return original(tensor, *args, **kwargs)

                dist.all_reduce = counted_all_reduce
            cls._depth += 1

    @classmethod
    def leave(cls) -> None:
        import torch.distributed as dist

        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0:
                dist.all_reduce, cls._original = cls._original, None


def sync_payload(shapes: Sequence[Sequence[int]], kind: str) -> int:
    """Bytes the hook ``kind`` all-reduces per gradient sync for float32 parameters of ``shapes``.

    ``none``: 4 bytes per value; ``fp16``: 2; ``powersgd`` (after its start iteration): each
    gradient is viewed as an ``n x m`` matrix (``n = shape[0]``); it sends ``(n + m) r`` values
    (P and Q, r = min(n, m, 1)) when ``(n + m) r x 2 < n m``, else all ``n m`` values (1-D biases).

    Raises:
        ValueError: unknown ``kind``.
    """
    if kind not in KINDS:
        raise ValueError(f"grad_compression={kind!r} is not one of {', '.join(KINDS)}")
    values = [math.prod(s) for s in shapes]
    if kind == "none":
        return 4 * sum(values)
    if kind == "fp16":
        return 2 * sum(values)
    total = 0
    for shape, numel in zip(shapes, values):
        n = shape[0] if shape else 1
        m = numel // n
        r = min(n, m, POWERSGD_RANK)
        total += (n + m) * r if (n + m) * r * POWERSGD_MIN_COMPRESSION_RATE < n * m else numel
    return 4 * total


def bucket_count(shapes: Sequence[Sequence[int]]) -> int:
    """DDP gradient buckets for float32 parameters of ``shapes`` (listed in ``model.parameters()`` order).

    DDP fills buckets in reverse parameter order, closing one when it reaches its cap
    (:data:`FIRST_BUCKET_BYTES` for the first, :data:`BUCKET_BYTES` after).
    """
    count, filled, cap = 0, 0, FIRST_BUCKET_BYTES
    for shape in reversed(shapes):
        filled += 4 * math.prod(shape)
        if filled >= cap:
            count, filled, cap = count + 1, 0, BUCKET_BYTES
    return count + (1 if filled else 0)


def sync_calls(shapes: Sequence[Sequence[int]], kind: str) -> int:
    """``all_reduce`` calls per gradient sync: one per bucket (PowerSGD: three, uncompressed + P + Q)."""
    return bucket_count(shapes) * (3 if kind == "powersgd" else 1)

"""The gradient noise scale, measured while training (McCandlish et al. 2018, "An Empirical Model of
Large-Batch Training", appendix A).

The simple noise scale ``B_simple = tr(Sigma) / |G|^2`` (``G``: the true gradient, ``Sigma``: the
per-example gradient covariance) predicts the critical batch: below it, doubling the batch halves
the steps to a given loss; far above it, more crops per step buy almost nothing
(``trainer.advise.quality.steps_to_quality``). It is estimated from the squared norms of the same
gradient averaged over two batch sizes, ``B_small`` and ``B_big``, because
``E |G_B|^2 = |G|^2 + tr(Sigma) / B``:

    |G|^2     ~= (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small)      (A.2)
    tr(Sigma) ~= (|G_small|^2 - |G_big|^2) / (1 / B_small - 1 / B_big)          (A.3)

Both are unbiased but noisy, so, as the paper does, each is smoothed on its own (an exponential
moving average over about :data:`SMOOTHING_UPDATES` optimizer updates) and only then divided.

Where the two norms come from (:class:`GradNoise`):

- **Several ranks** (DDP): ``G_small`` is this rank's gradient before the all-reduce (its
  ``sync_interval x local batch`` crops), read from each gradient bucket by a communication hook
  (:meth:`GradNoise.observe_bucket`, wired by ``trainer.gang.compression.register_hook``), and ``G_big``
  the all-reduced gradient (``sync_interval x global batch`` crops) that the optimizer gets. Each
  rank adds its own estimates; the sums travel in the loss all-reduce the loop already makes every
  ``log_interval`` steps, so measuring costs two squared norms per sync and no extra collective.
- **One rank**: micro-batches. With ``sync_interval`` k > 1, the gradient after the first of the k
  accumulated steps is ``G_small`` (one batch) and the update's gradient ``G_big`` (k batches). With
  k = 1 the batch is split in two halves, forward and backward run once per half, and the first
  half's gradient is ``G_small`` (``trainer.learn.train`` does the split; the sum of the two halves is the
  same gradient as one pass, up to float rounding). A split step launches every kernel twice, which
  on a GPU, where the small network's step is bound by kernel launches, doubled the step (one H200,
  docs/studies/trainer_speed.md, "GPU figures"); so one rank at k = 1 splits only every ``--noise-interval``
  updates, and the smoothing then spans at least :data:`SMOOTHING_SAMPLES` samples.

The gradients are the ones the loss produces, so the noise scale refers to the mean L1 loss per
crop. Every quantity stays on the training device until the log all-reduce (no host sync per step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

#: Time constant of the smoothing [optimizer updates]: each window of n updates enters the moving
#: averages of ``|G|^2`` and ``tr(Sigma)`` with weight ``1 - exp(-n / SMOOTHING_UPDATES)``.
SMOOTHING_UPDATES = 100.0
#: Where a sample is taken only every k updates, the time constant is at least this many samples
#: (``SMOOTHING_SAMPLES x k`` updates), so the sparse estimate is as smooth as a dense one [samples].
SMOOTHING_SAMPLES = 10.0


def estimates(b_small: float, small_sq: Any, b_big: float, big_sq: Any) -> tuple[Any, Any]:
    """Unbiased estimates ``(|G|^2, tr(Sigma))`` from one pair of squared gradient norms (appendix A, A.2/A.3).

    Args:
        b_small, b_big: batch sizes the two gradients average over [examples], ``b_small < b_big``.
        small_sq, big_sq: ``|G_small|^2`` and ``|G_big|^2`` (floats or 0-d tensors, any device).

    Raises:
        ValueError: ``b_small`` is not smaller than ``b_big`` or not positive.
    """
    if not 0 < b_small < b_big:
        raise ValueError(f"noise-scale batch sizes must satisfy 0 < b_small < b_big, got {b_small}, {b_big}")
    g2 = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    trace = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace


def squared_norm(grads: Sequence[torch.Tensor]) -> torch.Tensor:
    """Sum of squares of ``grads`` as a float32 0-d tensor on their device (no host sync)."""
    if not grads:
        raise ValueError("no gradients to measure")
    norms = torch._foreach_norm([g.float() if g.dtype != torch.float32 else g for g in grads])  # clip_grad_norm_'s op
    return torch.stack(norms).pow(2).sum()


def parameter_grads(model: torch.nn.Module) -> list[torch.Tensor]:
    """The ``.grad`` tensors of ``model``'s parameters that have one."""
    return [p.grad for p in model.parameters() if p.grad is not None]


@dataclass(frozen=True)
class NoiseSampling:
    """Which optimizer updates of a rank sample the noise scale, and the two batch sizes of a sample (module doc).

    Attributes:
        world_size: ranks in the gang [ranks].
        sync_interval: steps accumulated per optimizer update [steps].
        local_batch: this rank's crops per step [crops].
        global_batch: all ranks' crops per step [crops].
        interval: ``--noise-interval``: one rank at sync interval 1 samples every this many updates, by
            splitting the step in two halves; any other gang samples every update; 0 = never, in any gang
            (no observing DDP hook either: the baseline of the overhead benchmark) [updates].
    """

    world_size: int
    sync_interval: int
    local_batch: int
    global_batch: int
    interval: int

    @property
    def every(self) -> int:
        """Updates between samples: ``interval`` for one rank at sync interval 1, else 1 (every sync: two
        squared norms, no extra pass); 0 = none, with any gang [updates]."""
        if self.interval == 0:
            return 0
        return self.interval if self.world_size == 1 and self.sync_interval == 1 else 1

    @property
    def observes_buckets(self) -> bool:
        """Whether DDP's communication hook reads each rank's local gradient (a gang that samples at all)."""
        return self.world_size > 1 and self.every > 0

    def due(self, updates: int) -> bool:
        """The update after ``updates`` completed ones is a sample."""
        return self.every > 0 and updates % self.every == 0

    def split(self, updates: int) -> bool:
        """That update's step runs as two halves (one rank, sync interval 1, >= 2 crops, a sample due)."""
        return self.world_size == 1 and self.sync_interval == 1 and self.local_batch >= 2 and self.due(updates)

    def reads_small(self, updates: int, micro: int, first_half: bool) -> bool:
        """Whether one rank reads its small-batch gradient now, in the update after ``updates`` completed ones:
        after the first half of a split step (``first_half``) at sync interval 1, or after the first
        (``micro`` == 1) of its ``sync_interval`` micro-steps; never in a gang (the DDP hook reads it) or
        when the update is not a sample."""
        if self.world_size > 1 or not self.due(updates):
            return False
        return first_half if self.sync_interval == 1 else micro == 1

    def batches(self, loss_weight: float) -> tuple[int, int, float] | None:
        """``(b_small [crops], b_big [crops], small_scale [1])`` of a sample for :meth:`GradNoise.add_sync`, or
        None where no sample exists (one rank, one crop per update). ``loss_weight``: this rank's
        ``trainer.data.crops.rank_loss_weight`` (several ranks with uneven batches)."""
        sync, local = self.sync_interval, self.local_batch
        if self.world_size > 1:
            return local * sync, self.global_batch * sync, loss_weight
        if sync > 1:
            return local, local * sync, 1.0
        return (local // 2, local, 1.0) if local >= 2 else None


class GradNoise:
    """Running estimate of the gradient noise scale of one rank's training (see the module doc).

    Per sync: :meth:`observe_bucket` (DDP hook) or :meth:`observe_small` (one rank), then
    :meth:`add_sync`. Per log window: :meth:`window` (the sums to all-reduce over ranks), then
    :meth:`smooth` with the reduced sums, which returns ``B_simple`` [examples, i.e. crops].

    Args:
        device: the training device (the per-step sums stay there).
        sample_interval: optimizer updates per sample (one rank at sync interval 1 samples every
            ``--noise-interval`` updates; else 1) [updates].

    Raises:
        ValueError: ``sample_interval`` is below 1.
    """

    def __init__(self, device: torch.device | str = "cpu", sample_interval: int = 1) -> None:
        if sample_interval < 1:
            raise ValueError(f"noise-scale sample_interval={sample_interval} must be >= 1 optimizer update")
        self.device = torch.device(device)
        #: time constant of the moving averages [optimizer updates]
        self.time_constant = max(SMOOTHING_UPDATES, SMOOTHING_SAMPLES * sample_interval)
        self._local = torch.zeros((), dtype=torch.float64, device=self.device)  # this sync's |G_small|^2 so far
        self._sums = torch.zeros(3, dtype=torch.float64, device=self.device)  # |G|^2, tr(Sigma), samples
        self.g2: float | None = None  # smoothed |G|^2
        self.trace: float | None = None  # smoothed tr(Sigma)

    def observe_bucket(self, buffer: torch.Tensor) -> None:
        """Add a gradient bucket's local squared norm (before the all-reduce) to this sync's ``|G_small|^2``."""
        self._local += buffer.detach().float().pow(2).sum().double()

    def observe_small(self, small_sq: torch.Tensor) -> None:
        """Set this sync's ``|G_small|^2`` (one rank: the first micro-batch's gradient, already rescaled)."""
        self._local.copy_(small_sq.detach().double())

    def add_sync(self, b_small: float, b_big: float, big_sq: torch.Tensor, small_scale: float = 1.0,
                 scale: torch.Tensor | float = 1.0) -> None:
        """Close one sync: add its ``(|G|^2, tr(Sigma))`` estimates to the window.

        Args:
            b_small: crops behind ``|G_small|^2`` on this rank.
            b_big: crops behind the all-reduced gradient.
            big_sq: ``|G_big|^2``, the squared norm of the gradient the optimizer gets.
            small_scale: factor between the observed local gradient and the mean gradient of its
                ``b_small`` crops (``trainer.data.crops.rank_loss_weight`` with uneven batches) [1].
            scale: a loss scale both gradients still carry (fp16's GradScaler; a 0-d tensor is
                fine). A sync whose norms are not finite (an fp16 overflow) adds nothing.
        """
        small = self._local / (small_scale * small_scale) / (scale * scale)
        big = big_sq.double() / (scale * scale)
        g2, trace = estimates(b_small, small, b_big, big)
        ok = torch.isfinite(g2) & torch.isfinite(trace)
        zero = torch.zeros((), dtype=torch.float64, device=self.device)
        self._sums += torch.stack([torch.where(ok, g2, zero), torch.where(ok, trace, zero), ok.double()])
        self._local.zero_()

    def window(self) -> list[float]:
        """``[sum |G|^2, sum tr(Sigma), samples]`` since the last call (one host sync), then zeroed."""
        out = self._sums.tolist()
        self._sums.zero_()
        return out

    def smooth(self, g2_sum: float, trace_sum: float, samples: float, updates: int) -> float | None:
        """Fold one window (summed over ranks) of ``updates`` optimizer updates into the moving averages
        (``updates``: since the last window that had samples).

        Returns:
            The smoothed ``B_simple = tr(Sigma) / |G|^2`` [crops], or None while there is none (no
            samples yet, or a smoothed ``|G|^2`` that is not positive, which the noisy estimates
            can give early on).
        """
        if samples > 0:
            g2, trace = g2_sum / samples, trace_sum / samples
            if self.g2 is None or self.trace is None:
                self.g2, self.trace = g2, trace
            else:
                w = 1.0 - math.exp(-max(updates, 1) / self.time_constant)
                self.g2 += w * (g2 - self.g2)
                self.trace += w * (trace - self.trace)
        return self.value

    @property
    def value(self) -> float | None:
        """The current smoothed ``B_simple`` [crops] (None: see :meth:`smooth`)."""
        if self.g2 is None or self.trace is None or not self.g2 > 0 or self.trace < 0:
            return None
        return self.trace / self.g2

    def state_dict(self) -> dict[str, float | None]:
        """The moving averages, for checkpoints."""
        return {"g2": self.g2, "trace": self.trace}

    def load_state_dict(self, state: dict[str, float | None] | None) -> None:
        """Restore :meth:`state_dict` (None or an empty dict: start afresh)."""
        state = state or {}
        self.g2, self.trace = state.get("g2"), state.get("trace")

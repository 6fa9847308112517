"""The divergence watch: a run whose loss blows up stops with one clear error (exit 81), not garbage weights.

Every network here starts as the identity (its last convolution is zero, so output == input;
``trainer.learn.model``), so the L1 loss of returning the input unchanged is where a run starts, and a healthy
run stays below it. A learning rate too high for the network blows a run up instead: measured on this
project's clips (docs/studies/time_to_quality.md, "Exploration"), the v2 network at width 48 (v2 medium, now
``benchmarks/lib/baselines.py``, and a 48-wide 2-level variant) at peak lr 2e-3 one-cycle went from +7.4 dB held
out to an output 22 dB *worse* than its input within 150 steps, in fp32 and in bf16, and never came back.
Without a watch the run trained on to its last step and exported those weights as ``model.pt``.

Rule (:class:`DivergenceWatch`): over each log window (``--log-interval`` steps, the sums all-reduced over
the gang, so every rank decides the same at the same step), the mean training loss against the mean
identity loss of the same crops. A window is *bad* when the loss is above :data:`RATIO` times the identity
loss, floored at :data:`FLOOR` (near-identical input and target would otherwise make any early wobble
count). :data:`WINDOWS` bad windows in a row stop the run: a single spike is not a divergence. The measured
blow-ups sat at 12-15x the identity loss; healthy runs stay below 1x after their first steps.

With named channels (``trainer.core.channels``) "returning the input unchanged" is :func:`reference_output`: each
output channel that corrects an Input channel returns it (bilinear at ``--scale`` > 1), a matte returns 0.5 (no
opinion: the sigmoid of a zero tail) and any other new channel 0; the identity loss is the run's own loss
(``trainer.learn.loss``) of that output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.core.channels import ChannelPlan
from trainer.core.config import ConfigError
from trainer.core.exitcodes import ExitCode
from trainer.record.runrecord import FailureKind

#: A window whose mean L1 loss is above this many times the identity loss is bad [1].
RATIO = 4.0
#: The identity loss is floored at this mean L1 distance (0..1 pixel values) [1].
FLOOR = 0.02
#: Bad windows in a row that stop the run [log windows].
WINDOWS = 3


class Diverged(ConfigError):
    """The loss blew up (:class:`DivergenceWatch`): exit code 81, no restart (the same settings diverge again)."""

    exit_code = int(ExitCode.DIVERGED)
    kind = FailureKind.DIVERGED


@dataclass
class DivergenceWatch:
    """Counts bad log windows (module doc).

    Attributes:
        peak_lr: the run's peak learning rate, for the message [1].
        lr: the run's ``--lr`` (``TrainConfig.base_lr``), which ``peak_lr`` scales for the batch; the message
            suggests half of it (half the peak would be the same ``--lr`` again wherever the scaling doubled
            it, as at batch 32) [1].
        bad: bad windows in a row so far [log windows].
        first_bad_step: the last step of the first of those windows, or 0 [steps].
    """

    peak_lr: float
    lr: float
    bad: int = 0
    first_bad_step: int = 0

    def check(self, step: int, loss: float, identity: float) -> None:
        """Take the window that ended at ``step``: its mean L1 ``loss`` and the mean L1 distance between the
        same crops' inputs and targets (``identity``), both all-reduced over the gang.

        Raises:
            Diverged: :data:`WINDOWS` bad windows in a row; the message gives the figures and the fix.
        """
        base = max(identity, FLOOR)
        if loss <= RATIO * base:  # False for NaN: a NaN window is bad
            self.bad, self.first_bad_step = 0, 0
            return
        self.bad += 1
        self.first_bad_step = self.first_bad_step or step
        if self.bad < WINDOWS:
            return
        raise Diverged(
            f"training diverged at step {self.first_bad_step}: the loss {loss:.4g} is {loss / base:.3g}x "
            f"that of returning the input unchanged ({identity:.4g}) for {WINDOWS} log windows in a row, so the "
            f"weights are unusable and no model.pt is exported (checkpoints from step {self.first_bad_step} on hold "
            f"diverged weights). Train again without --resume, with a lower --lr (this run's was {self.lr:.3g}, "
            f"a peak of {self.peak_lr:.3g} at its batch; try --lr {self.lr / 2:.3g}) or a smaller --model-size")


def reference_output(x: torch.Tensor, plan: ChannelPlan, scale: int = 1) -> torch.Tensor:
    """What "returning the input unchanged" is for the watch (module doc): (b, Cin, c, c) Input crops ->
    (b, Cout, sc, sc) float32; the (bilinearly upsampled) Input itself for the RGB default."""
    from trainer.learn.model import bilinear

    base = bilinear(x.float(), scale)
    if plan.is_default:
        return base
    parts = []
    for idx, matte in zip(plan.residual, plan.matte):
        if idx >= 0:
            parts.append(base[:, idx:idx + 1])
        else:
            parts.append(torch.full_like(base[:, :1], 0.5 if matte else 0.0))
    return torch.cat(parts, dim=1)

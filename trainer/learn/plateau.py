"""``--stop-when-flat DB``: stop once the held-out gain stops improving.

Held out: every :data:`HOLDOUT_EVERY`-th frame pair of the shot (frames 10, 20, ... in shot order; the last frame
when the shot has fewer than 10), which no rank trains on (:class:`FrameSubset`). Rank 0 scores the exported weights
(the EMA) at every ``--contact-sheet-interval`` on the centre :data:`EVAL_CROP` px square of up to
:data:`EVAL_FRAMES` held-out frames: the PSNR [dB] of the output against the Ground Truth (mattes included: the PSNR of
the alpha). A crop, not the whole frame, keeps the cost bounded on 4K plates.

The rule (:meth:`Plateau.flat`): at an evaluation at step s, the best PSNR so far exceeds the best PSNR at steps
<= s - ``--flat-window`` by less than DB. Early stopping on a held-out set is Prechelt's (1998, "Early Stopping -
But When?", the GL/PQ criteria), here on an improvement over a window rather than a loss of generalisation, since
a CopyCat model rarely overfits its own shot within a farm run. Rank 0 then proposes the next optimizer update as the
last step, through the same all-reduce as ``--time-budget``'s plan (``trainer.learn.budget``).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Sequence

import numpy as np
import torch

from trainer.data.crops import FrameSource
from trainer.data.images import DataError

log = logging.getLogger(__name__)

#: One frame pair in this many is held out [frames].
HOLDOUT_EVERY = 10
#: Held-out frames scored per evaluation at most [frames].
EVAL_FRAMES = 8
#: Side of the centre square scored per held-out frame, in Input pixels at most [pixels].
EVAL_CROP = 256


def split_frames(count: int) -> tuple[list[int], list[int]]:
    """(training, held-out) frame indices of a shot of ``count`` pairs (module doc).

    Raises:
        DataError: fewer than 2 pairs (nothing would be left to train on).
    """
    if count < 2:
        raise DataError(f"--stop-when-flat holds out 1 frame in {HOLDOUT_EVERY} and needs at least 2 frame pairs; "
                        f"the shot has {count}: add frames or train for --steps")
    held = [i for i in range(count) if (i + 1) % HOLDOUT_EVERY == 0] or [count - 1]
    return [i for i in range(count) if i not in set(held)], held


class FrameSubset:
    """A :class:`trainer.data.crops.FrameSource` over some frame pairs of another (``indices``, in order)."""

    def __init__(self, source: FrameSource, indices: Sequence[int]) -> None:
        self.source, self.indices = source, list(indices)
        self.count, self.size, self.scale = len(self.indices), source.size, source.scale

    def _image(self, image: int) -> int:
        return 2 * self.indices[image // 2] + image % 2

    def crop(self, image: int, y: int, x: int, c: int) -> np.ndarray:
        """(c, c, C) pixels of ``image`` (``2 x pair + side`` in this subset's numbering)."""
        return self.source.crop(self._image(image), y, x, c)

    def image(self, image: int) -> np.ndarray:
        """The whole ``image`` (this subset's numbering)."""
        return self.source.image(self._image(image))


class Plateau:
    """Rank 0's held-out score and the flat rule (module doc).

    Args:
        source: the whole shot; held: its held-out pair indices.
        min_gain_db: ``--stop-when-flat`` [dB]; window: ``--flat-window`` [steps].
    """

    def __init__(self, source: FrameSource, held: Sequence[int], min_gain_db: float, window: int) -> None:
        self.min_gain_db, self.window = min_gain_db, window
        h, w = source.size
        c = min(EVAL_CROP, h, w)
        y, x, k = (h - c) // 2, (w - c) // 2, source.scale
        picks = [held[round(i * (len(held) - 1) / max(1, EVAL_FRAMES - 1))] for i in range(min(EVAL_FRAMES, len(held)))]
        self.pairs = [(source.crop(2 * f, y, x, c), source.crop(2 * f + 1, k * y, k * x, k * c))
                      for f in dict.fromkeys(picks)]
        self.history: list[tuple[int, float]] = []  # (step, held-out PSNR dB)

    @torch.no_grad()
    def evaluate(self, step: int, model: torch.nn.Module, device: torch.device, autocast: Any) -> float:
        """Score ``model`` on the held-out crops at ``step``; returns the mean PSNR [dB] (also kept)."""
        was = model.training
        model.eval()
        scores = []
        try:
            for inp, tgt in self.pairs:
                x = torch.from_numpy(np.ascontiguousarray(inp, dtype=np.float32)).permute(2, 0, 1)[None].to(device)
                with autocast:
                    out = model(x)
                y = torch.from_numpy(np.ascontiguousarray(tgt, dtype=np.float32)).permute(2, 0, 1)[None].to(device)
                mse = float(((out.float().clamp(0, 1) - y) ** 2).mean())
                scores.append(10.0 * math.log10(1.0 / max(mse, 1e-10)))
        finally:
            model.train(was)
        psnr = float(np.mean(scores))
        self.history.append((step, psnr))
        return psnr

    def flat(self, step: int) -> bool:
        """True when the best held-out PSNR up to ``step`` beats the best up to ``step - window`` by less than
        ``min_gain_db`` (False until evaluations span a window)."""
        old = [p for s, p in self.history if s <= step - self.window]
        if not old or not self.history:
            return False
        gain = max(p for _, p in self.history) - max(old)
        if gain < self.min_gain_db:
            log.info("--stop-when-flat: held-out PSNR improved %.3f dB over the last %d steps (< %.3f dB): stopping",
                     gain, self.window, self.min_gain_db)
            return True
        return False

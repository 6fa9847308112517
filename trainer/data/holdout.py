"""``--stop-when-flat``'s held-out frames: which frame pairs no rank trains on, and the frame source of the rest.

Held out: every :data:`HOLDOUT_EVERY`-th frame pair of the shot (frames 10, 20, ... in shot order; the last frame
when the shot has fewer than 10). Training crops come from :class:`FrameSubset` over the other pairs; rank 0 scores
the held-out ones (``trainer.learn.stopping``) and ``trainer.core.stopping.FlatRule`` decides when their gain is flat.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from trainer.data.images import DataError
from trainer.data.sources import FrameSource

#: One frame pair in this many is held out [frames].
HOLDOUT_EVERY = 10


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
    """A :class:`trainer.data.sources.FrameSource` over some frame pairs of another (``indices``, in order)."""

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


def psnr(a: np.ndarray, b: np.ndarray, peak: float = 1.0) -> float:
    """Peak signal-to-noise ratio [dB] of two same-shape images (any shape, e.g. (H, W, C)), both clipped to
    0..``peak`` first: ``10 log10(peak^2 / MSE)``, infinite for identical images.

    The one PSNR of cuetrain: the held-out score (``trainer.learn.stopping.HeldOut``), ``cuetrain demo`` and the
    benchmarks. The definition is the standard one (e.g. Huynh-Thu & Ghanbari 2008, "Scope of validity of PSNR in
    image/video quality assessment", Electronics Letters 44(13)) with the peak of 0..1 frames; clipping both images
    to the displayable range scores what a viewer sees, and keeps a scene-linear highlight above 1 in the Ground
    Truth from counting as error the output cannot show (the held-out score once clipped only the output).
    """
    a = np.clip(np.asarray(a, dtype=np.float64), 0, peak)
    b = np.clip(np.asarray(b, dtype=np.float64), 0, peak)
    mse = float(np.mean((a - b) ** 2))
    return float("inf") if mse == 0 else 10.0 * float(np.log10(peak * peak / mse))

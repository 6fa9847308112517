"""Frame sources: where crops are cut from, and the source over frames already in memory.

:class:`FrameSource` is the protocol every source meets (``trainer.data.hostcache``'s decoded copy of a shot,
``trainer.data.holdout``'s subsets, :class:`FramesInMemory`); ``trainer.data.crops.CropSampler`` cuts its crops from
one. No torch here.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from trainer.core.config import SCALES
from trainer.data.images import DataError


@runtime_checkable
class FrameSource(Protocol):
    """Where crops come from. Images are numbered ``2 x frame index + side`` (side 0 Input, 1 Ground Truth); each
    side has its own channel count C (3 for RGB), the last axis of its crops and images.

    Attributes:
        count: frame pairs [count].
        size: ``(H, W)`` of every Input frame [pixels].
        scale: every Ground Truth frame is ``(scale*H, scale*W)`` [1].
    """

    count: int
    size: tuple[int, int]
    scale: int

    def crop(self, image: int, y: int, x: int, c: int) -> np.ndarray:
        """(c, c, C) float16 pixels of ``image`` from row ``y``, column ``x``, in that image's own pixels."""
        ...

    def image(self, image: int) -> np.ndarray:
        """The whole ``image``: (H, W, Cin) for an Input, (scale*H, scale*W, Cout) for a Ground Truth, float16."""
        ...


class FramesInMemory:
    """A :class:`FrameSource` over decoded pairs ``[(input, target)]``: inputs (H, W, Cin), targets
    (scale*H, scale*W, Cout), every pair the size and channels of the first (``trainer.data.sequences.load_pairs``
    checks files).

    Args:
        frames: the pairs.
        scale: the targets' size over the inputs' [1]; None: read from the first pair's shapes.

    Raises:
        DataError: no frames, or the first pair's target is not ``scale`` times its input (or no whole multiple).
    """

    def __init__(self, frames: Sequence[tuple[np.ndarray, np.ndarray]], scale: int | None = None) -> None:
        if not frames:
            raise DataError("no training frames were loaded; check --input and --target")
        self.frames = frames
        self.count = len(frames)
        self.size = tuple(frames[0][0].shape[:2])
        (h, w), (th, tw) = self.size, frames[0][1].shape[:2]
        self.scale = max(1, th // h) if scale is None else scale
        if (th, tw) != (self.scale * h, self.scale * w) or self.scale not in SCALES:
            raise DataError(f"the first training pair's input is {w}x{h} but its target is {tw}x{th}; with scale "
                            f"{self.scale} the target must be {self.scale * w}x{self.scale * h}, and the scale one of "
                            f"{', '.join(map(str, SCALES))}: fix the frames or the --scale")

    def crop(self, image: int, y: int, x: int, c: int) -> np.ndarray:
        return self.frames[image // 2][image % 2][y:y + c, x:x + c]

    def image(self, image: int) -> np.ndarray:
        return np.asarray(self.frames[image // 2][image % 2])

"""The tile layout of the host's decoded copy of a shot (``pixels.f16``, ``trainer.data.hostcache``): each
frame's Input, then its Ground Truth, in :data:`TILE` px float16 tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainer.data.shot import Shot

TILE = 64  # tile side [pixels]: a 64 px crop touches at most 2 x 2 tiles
HALF = 2  # bytes per float16 sample


@dataclass(frozen=True)
class SideLayout:
    """Where one side of every frame lies in ``pixels.f16`` (``trainer.data.hostcache``'s module doc).

    Attributes:
        height, width: the side's image size [pixels] (the Ground Truth's is ``scale`` times the Input's).
        offset: where the side starts within a frame's bytes [bytes] (0 for the Input).
        channels: channels per pixel [count] (the side's channels of the shot's plan; 3 for RGB).
    """

    height: int
    width: int
    offset: int
    channels: int = 3

    @property
    def ty(self) -> int:
        """Tile rows [count]."""
        return -(-self.height // TILE)

    @property
    def tx(self) -> int:
        """Tiles per tile row [count]."""
        return -(-self.width // TILE)

    @property
    def tile_bytes(self) -> int:
        """Bytes of one tile of this side [bytes]."""
        return TILE * TILE * self.channels * HALF

    @property
    def image_bytes(self) -> int:
        """Bytes of one image of this side, padded to whole tiles [bytes]."""
        return self.ty * self.tx * self.tile_bytes

    def tiles(self, ty: int, tx: int) -> np.ndarray:
        """An empty (ty, tx, T, T, C) float16 block of this side's tiles."""
        return np.empty((ty, tx, TILE, TILE, self.channels), np.float16)


def side_layouts(shot: Shot) -> tuple[SideLayout, SideLayout]:
    """The Input's and the Ground Truth's :class:`SideLayout`, the Input first in each frame's bytes."""
    inputs = SideLayout(shot.height, shot.width, 0, len(shot.channels.inputs))
    tw, th = shot.target_size
    return inputs, SideLayout(th, tw, inputs.image_bytes, len(shot.channels.targets))

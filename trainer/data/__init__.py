"""Frames in: image I/O, colour, the shot, the host's decoded copy, crops, and the data phase across the gang.

Modules (its public surface; names starting with ``_`` stay inside their module):

- :mod:`trainer.data.colour`: Colour management through OpenColorIO: train in a working space, give frames back in
  the plates' space.
- :mod:`trainer.data.crop_focus`: Crops drawn where the error is: a share of each batch's crops follows a weight per
  crop position (no torch here).
- :mod:`trainer.data.crops`: Random crops of paired frames, split across ranks.
- :mod:`trainer.data.holdout`: ``--stop-when-flat``'s held-out frames: which frame pairs no rank trains on, and the
  frame source of the rest.
- :mod:`trainer.data.hostcache`: The host's decoded copy of a shot on local scratch: decoded once per host, read by
  every rank of the frame.
- :mod:`trainer.data.images`: Image I/O for training data: reading frames by channel, writing them (no torch here).
- :mod:`trainer.data.shot`: A training shot on the file server: its frame pairs, the signature of every file, and
  reading them in bands.
- :mod:`trainer.data.sequences`: Frame sequences of training data: indexing a folder by frame number, pairing Input
  with Ground Truth, loading the pairs and the identity check (no torch here).
- :mod:`trainer.data.sources`: Frame sources: where crops are cut from, and the source over frames already in
  memory (no torch here).
- :mod:`trainer.data.shot_loading`: The data phase of an attempt: list the shot, decode it once per host, agree
  across the gang, record it.
- :mod:`trainer.data.tiles`: The tile layout of the host's decoded copy of a shot (``pixels.f16``): each frame's
  Input, then its Ground Truth, in 64 px float16 tiles.
- :mod:`trainer.data.write_like`: Write a processed frame exactly like its source: same file name, format, bit
  depth, channels, metadata.
"""

__all__ = [
    'colour',
    'crop_focus',
    'crops',
    'holdout',
    'hostcache',
    'images',
    'shot',
    'sequences',
    'sources',
    'shot_loading',
    'tiles',
    'write_like',
]

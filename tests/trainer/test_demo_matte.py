"""``cuetrain demo --task matte`` trains on the carphone man's semantic matte (trainer.demo.person_matte): the
extracted keyframes' alpha is that matte, not a colour key of the frame."""

from __future__ import annotations

import numpy as np

from trainer.data.images import read_channels
from trainer.data.sequences import find_sequence
from trainer.demo import MATTE_KEYFRAME_EVERY, extract, person_matte


def test_the_matte_demo_writes_the_semantic_matte_as_the_keyframes_alpha(tmp_path):
    mattes = person_matte()
    assert mattes.shape == (120, 144, 176) and 0.0 <= mattes.min() and mattes.max() <= 1.0
    data = extract(tmp_path, "matte")
    keys, held = find_sequence(data.train_target), find_sequence(data.holdout_target)
    assert sorted(keys) == list(range(1, 121, MATTE_KEYFRAME_EVERY)) and len(held) == 108
    for n in (1, 61, 111):
        alpha = read_channels(keys[n], ["A"])[..., 0]
        assert np.abs(alpha - mattes[n - 1]).max() <= 0.5 / 255 + 1e-6  # the stored matte, 8-bit
    # semantic, not a key: the man's dark suit and the dark seat share colours, yet only the suit is in the matte
    rgb = read_channels(keys[1], ["R", "G", "B"])
    dark = rgb.mean(-1) < 0.2
    assert (mattes[0][dark] > 0.5).mean() > 0.2 and (mattes[0][dark] < 0.5).mean() > 0.05

"""The upres benchmark (benchmarks/lib/upscale.py): its ``cuetrain`` network ends its cosine where the trainer's
upres does, and ``cuetrain-flX`` where it names."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from lib import upscale  # noqa: E402
from trainer.core.config import TrainConfig  # noqa: E402


def test_cuetrain_ends_its_cosine_where_the_trainers_upres_does_and_fl_names_its_own():
    for scale in (2, 4):
        upres = TrainConfig("i", "t", "r", scale=scale)
        assert upres.optimizer_name == "muon" and upscale.default_floor("cuetrain", scale) == upres.cosine_floor
        adam = TrainConfig("i", "t", "r", scale=scale, optimizer="adam").cosine_floor
        assert upscale.default_floor("cuetrain-adam", scale) == upscale.default_floor("espcn", scale) == adam
    assert upscale.default_floor("cuetrain-fl0.3") == 0.3 and upscale.default_floor("cuetrain-fl1.0") == 1.0

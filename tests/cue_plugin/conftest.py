"""Shared helpers for the farm tests: a small TrainConfig and TrainingJob."""

from __future__ import annotations

import pytest

from cue_plugin.submit.spec import TrainingJob
from trainer.core.config import TrainConfig


def make_config(root: str = "/shows/demo/train", **kw) -> TrainConfig:
    """A TrainConfig with fixed absolute paths under ``root`` (nothing is created)."""
    return TrainConfig(input_dir=f"{root}/in", target_dir=f"{root}/gt", run_dir=f"{root}/run", **kw)


def make_job(**kw) -> TrainingJob:
    """A 2-rank TrainingJob for show ``demo``, shot ``sh010``, user ``artist``."""
    values = dict(train=make_config(), world_size=2, show="demo", shot="sh010", user="artist")
    values.update(kw)
    return TrainingJob(**values)


@pytest.fixture
def job() -> TrainingJob:
    return make_job()

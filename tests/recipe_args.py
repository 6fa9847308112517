"""The training recipe a job's arguments give, for the tests that pin one default recipe on every path
(``tests/cue_plugin/test_default_recipe.py``, ``tests/gui/test_default_recipe.py``)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Sequence

from trainer.core.config import TrainConfig
from trainer.core.config_args import add_train_arguments, config_from_args

#: TrainConfig fields that are not the recipe: where the data and the run live, how long the run is, how often it
#: writes its outputs, and the memory the farm template gives a rank.
NOT_RECIPE = frozenset({"input_dir", "target_dir", "run_dir", "steps", "checkpoint_interval",
                        "contact_sheet_interval", "log_interval", "keep_checkpoints", "data_cache_mb"})
#: The flags ``cuetrain demo`` may pass on top of the farm's defaults: run length and output intervals.
RUN_LENGTH_FLAGS = frozenset({"--steps", "--checkpoint-interval", "--contact-sheet-interval", "--log-interval"})


def config_of(train_argv: Sequence[str]) -> TrainConfig:
    """The TrainConfig that ``cuetrain train`` builds from ``train_argv`` (which includes the three folders)."""
    p = argparse.ArgumentParser()
    add_train_arguments(p)
    return config_from_args(p.parse_args(list(train_argv)))


def recipe(cfg: TrainConfig) -> dict[str, Any]:
    """Every recipe field of ``cfg`` and what its defaults resolve to (optimizer, Adam's beta2, lr)."""
    fields = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in NOT_RECIPE}
    return {**fields, "optimizer_name": cfg.optimizer_name, "beta2": cfg.beta2, "base_lr": cfg.base_lr,
            "cosine_floor": cfg.cosine_floor}


def trainer_argv(frame_argv: Sequence[str]) -> list[str]:
    """The trainer's part of a frame's argv: what follows ``--``."""
    return list(frame_argv[list(frame_argv).index("--") + 1:])


def flags(argv: Sequence[str]) -> set[str]:
    """The ``--flags`` in ``argv``."""
    return {a for a in argv if a.startswith("--")}

"""One recipe on every path: ``cuetrain submit`` (its dry run) trains what ``cuetrain demo`` trains, apart from run
length, and the demo passes nothing but run length and output intervals."""

from __future__ import annotations

import shlex
from xml.etree import ElementTree

import pytest

from cue_plugin.submit import cli
from tests.cue_plugin.test_cli import FakeFarm
from tests.recipe_args import RUN_LENGTH_FLAGS, config_of, flags, recipe, trainer_argv
from trainer.demo import DEMO_STEPS, DEMO_TRAIN_ARGS, TASKS, task_train_args


def _paths(tmp_path):
    return ["--input", str(tmp_path / "in"), "--target", str(tmp_path / "gt"), "--run-dir", str(tmp_path / "run")]


def _dry_run_train_argv(tmp_path, capsys, *extra: str) -> list[str]:
    job = ["--show", "demo", "--shot", "sh010", "--user", "artist", *([] if "--template" in extra else
                                                                     ["--world-size", "2"])]
    assert cli.main(["submit", "--dry-run", *job, *extra, *_paths(tmp_path)], farm=FakeFarm()) == 0
    cmd = ElementTree.fromstring(capsys.readouterr().out).find(".//cmd").text
    return trainer_argv(shlex.split(cmd))


def test_the_demo_passes_only_run_length_and_output_intervals():
    assert flags(DEMO_TRAIN_ARGS) <= RUN_LENGTH_FLAGS, flags(DEMO_TRAIN_ARGS) - RUN_LENGTH_FLAGS


@pytest.mark.parametrize("template", ["", "cpu-test", "gpu-small", "gpu-medium", "gpu-large", "gpu-node-4x"])
def test_submit_dry_run_trains_the_demos_recipe(tmp_path, capsys, template):
    extra = ("--template", template) if template else ()
    farm = recipe(config_of(_dry_run_train_argv(tmp_path, capsys, *extra)))
    demo = recipe(config_of([*_paths(tmp_path), "--steps", str(DEMO_STEPS), *task_train_args("repair")]))
    assert farm == demo
    assert (farm["optimizer_name"], farm["beta2"], farm["base_lr"], farm["cosine_floor"]) == (
        "muon", 0.9, 2e-3, 0.3)  # the demo's measured recipe


@pytest.mark.parametrize("task, args", [("upscale", ["--scale", "2", "--crop-size", "32"]),
                                        ("matte", ["--target-channels", "A"])])
def test_submit_of_each_demo_task_trains_the_demos_recipe(tmp_path, capsys, task, args):
    farm = config_of(_dry_run_train_argv(tmp_path, capsys, *args))
    demo = config_of([*_paths(tmp_path), "--steps", str(DEMO_STEPS), *task_train_args(task)])
    assert recipe(farm) == recipe(demo)
    assert task in TASKS and farm.optimizer_name == "muon" and farm.matte_loss == "bce+l1"

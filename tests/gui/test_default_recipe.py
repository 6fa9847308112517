"""One recipe on every path: the "Train on Render Farm" dialog's job trains what ``cuetrain demo`` trains, apart
from run length."""

from __future__ import annotations

import pytest

from cue_plugin.submit.builder import frame_argv
from gui.submit_dialog import SubmitDialog
from tests.gui.conftest import fill_dialog
from tests.recipe_args import config_of, recipe, trainer_argv
from trainer.demo import DEMO_STEPS, task_train_args


@pytest.fixture
def dialog(qtbot, controller, tmp_path):
    widget = SubmitDialog(controller, template_folders=[])
    qtbot.addWidget(widget)
    fill_dialog(widget, tmp_path)
    return widget


def _demo(tmp_path, task: str):
    paths = ["--input", str(tmp_path / "in"), "--target", str(tmp_path / "gt"), "--run-dir", str(tmp_path / "new_run")]
    return config_of([*paths, "--steps", str(DEMO_STEPS), *task_train_args(task)])


def test_the_dialogs_default_job_trains_the_demos_recipe(dialog, tmp_path):
    job = config_of(trainer_argv(frame_argv(dialog.build_job())))
    assert recipe(job) == recipe(_demo(tmp_path, "repair"))
    assert (job.optimizer_name, job.beta2, job.base_lr) == ("muon", 0.9, 2e-3)


def test_a_matte_from_the_dialog_trains_the_matte_demos_recipe(dialog, tmp_path):
    dialog.learn_box.setCurrentIndex(dialog.learn_box.findData("matte"))
    job = config_of(trainer_argv(frame_argv(dialog.build_job())))
    assert recipe(job) == recipe(_demo(tmp_path, "matte"))
    assert (job.target_channels, job.optimizer_name, job.beta2, job.base_lr) == ("A", "muon", 0.9, 2e-3)

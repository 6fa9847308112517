"""A head start draws half its crops where the source model's error is largest (``--init-focus``,
trainer.learn.focus_map): the default where it was measured, none elsewhere, and the same crops after a resume."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from tests.trainer.learn.test_resume import _assert_same_run
from tests.trainer.learn.test_train import NON_DIST, _crash_after_step_4, cfg
from trainer.core.config import ConfigError
from trainer.learn import train as train_mod
from trainer.learn.resume import resumed_schedule
from trainer.record.rundir import RunPaths


def test_a_colour_head_start_with_muon_focuses_half_its_crops_and_no_other_run_does(pairs, tmp_path):
    head = cfg(pairs, tmp_path, init_from="earlier_run")
    assert head.focus_share == 0.5
    assert [cfg(pairs, tmp_path, **kw).focus_share for kw in (
        {}, {"init_from": "a", "optimizer": "adam"}, {"init_from": "a", "target_channels": "A"},
        {"init_from": "a", "scale": 2}, {"init_from": "a", "model_size": "medium"})] == [0.0] * 5
    assert cfg(pairs, tmp_path, init_from="a", init_focus=0.0).focus_share == 0.0
    assert cfg(pairs, tmp_path, init_from="a", optimizer="adam", init_focus=0.25).focus_share == 0.25
    for bad in ({"init_focus": 0.5}, {"init_from": "a", "init_focus": 1.5}):  # no source, or not a share
        with pytest.raises(ConfigError, match="init_focus"):
            cfg(pairs, tmp_path, **bad)


def test_a_head_start_resumed_after_a_crash_draws_the_crops_of_the_run_that_never_stopped(pairs, tmp_path,
                                                                                          monkeypatch):
    """The resumed run loads the source again for its focus (its own weights have moved on); a resume that drew
    uniform crops, or focused by its own weights, would end elsewhere: the run without focus is checked to differ."""
    train_mod.train(cfg(pairs, tmp_path / "a", steps=4, seed=1), NON_DIST)
    head = cfg(pairs, tmp_path / "straight", init_from=str(tmp_path / "a"))
    straight = train_mod.train(head, NON_DIST)
    _crash_after_step_4(monkeypatch, dataclasses.replace(head, run_dir=str(tmp_path / "resumed")))
    resumed = train_mod.train(dataclasses.replace(head, run_dir=str(tmp_path / "resumed"), resume=True), NON_DIST)
    _assert_same_run(straight, resumed)
    uniform = train_mod.train(dataclasses.replace(head, run_dir=str(tmp_path / "uniform"), init_focus=0.0), NON_DIST)
    assert any(not torch.equal(a, b) for a, b in zip(straight.model.state_dict().values(),
                                                      uniform.model.state_dict().values()))
    record = json.loads(RunPaths.of(tmp_path / "resumed").run_json.read_text())
    assert record["config"]["focus_share"] == 0.5 and record["state"] == "succeeded"


def test_a_checkpoint_from_before_the_focus_resumes_with_uniform_crops(pairs, tmp_path):
    head = cfg(pairs, tmp_path, init_from="a")
    recorded = {"base_lr": head.base_lr, "cosine_floor": head.cosine_floor}
    assert resumed_schedule(head, {"config": recorded}).focus_share == 0.0
    assert resumed_schedule(head, {"config": {**recorded, "focus_share": 0.5}}) is head
    given = cfg(pairs, tmp_path, init_from="a", init_focus=0.5)
    assert resumed_schedule(given, {"config": recorded}) is given  # --init-focus wins


def test_a_resume_whose_source_was_deleted_trains_on_with_uniform_crops(pairs, tmp_path, monkeypatch, caplog):
    """A farm retry days later: the source run was cleaned up. The resume must not fail on it; it warns and draws
    every crop uniformly (the weights it needs are the checkpoint's)."""
    import shutil

    train_mod.train(cfg(pairs, tmp_path / "a", steps=4, seed=1), NON_DIST)
    head = cfg(pairs, tmp_path / "b", init_from=str(tmp_path / "a"))
    _crash_after_step_4(monkeypatch, head)
    shutil.rmtree(tmp_path / "a")
    with caplog.at_level("WARNING", logger="trainer.learn.train"):
        resumed = train_mod.train(dataclasses.replace(head, resume=True), NON_DIST)
    assert resumed.step == 8 and "cannot be read again" in caplog.text
    assert json.loads(RunPaths.of(tmp_path / "b").run_json.read_text())["state"] == "succeeded"

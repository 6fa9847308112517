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


def _resumed(monkeypatch, head, run_dir):  # type: ignore[no-untyped-def]
    """``head`` in ``run_dir``: crashed after its step-4 checkpoint, then resumed; the resumed run's result."""
    crashed = dataclasses.replace(head, run_dir=str(run_dir))
    _crash_after_step_4(monkeypatch, crashed)
    return train_mod.train(dataclasses.replace(crashed, resume=True), NON_DIST)


def _weights_differ(a, b) -> bool:  # type: ignore[no-untyped-def]
    return any(not torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))


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
    _assert_same_run(straight, _resumed(monkeypatch, head, tmp_path / "resumed"))
    uniform = train_mod.train(dataclasses.replace(head, run_dir=str(tmp_path / "uniform"), init_focus=0.0), NON_DIST)
    assert _weights_differ(straight, uniform)
    record = json.loads(RunPaths.of(tmp_path / "resumed").run_json.read_text())
    assert record["config"]["focus_share"] == 0.5 and record["state"] == "succeeded"


def test_a_checkpoint_from_before_the_focus_resumes_with_uniform_crops(pairs, tmp_path):
    head = cfg(pairs, tmp_path, init_from="a")
    recorded = {"base_lr": head.base_lr, "cosine_floor": head.cosine_floor}
    assert resumed_schedule(head, {"config": recorded}).focus_share == 0.0
    now = {**recorded, "focus_share": 0.5, "encoder_lr": head.encoder_lr}  # as this version records them
    assert resumed_schedule(head, {"config": now}) is head
    given = cfg(pairs, tmp_path, init_from="a", init_focus=0.5)
    assert resumed_schedule(given, {"config": now}) is given  # --init-focus wins


def test_the_focus_follows_the_network_and_a_resume_draws_from_the_checkpoints_map(pairs, tmp_path, monkeypatch):
    """``--init-focus-every 2``: the map is made again at steps 2, 4 and 6 from the network being trained. The run
    crashed after step 4 resumes from the map its checkpoint holds (made at step 4), so it ends bit for bit where the
    run that never stopped does; a resume that made the source's map again, or kept the source's map all run (the
    run without refresh, checked to differ), would end elsewhere."""
    from trainer.learn import focus_map

    monkeypatch.setattr(focus_map, "REFRESH_PIXEL_SHARE", 1e9)  # these tiny crops: never stretched (tested apart)
    train_mod.train(cfg(pairs, tmp_path / "a", steps=4, seed=1), NON_DIST)
    head = cfg(pairs, tmp_path / "straight", init_from=str(tmp_path / "a"), init_focus_every=2,
               lr=3e-2)  # large steps: the network's error map moves off the source's within 2 steps
    made: list[int] = []
    original = train_mod._Loop._refresh_focus

    def counting(self, step, last_step):  # type: ignore[no-untyped-def]
        before = self._focus_cells
        original(self, step, last_step)
        if self._focus_cells is not before:
            made.append(step)

    monkeypatch.setattr(train_mod._Loop, "_refresh_focus", counting)
    straight = train_mod.train(head, NON_DIST)
    assert made == [2, 4, 6]
    _assert_same_run(straight, _resumed(monkeypatch, head, tmp_path / "resumed"))
    kept = train_mod.train(dataclasses.replace(head, run_dir=str(tmp_path / "kept"), init_focus_every=0), NON_DIST)
    assert _weights_differ(straight, kept)


def test_a_resume_whose_source_was_deleted_draws_from_the_checkpoints_map(pairs, tmp_path, monkeypatch):
    """A farm retry days later: the source run was cleaned up. The checkpoint holds the map in use, so the resume
    does not need the source: it ends where the run that never stopped does."""
    import shutil

    train_mod.train(cfg(pairs, tmp_path / "a", steps=4, seed=1), NON_DIST)
    head = cfg(pairs, tmp_path / "straight", init_from=str(tmp_path / "a"))
    straight = train_mod.train(head, NON_DIST)
    crashed = dataclasses.replace(head, run_dir=str(tmp_path / "b"))
    _crash_after_step_4(monkeypatch, crashed)
    shutil.rmtree(tmp_path / "a")  # between the crash and the resume
    _assert_same_run(straight, train_mod.train(dataclasses.replace(crashed, resume=True), NON_DIST))


def test_an_older_checkpoint_whose_source_was_deleted_trains_on_with_uniform_crops(pairs, tmp_path, monkeypatch,
                                                                                   caplog):
    """A checkpoint written before the map was checkpointed needs the source again; with the source gone the resume
    must not fail: it warns and draws every crop uniformly (the weights it needs are the checkpoint's)."""
    import shutil

    train_mod.train(cfg(pairs, tmp_path / "a", steps=4, seed=1), NON_DIST)
    head = cfg(pairs, tmp_path / "b", init_from=str(tmp_path / "a"))
    state = train_mod._Loop._state
    monkeypatch.setattr(train_mod._Loop, "_state", lambda self: {**state(self), "focus_cells": None})
    _crash_after_step_4(monkeypatch, head)
    monkeypatch.setattr(train_mod._Loop, "_state", state)
    shutil.rmtree(tmp_path / "a")
    with caplog.at_level("WARNING", logger="trainer.learn.train"):
        resumed = train_mod.train(dataclasses.replace(head, resume=True), NON_DIST)
    assert resumed.step == 8 and "cannot be read again" in caplog.text
    assert json.loads(RunPaths.of(tmp_path / "b").run_json.read_text())["state"] == "succeeded"


def test_a_map_that_would_cost_too_much_renders_one_frame_whose_map_every_frame_takes(pairs, tmp_path, monkeypatch):
    """The test shot's 4 frames of 48x40 px are more pixels than MAP_PIXEL_SHARE of what 8 steps of 4 crops of 16 px
    train on (1,228 px): the source renders frame 2 alone, and the checkpointed map gives every frame its cells. With
    a share that holds all four, every frame is rendered."""
    from trainer.learn import focus_map
    from trainer.learn.run_writer import load_latest_checkpoint

    train_mod.train(cfg(pairs, tmp_path / "a", steps=4, seed=1), NON_DIST)
    rendered: list[int] = []
    original = focus_map.frame_error

    def recording(net, source, frame, device):  # type: ignore[no-untyped-def]
        rendered.append(frame)
        return original(net, source, frame, device)

    monkeypatch.setattr(focus_map, "frame_error", recording)
    head = cfg(pairs, tmp_path / "b", init_from=str(tmp_path / "a"))
    train_mod.train(head, NON_DIST)
    cells = load_latest_checkpoint(RunPaths.of(tmp_path / "b"))["focus_cells"]
    assert rendered == [2] and len(cells) == 4 and all(torch.equal(cells[2], c) for c in cells) and cells.max() > 0
    rendered.clear()
    monkeypatch.setattr(focus_map, "MAP_PIXEL_SHARE", 1.0)  # 8,192 px: all four frames
    train_mod.train(dataclasses.replace(head, run_dir=str(tmp_path / "c")), NON_DIST)
    assert rendered == [0, 1, 2, 3]


def test_a_resume_without_the_map_in_its_checkpoint_renders_the_same_frames_again(pairs, tmp_path, monkeypatch):
    """A checkpoint from before the map was checkpointed, with the source still there: the resume makes the source's
    map again over the same frames (the whole run's steps set the stride, not the steps left), so it ends where the
    run that never stopped does. At this share 8 steps render frames 1 and 3 (4,096 px), the 4 left would render
    frame 2 alone."""
    from trainer.learn import focus_map

    monkeypatch.setattr(focus_map, "MAP_PIXEL_SHARE", 0.5)
    train_mod.train(cfg(pairs, tmp_path / "a", steps=4, seed=1), NON_DIST)
    head = cfg(pairs, tmp_path / "straight", init_from=str(tmp_path / "a"))
    straight = train_mod.train(head, NON_DIST)
    crashed = dataclasses.replace(head, run_dir=str(tmp_path / "b"))
    state = train_mod._Loop._state
    monkeypatch.setattr(train_mod._Loop, "_state", lambda self: {**state(self), "focus_cells": None})
    _crash_after_step_4(monkeypatch, crashed)
    monkeypatch.setattr(train_mod._Loop, "_state", state)
    _assert_same_run(straight, train_mod.train(dataclasses.replace(crashed, resume=True), NON_DIST))


def test_a_checkpoints_map_of_zeros_resumes_with_uniform_crops_and_says_so(pairs, tmp_path, monkeypatch, caplog):
    """A map that is 0 everywhere (a source that rendered every frame exactly) has nothing to focus on: the resume
    draws every crop uniformly and does not claim to draw by the checkpoint's map."""
    train_mod.train(cfg(pairs, tmp_path / "a", steps=4, seed=1), NON_DIST)
    head = cfg(pairs, tmp_path / "b", init_from=str(tmp_path / "a"))
    state = train_mod._Loop._state

    def zeros(self):  # type: ignore[no-untyped-def]
        saved = state(self)
        return {**saved, "focus_cells": torch.zeros_like(saved["focus_cells"])}

    monkeypatch.setattr(train_mod._Loop, "_state", zeros)
    _crash_after_step_4(monkeypatch, head)
    monkeypatch.setattr(train_mod._Loop, "_state", state)
    with caplog.at_level("INFO", logger="trainer.learn.train"):
        resumed = train_mod.train(dataclasses.replace(head, resume=True), NON_DIST)
    assert resumed.step == 8 and "the checkpoint's map is 0 everywhere" in caplog.text
    assert "drawn by the checkpoint's map" not in caplog.text

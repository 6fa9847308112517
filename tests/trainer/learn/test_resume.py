"""``--resume`` keeps the schedule the run started with (``trainer.learn.resume.resumed_schedule``)."""

from __future__ import annotations

import json

import pytest
import torch

from tests.trainer.learn.test_train import NON_DIST, _crash_after_step_4, cfg
from trainer.learn import train as train_mod
from trainer.learn.resume import resumed_schedule
from trainer.record.rundir import RunPaths


def _rewrite_checkpoint_config(run_dir, edit) -> None:
    """Apply ``edit`` to the ``config`` of every checkpoint in ``run_dir`` (as an older version wrote it)."""
    for path in RunPaths.of(run_dir).checkpoints.glob("*.pt"):
        ckpt = torch.load(path, weights_only=False)
        edit(ckpt["config"])
        torch.save(ckpt, path)


def _assert_same_run(straight, resumed) -> None:
    assert resumed.start_step == 4 and resumed.step == 8
    for (k, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("written_by", ["this version", "before the floor was recorded"])
def test_a_run_resumed_after_the_default_floor_changed_ends_its_cosine_where_it_started(
        pairs, tmp_path, monkeypatch, written_by):
    """A colour run with Muon written when every cosine ended at a tenth resumes under today's default (0.3 for
    that case) with 0.1: bit for bit the run that never stopped. The old checkpoint records no floor at all."""
    assert cfg(pairs, tmp_path).cosine_floor == 0.3 and cfg(pairs, tmp_path).optimizer_name == "muon"
    straight = train_mod.train(cfg(pairs, tmp_path / "straight", lr_floor=0.1), NON_DIST)
    _crash_after_step_4(monkeypatch, cfg(pairs, tmp_path / "resumed", lr_floor=0.1))
    if written_by != "this version":
        _rewrite_checkpoint_config(tmp_path / "resumed", lambda c: [c.pop(k) for k in ("lr_floor", "cosine_floor",
                                                                                         "base_lr")])
    resumed = train_mod.train(cfg(pairs, tmp_path / "resumed", resume=True), NON_DIST)
    _assert_same_run(straight, resumed)
    record = json.loads(RunPaths.of(tmp_path / "resumed").run_json.read_text())
    assert record["config"]["cosine_floor"] == 0.1 and record["state"] == "succeeded"


def test_a_run_resumed_after_the_default_lr_changed_keeps_its_lr(pairs, tmp_path, monkeypatch):
    """The lr the checkpoint's run resolved (``base_lr``) stays when ``--lr`` is not given; one given wins."""
    old_lr = cfg(pairs, tmp_path).base_lr / 2  # as if the default had been half of today's
    straight = train_mod.train(cfg(pairs, tmp_path / "straight", lr=old_lr), NON_DIST)
    _crash_after_step_4(monkeypatch, cfg(pairs, tmp_path / "resumed", lr=old_lr))
    resumed = train_mod.train(cfg(pairs, tmp_path / "resumed", resume=True), NON_DIST)
    _assert_same_run(straight, resumed)
    assert json.loads(RunPaths.of(tmp_path / "resumed").run_json.read_text())["config"]["base_lr"] == old_lr


def test_an_explicit_lr_or_floor_on_resume_wins_and_a_legacy_checkpoint_keeps_todays_lr(pairs, tmp_path):
    today = cfg(pairs, tmp_path)
    recorded = {"base_lr": today.base_lr / 2, "cosine_floor": 0.1, "lr_floor": None}
    assert resumed_schedule(today, {"config": recorded}) == cfg(pairs, tmp_path, lr=today.base_lr / 2, lr_floor=0.1)
    given = cfg(pairs, tmp_path, lr=1e-3, lr_floor=0.5)
    assert resumed_schedule(given, {"config": recorded}) is given
    assert resumed_schedule(today, {"config": {"lr_floor": None}}) is today  # repair at 0.3 then and now
    matte, upres = cfg(pairs, tmp_path, target_channels="A"), cfg(pairs, tmp_path, scale=2)
    assert (matte.cosine_floor, upres.cosine_floor) == (0.3, 0.5)  # today's; a tenth when lr_floor was new
    for job in (matte, upres):
        assert resumed_schedule(job, {"config": {"lr_floor": None}}).cosine_floor == 0.1
    assert resumed_schedule(today, {"config": {}}) == cfg(pairs, tmp_path, lr_floor=0.1)  # before lr_floor existed
    assert resumed_schedule(today, {}) == cfg(pairs, tmp_path, lr_floor=0.1)

"""trainer.learn.run_writer.check_resumable: which checkpoints a run may resume from."""

from __future__ import annotations

import pytest

from trainer.core.config import ConfigError
from trainer.learn.run_writer import check_resumable


def test_a_checkpoint_of_the_same_network_is_resumable():
    check_resumable({"model_size": "small", "architecture": "v3"}, "ckpt_00000010.pt", "small", "v3")


def test_another_size_is_refused_with_the_file_and_the_fix():
    with pytest.raises(ConfigError, match=r"ckpt_00000010.pt is a small model, but --model-size is medium; use"):
        check_resumable({"model_size": "small", "architecture": "v3"}, "ckpt_00000010.pt", "medium", "v3")


def test_another_architecture_is_refused_and_a_checkpoint_without_one_is_v1():
    old = {"model_size": "small"}  # written before architectures were named
    check_resumable(old, "ckpt_00000010.pt", "small", "v1")
    with pytest.raises(ConfigError, match=r"is a v1 network, but --architecture is v3; resume with --architecture v1"):
        check_resumable(old, "ckpt_00000010.pt", "small", "v3")


def test_another_optimizer_is_refused_both_ways():
    adam = {"model_size": "small", "architecture": "v3", "optimizer": {"state": {}, "param_groups": []}}
    muon = {**adam, "optimizer": {"adam": {}, "muon": {}}}  # trainer.learn.optim.MuonAdam.state_dict's keys
    check_resumable(adam, "ckpt_00000010.pt", "small", "v3", "adam")
    check_resumable(muon, "ckpt_00000010.pt", "small", "v3", "muon")
    with pytest.raises(ConfigError, match=r"trained with --optimizer adam, but --optimizer is muon; resume with "
                                          r"--optimizer adam or start another --run-dir"):
        check_resumable(adam, "ckpt_00000010.pt", "small", "v3", "muon")
    with pytest.raises(ConfigError, match=r"trained with --optimizer muon, but --optimizer is adam"):
        check_resumable(muon, "ckpt_00000010.pt", "small", "v3", "adam")

"""trainer.learn.run_writer.check_resumable: which checkpoints a run may resume from."""

from __future__ import annotations

import pytest

from trainer.core.config import ConfigError
from trainer.core.channels import ChannelPlan
from trainer.learn.run_writer import check_resumable, resume_optimizer


def test_a_checkpoint_of_the_same_network_is_resumable():
    check_resumable({"model_size": "small", "architecture": "v3"}, "ckpt_00000010.pt", "small", "v3")


def test_another_size_is_refused_with_the_file_and_the_fix():
    with pytest.raises(ConfigError, match=r"ckpt_00000010.pt is another network \(model size small there, medium here\): resume with "
                                          r"--model-size small or start another --run-dir"):
        check_resumable({"model_size": "small", "architecture": "v3"}, "ckpt_00000010.pt", "medium", "v3")


def test_another_architecture_is_refused_and_a_checkpoint_without_one_is_v1():
    old = {"model_size": "small"}  # written before architectures were named
    check_resumable(old, "ckpt_00000010.pt", "small", "v1")
    with pytest.raises(ConfigError, match=r"\(architecture v1 there, v3 here\): resume with --architecture v1 "):
        check_resumable(old, "ckpt_00000010.pt", "small", "v3")


def test_another_optimizer_is_refused_both_ways():
    adam = {"model_size": "small", "architecture": "v3", "optimizer": {"state": {}, "param_groups": []}}
    muon = {**adam, "optimizer": {"adam": {}, "muon": {}}}  # trainer.learn.optim.MuonAdam.state_dict's keys
    check_resumable(adam, "ckpt_00000010.pt", "small", "v3", "adam")
    check_resumable(muon, "ckpt_00000010.pt", "small", "v3", "muon")
    with pytest.raises(ConfigError, match=r"trained with --optimizer adam, but --optimizer is muon; resume with "
                                          r"--optimizer adam \(or auto\) or start another --run-dir"):
        check_resumable(adam, "ckpt_00000010.pt", "small", "v3", "muon")
    with pytest.raises(ConfigError, match=r"trained with --optimizer muon, but --optimizer is adam"):
        check_resumable(muon, "ckpt_00000010.pt", "small", "v3", "adam")


def test_auto_resumes_with_the_checkpoints_optimizer_and_an_explicit_one_is_kept():
    adam = {"optimizer": {"state": {}, "param_groups": []}}
    muon = {"optimizer": {"adam": {}, "muon": {}}}
    assert resume_optimizer("auto", "muon", adam) == "adam" and resume_optimizer("auto", "adam", muon) == "muon"
    assert resume_optimizer("muon", "muon", adam) == "muon"  # check_resumable then refuses it


def test_other_channels_are_refused_and_a_checkpoint_without_them_is_rgb():
    matte = {"model_size": "small", "architecture": "v3",
             "config": {"input_channels": "R,G,B", "target_channels": "A"}}
    check_resumable(matte, "ckpt_00000010.pt", "small", "v3", channels=ChannelPlan(("R", "G", "B"), ("A",)))
    with pytest.raises(ConfigError, match=r"ckpt_00000010.pt was trained with --input-channels R,G,B "
                                          r"--target-channels A, but this run has --input-channels R,G,B "
                                          r"--target-channels R; resume with --input-channels R,G,B "
                                          r"--target-channels A or start another --run-dir"):
        check_resumable(matte, "ckpt_00000010.pt", "small", "v3", channels=ChannelPlan(("R", "G", "B"), ("R",)))
    old = {"model_size": "small", "architecture": "v3", "config": {}}  # written before channels were named
    check_resumable(old, "ckpt_00000010.pt", "small", "v3")
    with pytest.raises(ConfigError, match=r"trained with --input-channels R,G,B --target-channels R,G,B, but"):
        check_resumable(old, "ckpt_00000010.pt", "small", "v3", channels=ChannelPlan(("R", "G", "B"), ("A",)))


def test_a_v2_checkpoint_is_refused_with_the_file_and_what_to_do():
    """v2 left the product (issue 49): resuming one names the file and says to start another run, not to pass an
    --architecture v2 that no longer exists."""
    with pytest.raises(ConfigError) as info:
        check_resumable({"model_size": "small", "architecture": "v2"}, "ckpt_00000010.pt", "small", "v3")
    text = str(info.value)
    assert text.startswith("checkpoint ckpt_00000010.pt: architecture v2 (the space-to-depth stem") and (
        text.endswith("start another --run-dir")) and "--architecture v2" not in text

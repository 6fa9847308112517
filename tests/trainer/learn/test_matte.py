"""Mattes through the real trainer (issue 40): RGB in, the Ground Truth's alpha out, through one rank in process
and two local ranks (``cuetrain local``), with the exports, the inference and the preview frames they write."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image
import torch

from tests.conftest import make_matte_pairs, run_cli
from trainer.core.config import TrainConfig
from trainer.core.envvars import DistEnv
from trainer.data.images import read_channels, read_image
from trainer.data.sequences import find_sequence
from trainer.data.matte_scores import matte_scores
from trainer.learn.train import train
from trainer.record.rundir import RunPaths, read_json

NON_DIST = DistEnv(distributed=False, missing=("COPYCAT_MAIN_ADDR",))


def cfg(inp, tgt, run_dir, **kw) -> TrainConfig:
    base = dict(input_dir=str(inp), target_dir=str(tgt), run_dir=str(run_dir), steps=4, batch_size=4, crop_size=16,
                checkpoint_interval=4, contact_sheet_interval=4, log_interval=2, warmup_steps=1, target_channels="A")
    base.update(kw)
    return TrainConfig(**base)


def test_a_matte_is_learnt_from_the_alpha_not_from_the_colour_of_the_ground_truth(tmp_path):
    """The Ground Truth's R, G, B hold the opposite of its alpha: a trainer that learnt from R (the mutant) predicts
    the complement, IoU near 0; learning from A gives a matte close to it. Also: the output lies in 0..1."""
    inp, tgt = make_matte_pairs(tmp_path / "data", frames=2)
    res = train(cfg(inp, tgt, tmp_path / "run", steps=120, lr=3e-3, batch_size=8, log_interval=40,
                    checkpoint_interval=120, contact_sheet_interval=120, ema_decay=0.0), NON_DIST)
    net = res.model.float().eval()
    ious = []
    for n, path in find_sequence(inp).items():
        x = torch.from_numpy(read_image(path)).permute(2, 0, 1)[None]
        with torch.no_grad():
            matte = net(x)[0, 0].numpy()
        assert matte.min() >= 0.0 and matte.max() <= 1.0
        truth = np.asarray(Image.open(find_sequence(tgt)[n]))[..., 3] / 255.0  # not through cuetrain's reader
        ious.append(matte_scores(matte, truth)[0])
    assert np.mean(ious) > 0.7, ious


def test_a_matte_job_on_two_local_ranks_exports_a_matte_model_and_infers_rgba_frames(tmp_path):
    inp, tgt = make_matte_pairs(tmp_path / "data")
    run = tmp_path / "run"
    r = run_cli("local", "--world-size", "2", "--input", str(inp), "--target", str(tgt), "--run-dir", str(run),
                "--steps", "4", "--batch-size", "4", "--crop-size", "16", "--target-channels", "A",
                "--log-interval", "2", "--checkpoint-interval", "4", "--contact-sheet-interval", "4",
                "--preview", str(sorted(find_sequence(inp).values())[0]), "-v")
    assert r.returncode == 0, r.stderr[-3000:]
    paths = RunPaths.of(run)
    record = read_json(paths.run_json)
    assert record["state"] == "succeeded" and record["config"]["target_channels"] == "A"
    meta = json.loads((run / "model.json").read_text())
    assert meta["channels_in"] == ["R", "G", "B"] and meta["channels_out"] == ["A"] and meta["task"] == "matte"
    nk = (run / "model_nuke.nk").read_text()
    assert "channelsOut rgba.alpha" in nk and '"rgba.red, rgba.green, rgba.blue"' in nk
    assert paths.list_contact_sheets() and paths.list_previews()
    out = tmp_path / "out"
    r = run_cli("infer", "--model", str(paths.model), "--input", str(inp), "--output", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    first = sorted(find_sequence(out).values())[0]
    rgba = read_channels(first, ["R", "G", "B", "A"])
    source = read_image(sorted(find_sequence(inp).values())[0])
    assert np.array_equal(rgba[..., :3], source)  # the input's RGB untouched, its new alpha the matte
    assert 0.0 <= rgba[..., 3].min() and rgba[..., 3].max() <= 1.0


def test_a_missing_target_channel_fails_as_bad_input_naming_the_file_and_its_channels(tmp_path):
    inp, tgt = make_matte_pairs(tmp_path / "data", frames=2)
    r = run_cli("train", "--input", str(inp), "--target", str(inp), "--run-dir", str(tmp_path / "run"),
                "--steps", "2", "--batch-size", "2", "--crop-size", "8", "--target-channels", "A")
    assert r.returncode == 2, r.stderr[-2000:]
    assert "has no channel 'A'" in r.stderr and "R, G, B" in r.stderr

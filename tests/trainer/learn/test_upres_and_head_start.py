"""Upres (``--scale``) and a head start (``--init-from``) through the real trainer: one rank in process, two local
ranks through ``cuetrain local``, and the exports and inference of what they train."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import make_matte_pairs, make_pairs, make_upres_pairs, run_cli
from trainer.core.config import ConfigError, TrainConfig
from trainer.core.envvars import DistEnv
from trainer.data.images import read_image
from trainer.data.sequences import find_sequence
from trainer.learn.run_writer import load_latest_checkpoint
from trainer.learn.train import train
from trainer.record.rundir import RunPaths, read_json

NON_DIST = DistEnv(distributed=False, missing=("COPYCAT_MAIN_ADDR",))


def cfg(inp, tgt, run_dir, **kw) -> TrainConfig:
    base = dict(input_dir=str(inp), target_dir=str(tgt), run_dir=str(run_dir), steps=4, batch_size=4, crop_size=8,
                checkpoint_interval=4, contact_sheet_interval=4, log_interval=2, warmup_steps=1)
    base.update(kw)
    return TrainConfig(**base)


def test_an_upres_run_on_two_local_ranks_exports_a_2x_model_and_infers_2x_frames(tmp_path):
    inp, tgt = make_upres_pairs(tmp_path / "data", scale=2)
    run = tmp_path / "run"
    r = run_cli("local", "--world-size", "2", "--input", str(inp), "--target", str(tgt), "--run-dir", str(run),
                "--steps", "4", "--batch-size", "4", "--crop-size", "8", "--scale", "2", "--log-interval", "2",
                "--checkpoint-interval", "4", "--contact-sheet-interval", "4", "-v")
    assert r.returncode == 0, r.stderr[-3000:]
    paths = RunPaths.of(run)
    record = read_json(paths.run_json)
    assert record["state"] == "succeeded" and record["world_size"] == 2 and record["config"]["scale"] == 2
    meta = json.loads((run / "model.json").read_text())
    assert meta["scale"] == 2 and meta["model_config"]["scale"] == 2
    assert "outputScale 2" in (run / "model_nuke.nk").read_text()
    model = torch.jit.load(str(paths.model))
    assert model(torch.rand(1, 3, 20, 24)).shape == (1, 3, 40, 48)
    sheet = read_image(paths.list_contact_sheets()[-1][1])
    assert sheet.shape[1] > 3 * 16  # three columns of at least the 16 px Ground Truth crops
    out = tmp_path / "out"
    r = run_cli("infer", "--model", str(paths.model), "--input", str(inp), "--output", str(out))
    assert r.returncode == 0, r.stderr[-3000:]
    written = find_sequence(out)
    assert sorted(written) == sorted(find_sequence(inp))
    assert read_image(next(iter(written.values()))).shape == (40, 48, 3)


def test_an_untrained_upres_model_starts_at_the_bilinear_upscale_and_training_beats_it(tmp_path):
    """The identity the divergence watch compares against is the network's start: bilinear (trainer.learn.model);
    a short run ends below it on the training crops (the loss is logged per interval)."""
    inp, tgt = make_upres_pairs(tmp_path / "data", scale=2, frames=2, height=24, width=32)
    res = train(cfg(inp, tgt, tmp_path / "run", scale=2, steps=40, crop_size=12, lr=3e-3, log_interval=40,
                    checkpoint_interval=40, contact_sheet_interval=40), NON_DIST)
    x = torch.from_numpy(read_image(sorted(find_sequence(inp).values())[0])).permute(2, 0, 1)[None]
    y = torch.from_numpy(read_image(sorted(find_sequence(tgt).values())[0])).permute(2, 0, 1)[None]
    bilinear = torch.nn.functional.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
    with torch.no_grad():
        out = res.model.float()(x)
    assert out.shape == y.shape
    assert (out - y).abs().mean() < (bilinear - y).abs().mean()


def test_a_checkpoint_of_another_scale_is_not_resumed(tmp_path):
    inp, tgt = make_upres_pairs(tmp_path / "data", scale=2, frames=2)
    train(cfg(inp, tgt, tmp_path / "run", scale=2, steps=2, checkpoint_interval=2), NON_DIST)
    same_size = make_pairs(tmp_path / "same", frames=2)
    with pytest.raises(ConfigError, match=r"is another network \(scale 2 there, 1 here\): resume with --scale 2"):
        train(cfg(*same_size, tmp_path / "run", steps=4, resume=True), NON_DIST)


def test_init_from_starts_from_the_source_weights_and_run_json_records_it(tmp_path):
    """With a learning rate too small to move anything, a run that starts from run A ends with A's weights; a run
    that skipped loading them (the mutant) would end with its own random ones, far from A's."""
    inp, tgt = make_pairs(tmp_path / "data", frames=2)
    a = train(cfg(inp, tgt, tmp_path / "a", steps=6, seed=1, ema_decay=0.0), NON_DIST)
    b_run = tmp_path / "b"
    b = train(cfg(inp, tgt, b_run, steps=2, lr=1e-12, warmup_steps=0, checkpoint_interval=2, ema_decay=0.0,
                  init_from=str(tmp_path / "a")), NON_DIST)
    source, started = a.model.state_dict(), b.model.state_dict()
    for k in source:
        assert torch.allclose(source[k].float(), started[k].float(), atol=1e-6), k
    scratch = train(cfg(inp, tgt, tmp_path / "c", steps=2, lr=1e-12, warmup_steps=0, ema_decay=0.0), NON_DIST)
    assert any(not torch.allclose(source[k].float(), scratch.model.state_dict()[k].float(), atol=1e-3) for k in source)
    record = read_json(RunPaths.of(b_run).run_json)
    assert record["init_from"]["path"] == str(tmp_path / "a") and record["config"]["init_from"] == str(tmp_path / "a")
    ckpt = load_latest_checkpoint(RunPaths.of(b_run))
    assert ckpt["step"] == 2  # the schedule and step count start fresh: 2 steps of its own


@pytest.mark.parametrize("init_ema, updates", [("fresh", 2), ("source", 6 + 2)])
def test_the_ema_of_a_head_start_restarts_or_counts_on_from_the_source_step(tmp_path, init_ema, updates):
    """``--init-ema``: ``fresh`` restarts the average's warm-up (2 updates of its own), ``source`` counts on from
    the source's 6 steps; a run that ignored the field would count 2 in both."""
    inp, tgt = make_pairs(tmp_path / "data", frames=2)
    train(cfg(inp, tgt, tmp_path / "a", steps=6, checkpoint_interval=6), NON_DIST)
    b_run = tmp_path / "b"
    train(cfg(inp, tgt, b_run, steps=2, checkpoint_interval=2, init_from=str(tmp_path / "a"), init_ema=init_ema),
          NON_DIST)
    assert load_latest_checkpoint(RunPaths.of(b_run))["ema"]["updates"] == updates
    assert read_json(RunPaths.of(b_run).run_json)["config"]["init_ema"] == init_ema


def test_init_ema_names_its_choices_on_a_bad_value(tmp_path):
    with pytest.raises(ConfigError, match="init_ema"):
        cfg(tmp_path, tmp_path, tmp_path / "r", init_ema="source-weights")


def test_init_from_a_model_of_another_scale_fails_as_bad_input_naming_the_mismatch(tmp_path):
    inp, tgt = make_pairs(tmp_path / "data", frames=2)
    train(cfg(inp, tgt, tmp_path / "a", steps=2), NON_DIST)
    up_in, up_tgt = make_upres_pairs(tmp_path / "up", scale=2, frames=2)
    r = run_cli("train", "--input", str(up_in), "--target", str(up_tgt), "--run-dir", str(tmp_path / "b"),
                "--steps", "2", "--batch-size", "2", "--crop-size", "8", "--scale", "2",
                "--init-from", str(tmp_path / "a"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "scale 1 there, 2 here" in r.stderr


def test_two_local_ranks_start_from_the_same_model(tmp_path):
    """With an lr too small to move anything, the gang's checkpoint holds run A's weights (a gang that skipped the
    load would hold its own random ones, far from A's: the same run from scratch is checked to differ), and both
    ranks log the load (each checks the source) and the crop focus (one all-reduce of the source's error, and one of
    the network's at its refresh after step 1)."""
    inp, tgt = make_pairs(tmp_path / "data", frames=2)
    source = train(cfg(inp, tgt, tmp_path / "a", steps=2, seed=1, ema_decay=0.0), NON_DIST).model.state_dict()
    common = ["--world-size", "2", "--input", str(inp), "--target", str(tgt), "--steps", "2", "--batch-size", "16",
              "--crop-size", "32", "--lr", "1e-12",  # crops of the frames' size: a refresh every step is not stretched "--warmup-steps", "0", "--ema-decay", "0",
              "--checkpoint-interval", "2", "-v"]
    run, scratch = tmp_path / "b", tmp_path / "c"
    r = run_cli("local", *common, "--run-dir", str(run), "--init-from", str(tmp_path / "a"), "--init-focus-every", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    record = read_json(RunPaths.of(run).run_json)
    assert record["state"] == "succeeded" and record["init_from"]["kind"] == "run"
    logs = [RunPaths.of(run).rank_log(k).read_text() for k in (0, 1)]
    assert all("weights from" in text for text in logs), logs
    assert all("crop focus: 50% of each batch's crops drawn where the source model's error" in text for text in logs)
    assert all("drawn where the network at step 1's error" in text for text in logs), logs  # its refresh
    started = load_latest_checkpoint(RunPaths.of(run))["model"]
    for k in source:
        assert torch.allclose(source[k].float(), started[k].float(), atol=1e-6), k
    r = run_cli("local", *common, "--run-dir", str(scratch))
    assert r.returncode == 0, r.stderr[-3000:]
    own = load_latest_checkpoint(RunPaths.of(scratch))["model"]
    assert any(not torch.allclose(source[k].float(), own[k].float(), atol=1e-3) for k in source)


def test_init_from_a_four_channel_run_into_the_same_network(tmp_path):
    """R,G,B,A in and out (the shot's RGBA frames on both sides): run B starts from run A's weights; a 3-channel
    run is refused naming both counts, and so is a 4-channel start for an RGB run."""
    _, rgba = make_matte_pairs(tmp_path / "data", frames=2)
    four = dict(input_channels="R,G,B,A", target_channels="R,G,B,A")
    a = train(cfg(rgba, rgba, tmp_path / "a", steps=2, seed=1, ema_decay=0.0, **four), NON_DIST)
    b = train(cfg(rgba, rgba, tmp_path / "b", steps=2, lr=1e-12, warmup_steps=0, ema_decay=0.0,
                  init_from=str(tmp_path / "a"), **four), NON_DIST)
    for k, v in a.model.state_dict().items():
        assert torch.allclose(v.float(), b.model.state_dict()[k].float(), atol=1e-6), k
    assert read_json(RunPaths.of(tmp_path / "b").run_json)["init_from"]["channels"] == 4
    with pytest.raises(ConfigError, match="channels 4 there, 3 here; target channels 4 there, 3 here"):
        train(cfg(rgba, rgba, tmp_path / "rgb", steps=2, init_from=str(tmp_path / "a")), NON_DIST)
    train(cfg(rgba, rgba, tmp_path / "rgb_a", steps=2), NON_DIST)
    with pytest.raises(ConfigError, match="channels 3 there, 4 here; target channels 3 there, 4 here"):
        train(cfg(rgba, rgba, tmp_path / "c", steps=2, init_from=str(tmp_path / "rgb_a"), **four), NON_DIST)

"""Bad input through the CLI: one clear line naming the path/variable, exit code 2, nothing written."""

from __future__ import annotations

import numpy as np
import pytest

from trainer.cli import main
from trainer.core.config import ConfigError


def run(capsys, monkeypatch, *argv, env=None):
    for k in ("COPYCAT_MAIN_ADDR", "COPYCAT_MAIN_PORT", "COPYCAT_RANK", "COPYCAT_WORLD_SIZE", "RANK", "WORLD_SIZE",
              "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    code = main(list(argv))
    return code, capsys.readouterr().err


def train_args(pairs, run_dir, *extra):
    return ["train", "--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir", str(run_dir),
            "--steps", "2", "--crop-size", "16", "--batch-size", "2", *extra]


def test_missing_input_directory(capsys, monkeypatch, tmp_path, pairs):
    code, err = run(capsys, monkeypatch, "train", "--input", str(tmp_path / "nope"), "--target", str(pairs[1]),
                    "--run-dir", str(tmp_path / "run"))
    assert code == 2 and "nope" in err and err.startswith("cuetrain: error:")


def test_unpaired_frames_are_listed(capsys, monkeypatch, tmp_path, pairs):
    (pairs[1] / "plate.1004.png").unlink()
    code, err = run(capsys, monkeypatch, *train_args(pairs, tmp_path / "run"))
    assert code == 2 and "1004" in err


def test_crop_larger_than_frames(capsys, monkeypatch, tmp_path, pairs):
    code, err = run(capsys, monkeypatch, *train_args(pairs, tmp_path / "run", "--crop-size", "512"))
    assert code == 2 and "crop size 512 px is larger than the frames (48x40 px)" in err


def test_mismatched_sizes(capsys, monkeypatch, tmp_path, pairs):
    import numpy as np

    from trainer.data.images import write_image

    write_image(pairs[1] / "plate.1002.png", np.zeros((20, 20, 3), np.float32))
    code, err = run(capsys, monkeypatch, *train_args(pairs, tmp_path / "run"))
    assert code == 2 and "plate.1002.png" in err


def test_corrupt_image(capsys, monkeypatch, tmp_path, pairs):
    (pairs[0] / "plate.1003.png").write_bytes(b"\x89PNG not really")
    code, err = run(capsys, monkeypatch, *train_args(pairs, tmp_path / "run"))
    assert code == 2 and "plate.1003.png" in err


@pytest.mark.parametrize("env,message", [
    ({"COPYCAT_RANK": "x"}, "COPYCAT_RANK='x' is not an integer"),
    ({"COPYCAT_RANK": "2"}, "COPYCAT_RANK=2 must be < COPYCAT_WORLD_SIZE=2"),
    ({"COPYCAT_MAIN_PORT": "99999"}, "COPYCAT_MAIN_PORT=99999 is out of range"),
])
def test_bad_environment(capsys, monkeypatch, tmp_path, pairs, env, message):
    base = {"COPYCAT_MAIN_ADDR": "127.0.0.1", "COPYCAT_MAIN_PORT": "29500", "COPYCAT_RANK": "0",
            "COPYCAT_WORLD_SIZE": "2"}
    code, err = run(capsys, monkeypatch, *train_args(pairs, tmp_path / "run"), env={**base, **env})
    assert code == 2 and message in err
    assert not (tmp_path / "run").exists()  # nothing half-written


def test_config_file_with_unknown_key_lists_valid_keys(capsys, monkeypatch, tmp_path, pairs):
    toml = tmp_path / "job.toml"
    toml.write_text('[train]\nsteps = 5\ncrop = 32\n')
    code, err = run(capsys, monkeypatch, *train_args(pairs, tmp_path / "run", "--config", str(toml)))
    assert code == 2 and "unknown keys ['crop']" in err and "crop_size" in err


def test_config_file_values_are_used_and_flags_override(tmp_path, pairs):
    import argparse

    from trainer.core.config_args import add_train_arguments, config_from_args

    toml = tmp_path / "job.toml"
    toml.write_text(f'input_dir = "{pairs[0]}"\ntarget_dir = "{pairs[1]}"\nrun_dir = "{tmp_path}"\n'
                    'steps = 5\nmodel_size = "medium"\n')
    p = argparse.ArgumentParser()
    add_train_arguments(p)
    cfg = config_from_args(p.parse_args(["--config", str(toml), "--steps", "7"]))
    assert (cfg.steps, cfg.model_size, cfg.input_dir, cfg.adam_beta2) == (7, "medium", str(pairs[0]), None)
    assert (cfg.optimizer_name, cfg.beta2, cfg.base_lr) == ("muon", 0.9, 2e-3)  # medium: Muon's medium lr (DEFAULT_MUON_LR)
    assert config_from_args(p.parse_args(["--config", str(toml), "--adam-beta2", "0.9"])).adam_beta2 == 0.9
    with pytest.raises(ConfigError, match=r"adam_beta2=1.0 must be between 0 and 1"):
        config_from_args(p.parse_args(["--config", str(toml), "--adam-beta2", "1"]))
    assert cfg.adam_beta1 == 0.9
    assert config_from_args(p.parse_args(["--config", str(toml), "--adam-beta1", "0.8"])).adam_beta1 == 0.8
    with pytest.raises(ConfigError, match=r"adam_beta1=1.0 must be >= 0 and < 1"):
        config_from_args(p.parse_args(["--config", str(toml), "--adam-beta1", "1"]))


def test_the_demo_trains_the_recipe_the_time_to_quality_benchmark_chose(tmp_path, pairs):
    """cuetrain demo's arguments give benchmarks/bench_time_to_quality.py's default recipe (v3z-ema-mu-f3)."""
    import argparse

    from trainer.core.config_args import add_train_arguments, config_from_args
    from trainer.demo import DEMO_TRAIN_ARGS

    p = argparse.ArgumentParser()
    add_train_arguments(p)
    paths = ["--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir", str(tmp_path)]
    cfg = config_from_args(p.parse_args([*paths, *DEMO_TRAIN_ARGS]))
    got = (cfg.architecture_name, cfg.model_size, cfg.batch_size, cfg.crop_size, cfg.base_lr, cfg.optimizer_name,
           cfg.adam_beta1, cfg.beta2, cfg.ema_decay, cfg.lr_schedule, cfg.warmup_steps, cfg.cosine_floor)
    assert got == ("v3", "small", 8, 64, 2e-3, "muon", 0.9, 0.9, 0.999, "cosine", 50, 0.3)


def test_the_upscale_demo_trains_the_same_recipe_at_scale_2_on_half_size_crops():
    """``cuetrain demo --task upscale`` changes only --scale and the Input crop (64 px Ground Truth crops, as repair)."""
    from trainer.demo import DEMO_TRAIN_ARGS, task_train_args
    from trainer.data.images import DataError

    assert task_train_args("repair") == DEMO_TRAIN_ARGS
    assert task_train_args("upscale") == [*DEMO_TRAIN_ARGS, "--crop-size", "32", "--scale", "2"]
    with pytest.raises(DataError, match="demo task 'roto' is not one of repair, upscale"):
        task_train_args("roto")


def test_the_upscale_demo_reduces_pristine_frames_by_two_with_an_antialiased_bicubic(tmp_path):
    """Its Input is the Ground Truth at half size (bicubic), and bicubic back up is close to, not equal to, it."""
    from trainer.demo import bicubic_resize
    from trainer.export.infer import psnr
    from skimage import data

    photo = data.astronaut()[:144, :176].astype(np.float32) / 255.0
    small = bicubic_resize(photo, 88, 72)
    assert small.shape == (72, 88, 3) and small.dtype == np.float32
    back = bicubic_resize(small, 176, 144)
    assert 22.0 < psnr(back, photo) < 40.0
    box = photo.reshape(72, 2, 88, 2, 3).mean(axis=(1, 3))
    assert np.abs(small - box).mean() < 0.03  # a low-pass reduction, not a decimation


def test_infer_with_a_bad_model_path(capsys, monkeypatch, tmp_path, pairs):
    code, err = run(capsys, monkeypatch, "infer", "--model", str(tmp_path / "model.pt"), "--input", str(pairs[0]),
                    "--output", str(tmp_path / "out"))
    assert code == 2 and "model.pt does not exist" in err


def test_infer_writes_same_names_and_format(capsys, monkeypatch, tmp_path, pairs):
    from trainer.core.config import TrainConfig
    from trainer.core.envvars import DistEnv
    from trainer.data.images import read_image
    from trainer.learn.train import train

    cfg = TrainConfig(str(pairs[0]), str(pairs[1]), str(tmp_path / "run"), steps=4, batch_size=2, crop_size=16)
    train(cfg, DistEnv(distributed=False))
    code, _ = run(capsys, monkeypatch, "infer", "--model", str(tmp_path / "run" / "model.pt"), "--input",
                  str(pairs[0]), "--output", str(tmp_path / "out"))
    assert code == 0
    out = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert out == sorted(p.name for p in pairs[0].iterdir())
    assert read_image(tmp_path / "out" / "plate.1001.png").shape == (40, 48, 3)


def test_the_parser_and_the_local_launcher_do_not_import_torch():
    """``cuetrain local``'s launcher (and every subcommand's parsing) holds no torch; only its ranks import it.
    The parser imported it through the demo's defaults (trainer.demo -> trainer.export.infer): ~2.5 s of CPU per
    launch on a 2-core VM, for nothing."""
    import subprocess
    import sys

    from tests.conftest import CHILD_PYTHONPATH, ROOT

    code = ("import sys\nfrom trainer.cli import _parser\nimport trainer.agent.launch\n"
            "_parser().parse_args(['local', '--world-size', '2', '--input', 'in', '--target', 'gt'])\n"
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": CHILD_PYTHONPATH}, cwd=ROOT, text=True,
                          capture_output=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr

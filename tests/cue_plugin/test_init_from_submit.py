"""``cuetrain submit --init-from PATH``: refused before anything reaches the farm, in ``--dry-run`` too, when the
frames could not use PATH (``cue_plugin.submit.builder.check_init_from``; the sources are stand-in archives with
the real files' layout, tests/trainer/record/test_initsource.py)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from cue_plugin.submit import builder, cli
from cue_plugin.submit.opencue_farm import OpenCueFarm
from cue_plugin.submit.spec import FarmError
from tests.conftest import CHILD_PYTHONPATH
from tests.cue_plugin.conftest import make_config, make_job
from tests.cue_plugin.test_cli import FakeFarm, train_args
from tests.trainer.record.test_initsource import make_run

SUBMIT = ["submit", "--template", "cpu-test", "--show", "demo", "--shot", "sh010", "--user", "artist"]
FIX = "give a run directory, a checkpoint .pt or a model.pt on shared storage, or leave --init-from out"


def test_a_missing_init_from_is_refused_by_the_dry_run_with_the_path_and_the_fix(tmp_path, capsys):
    missing = tmp_path / "runs" / "shotA"
    code = cli.main([*SUBMIT, "--dry-run", *train_args(tmp_path), "--init-from", str(missing)], farm=FakeFarm())
    assert code == 2
    err = capsys.readouterr().err
    assert err == (f"cuetrain submit: error: --init-from {missing}: does not exist (or a folder above it is not "
                   f"readable): {FIX}\n")


def test_the_gui_gets_the_refusal_as_json(tmp_path, capsys, monkeypatch):
    train = make_config(str(tmp_path), init_from=str(tmp_path / "gone")).to_dict()
    job = {"train": train, "world_size": 2, "show": "demo", "shot": "sh010", "user": "artist"}
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(job)))
    assert cli.main(["submit", "--job-json", "-", "--json", "--dry-run"], farm=FakeFarm()) == 2
    out = json.loads(capsys.readouterr().out)
    assert out == {"error": f"--init-from {tmp_path / 'gone'}: does not exist (or a folder above it is not "
                            f"readable): {FIX}", "kind": "FarmError"}


def test_a_run_with_a_checkpoint_passes_and_the_frames_get_the_path(tmp_path, capsys):
    source = make_run(tmp_path / "shotA", model=False, steps=(100,))
    farm = FakeFarm()
    assert cli.main([*SUBMIT, "--dry-run", *train_args(tmp_path), "--init-from", str(source.root)], farm=farm) == 0
    assert f"--init-from {source.root}" in capsys.readouterr().out


@pytest.mark.parametrize("init_from, problem", [
    ("runs/shotA", "a relative path; the farm's render nodes start in another folder: give the absolute path on "
                   "shared storage"),
    ("{tmp}/empty", "neither model.pt nor a checkpoint under {tmp}/empty/checkpoints: let that run export its model "
                    "or write a checkpoint (--checkpoint-interval) first, or give another path"),
    ("{tmp}/shotA", "architecture v1 there, v3 here; scale 1 there, 2 here: train with the same "
                    "--architecture/--model-size/--scale/--input-channels/--target-channels or start from random "
                    "weights (leave --init-from out)"),
])
def test_unusable_sources_are_refused_when_the_spec_is_built(tmp_path, init_from, problem):
    make_run(tmp_path / "shotA", meta={"architecture": "v1"})
    make_run(tmp_path / "empty", model=False)
    path = init_from.format(tmp=tmp_path)
    job = make_job(train=make_config(str(tmp_path), init_from=path, scale=2))
    with pytest.raises(FarmError) as info:
        builder.dry_run(job, python="/py", token="t")
    assert str(info.value).startswith(f"--init-from {path}: {problem.format(tmp=tmp_path)}")


def test_submit_refuses_before_it_makes_the_run_directory(tmp_path):
    job = make_job(train=make_config(str(tmp_path), init_from=str(tmp_path / "gone")))
    with pytest.raises(FarmError, match=r"--init-from .*/gone: does not exist"):
        OpenCueFarm(hosts=["127.0.0.1:1"], allow_root=True).submit(job)  # no Cuebot is contacted
    assert not os.path.exists(job.train.run_dir)


def test_the_check_imports_no_torch(tmp_path):
    make_run(tmp_path / "shotA")
    config = f"make_config({str(tmp_path)!r}, init_from={str(tmp_path / 'shotA')!r})"
    code = ("import sys\n"
            "from cue_plugin.submit import builder\n"
            "from tests.cue_plugin.conftest import make_config, make_job\n"
            f"builder.check_init_from(make_job(train={config}))\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH})
    assert out.stdout.strip() == "False"


RGBA = "R,G,B,A"


def test_a_four_channel_model_passes_for_a_four_channel_job_and_is_refused_for_an_rgb_one(tmp_path):
    """model.json of an R,G,B,A -> R,G,B,A run: the job's own channel counts are compared, not RGB's 3."""
    rgba = make_run(tmp_path / "rgba", meta={"channels": 4, "channels_in": list("RGBA"), "channels_out": list("RGBA")})
    job = make_job(train=make_config(str(tmp_path), init_from=str(rgba.root), input_channels=RGBA,
                                     target_channels=RGBA))
    assert f"--init-from {rgba.root}" in builder.dry_run(job, python="/py", token="t")
    rgb_job = make_job(train=make_config(str(tmp_path), init_from=str(rgba.root)))
    with pytest.raises(FarmError, match=r"channels 4 there, 3 here; target channels 4 there, 3 here: "):
        builder.dry_run(rgb_job, python="/py", token="t")


def test_an_rgb_model_is_refused_for_a_four_channel_job(tmp_path):
    rgb = make_run(tmp_path / "rgb")
    job = make_job(train=make_config(str(tmp_path), init_from=str(rgb.root), input_channels=RGBA,
                                     target_channels=RGBA))
    with pytest.raises(FarmError, match=r"channels 3 there, 4 here; target channels 3 there, 4 here: "):
        builder.dry_run(job, python="/py", token="t")

"""``--init-from PATH`` resolved without torch: the three kinds, the files they load, and each refusal's message.

The weights files here are stand-ins with the archive layout of the real ones (``torch.jit.save``: ``code/`` and
``constants.pkl``; ``torch.save``: ``data.pkl`` only); tests/trainer/learn/test_init_from.py loads real ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import CHILD_PYTHONPATH
from trainer.core.config import ConfigError
from trainer.core.exitcodes import ExitCode
from trainer.record import runrecord
from trainer.record.initsource import InitFromError, check_source, resolve
from trainer.record.rundir import RunPaths, atomic_write_json

NETWORK = {"architecture": "v3", "model_size": "small", "scale": 1}


def write_torchscript(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name in ("data.pkl", "constants.pkl", "code/__torch__/model.py", "version"):
            z.writestr(f"model/{name}", b"x")
    return path


def write_checkpoint(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name in ("data.pkl", "data/0", "version", "byteorder"):
            z.writestr(f"archive/{name}", b"x")
    return path


def make_run(root: Path, *, model: bool = True, steps: tuple[int, ...] = (), meta: dict | None = None) -> RunPaths:
    paths = RunPaths.of(root)
    paths.create()
    runrecord.update_record(paths, state="succeeded")
    if model:
        write_torchscript(paths.model)
        atomic_write_json(paths.model_meta, {**NETWORK, "step": 400, "channels": 3, **(meta or {})})
    for step in steps:
        write_checkpoint(paths.checkpoint(step))
    return paths


def test_a_run_directory_gives_its_model_pt_and_model_json(tmp_path):
    paths = make_run(tmp_path / "shotA", steps=(100,))
    source = resolve(paths.root)
    assert (source.kind, source.weights, source.meta_file) == ("run", paths.model, paths.model_meta)
    assert source.run == "shotA" and source.is_torchscript and source.checkpoints == ()


def test_a_run_without_model_pt_gives_its_checkpoints_newest_first(tmp_path):
    paths = make_run(tmp_path / "shotA", model=False, steps=(100, 300, 200))
    source = resolve(paths.root)
    assert (source.kind, source.weights, source.meta_file) == ("run", paths.checkpoint(300), None)
    assert source.checkpoints == (paths.checkpoint(300), paths.checkpoint(200), paths.checkpoint(100))
    assert not source.is_torchscript


def test_a_checkpoint_and_a_model_file_are_told_apart_by_their_archive(tmp_path):
    paths = make_run(tmp_path / "shotA", steps=(100,))
    ckpt = resolve(paths.checkpoint(100))
    assert (ckpt.kind, ckpt.weights, ckpt.meta_file, ckpt.run) == ("checkpoint", paths.checkpoint(100), None, "shotA")
    model = resolve(paths.model)
    assert (model.kind, model.meta_file, model.run, model.is_torchscript) == ("model", paths.model_meta, "shotA", True)
    renamed = write_torchscript(tmp_path / "shot_a_v2.pt")  # named like nothing: the archive decides
    assert (resolve(renamed).kind, resolve(renamed).meta_file, resolve(renamed).run) == ("model", None, "")
    legacy = tmp_path / "old.pt"
    legacy.write_bytes(b"\x80\x02}q\x00.")  # torch.save's pre-1.6 pickle format
    assert resolve(legacy).kind == "checkpoint"


@pytest.mark.parametrize("case, match", [
    ("missing", r"^--init-from .*/nowhere: does not exist .*: give a run directory, a checkpoint \.pt or a model\.pt "
                r"on shared storage, or leave --init-from out$"),
    ("empty_run", r"^--init-from .*/empty: neither model\.pt nor a checkpoint under .*/empty/checkpoints: let that run "
                  r"export its model or write a checkpoint \(--checkpoint-interval\) first, or give another path$"),
    ("not_weights", r"^--init-from .*/notes\.txt: not a checkpoint \(torch\.save\) or a TorchScript model"),
    ("other_zip", r"^--init-from .*/other\.zip: a zip archive, but neither a checkpoint"),
    ("relative", r"^--init-from runs/shotA: a relative path; the farm's render nodes start in another folder: give the "
                 r"absolute path on shared storage \(e\.g\. /.*/runs/shotA\)$"),
])
def test_unusable_paths_are_refused_with_the_path_and_the_fix(tmp_path, monkeypatch, case, match):
    monkeypatch.chdir(tmp_path)
    RunPaths.of(tmp_path / "empty").create()
    (tmp_path / "notes.txt").write_text("not weights")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as z:
        z.writestr("readme.txt", "x")
    make_run(tmp_path / "runs" / "shotA")
    path = {"missing": tmp_path / "nowhere", "empty_run": tmp_path / "empty", "not_weights": tmp_path / "notes.txt",
            "other_zip": tmp_path / "other.zip", "relative": Path("runs/shotA")}[case]
    with pytest.raises(InitFromError, match=match) as info:
        resolve(path, require_absolute=True)
    assert isinstance(info.value, ConfigError) and info.value.exit_code == ExitCode.USAGE == 2
    assert runrecord.failure_fields(info.value)["exit_code"] == 2  # run.json records what the process exits with


def test_a_relative_path_is_fine_for_a_local_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_run(tmp_path / "runs" / "shotA")
    assert resolve("runs/shotA").kind == "run"


def test_an_unreadable_weights_file_is_refused(tmp_path, monkeypatch):
    """The farm's user cannot read the checkpoint. Root reads files whatever their mode, so the permission check
    (``os.access``) answers as it would for that user: no for this one file."""
    import trainer.record.initsource as initsource

    paths = make_run(tmp_path / "shotA", model=False, steps=(100,))
    denied = str(paths.checkpoint(100))
    real = os.access
    monkeypatch.setattr(initsource.os, "access", lambda p, mode: False if str(p) == denied else real(p, mode))
    with pytest.raises(InitFromError, match=r"step_000100\.pt: the file is not readable: fix its permissions"):
        resolve(paths.root)


def test_check_source_refuses_a_model_json_of_another_network_in_one_message(tmp_path):
    paths = make_run(tmp_path / "shotA", meta={"architecture": "v1", "model_size": "medium"})
    with pytest.raises(InitFromError) as info:
        check_source(paths.root, architecture="v3", model_size="small", scale=2)
    assert str(info.value) == (
        f"--init-from {paths.root}: architecture v1 there, v3 here; model size medium there, small here; scale 1 "
        "there, 2 here: train with the same --architecture/--model-size/--scale/--input-channels/--target-channels "
        "or start from random weights (leave --init-from out)")
    assert check_source(paths.root, architecture="v1", model_size="medium", scale=1).kind == "run"


def test_check_source_refuses_a_v2_model_with_what_to_do_instead(tmp_path):
    """v2 left the product (issue 49): its error says so and points to random weights, not to --architecture v2."""
    paths = make_run(tmp_path / "shotV2", meta={"architecture": "v2", "model_size": "small"})
    with pytest.raises(InitFromError) as info:
        check_source(paths.root, architecture="v3", model_size="small", scale=1)
    assert str(info.value) == (
        f"--init-from {paths.root}: architecture v2 (the space-to-depth stem of the time-to-quality study, never a "
        "default) is no longer trained; its model.pt still runs (cuetrain infer, Nuke): train a new run with "
        "--architecture v3 (or leave --architecture out) instead of continuing or starting from it: start from "
        "random weights (leave --init-from out)")


def test_a_broken_model_json_is_named(tmp_path):
    paths = make_run(tmp_path / "shotA")
    paths.model_meta.write_text("{not json")
    with pytest.raises(InitFromError, match=r"cannot read its metadata .*model\.json .*: export the model again"):
        check_source(paths.root, **NETWORK)


def test_initsource_imports_no_torch():
    code = ("import sys, trainer.record.initsource\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH})
    assert out.stdout.strip() == "False"

"""Bad input that no other test covers: one clear line naming the value and the fix, and nothing
half-written (no run.json from a rejected input, no temp files). docs/failure_handling.md lists
EVERY bad-input case with its message and the test that covers it, here or elsewhere.

Fast: most cases call ``trainer.cli.main`` / ``cue_plugin.submit.cli.main`` / ``cue_plugin.node.frame.main`` in
this process; a disk-full case trains 4 steps in-process.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from cue_plugin.submit import cli as farm_cli
from cue_plugin.node import frame, layer_failure, rendezvous
from cue_plugin.node.publication import Publication
from tests.conftest import CHILD_PYTHONPATH, ROOT
from trainer import cli
from trainer.core.envvars import CueFrameEnv
from trainer.record.rundir import RunPaths, read_json, read_metrics

DIST = ("COPYCAT_MAIN_ADDR", "COPYCAT_MAIN_PORT", "COPYCAT_RANK", "COPYCAT_WORLD_SIZE", "COPYCAT_LOCAL_ADDR",
        "COPYCAT_SYNC_INTERVAL", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CUETRAIN_GANG_TOKEN")


@pytest.fixture
def clean_env(monkeypatch):
    for name in (*DIST, "CUE_IFRAME", "CUE_THREADS", "CUE_GPU_CORES", "CUE_JOB", "CUE_LAYER", "CUE_JOB_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    return monkeypatch


def train_argv(pairs, run: Path, *extra: str) -> list[str]:
    return ["train", "--input", str(pairs[0]), "--target", str(pairs[1]), "--run-dir", str(run), "--steps", "4",
            "--batch-size", "2", "--crop-size", "16", "--log-interval", "2", "--checkpoint-interval", "2",
            "--contact-sheet-interval", "2", *extra]


def run_main(main, argv, capsys) -> tuple[int, str]:
    """(exit code, stderr) of a CLI main, argparse's SystemExit included."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


def files_in(run: Path) -> list[str]:
    """Every file (not folder) under ``run``, relative."""
    return sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()) if run.exists() else []


# -- CLI arguments and config files: refused before anything is created ----------------------------


@pytest.mark.parametrize("extra,message", [
    (["--steps", "x"], "argument --steps: invalid int value: 'x'"),
    (["--model-size", "huge"], "argument --model-size: invalid choice: 'huge'"),
    (["--steps", "0"], "steps=0 must be a positive whole number"),
    (["--lr", "0"], "lr=0.0 must be > 0 (try 1e-3)"),
    (["--crop-size", "4"], "crop_size=4 is too small; use at least 8 pixels"),
    (["--gang-timeout-s", "0"], "gang_timeout_s=0.0 must be > 0 seconds"),
    (["--warmup-steps", "-1"], "warmup_steps=-1 must be >= 0"),
    (["--lr-floor", "2"], "lr_floor=2.0 must be a fraction of the peak lr from 0 to 1"),
    (["--noise-interval", "-1"], "noise_interval=-1 must be >= 0 optimizer updates (0: off, e.g. 50)"),
    (["--init-focus-every", "-5"], "init_focus_every=-5 must be >= 0 steps (0: the source's map only)"),
    (["--optimizer", "sgd"], "argument --optimizer: invalid choice: 'sgd'"),
    (["--adam-beta1", "1"], "adam_beta1=1.0 must be >= 0 and < 1"),
])
def test_bad_train_values_are_refused_before_the_run_dir_exists(pairs, tmp_path, clean_env, capsys, extra, message):
    code, err = run_main(cli.main, train_argv(pairs, tmp_path / "run", *extra), capsys)
    assert code == 2 and message in err
    assert not (tmp_path / "run").exists()


def test_missing_and_unreadable_config_files(pairs, tmp_path, clean_env, capsys):
    code, err = run_main(cli.main, train_argv(pairs, tmp_path / "run", "--config", str(tmp_path / "nope.toml")), capsys)
    assert code == 2 and f"config file {tmp_path / 'nope.toml'} does not exist" in err
    (tmp_path / "bad.toml").write_text("steps = [\n")
    code, err = run_main(cli.main, train_argv(pairs, tmp_path / "run", "--config", str(tmp_path / "bad.toml")), capsys)
    assert code == 2 and f"cannot read config file {tmp_path / 'bad.toml'}" in err
    assert not (tmp_path / "run").exists()


# -- run directories: read-only, not writable, disk full -------------------------------------------


def test_read_only_run_dir_names_the_folder(pairs, tmp_path, clean_env, capsys):
    run = tmp_path / "run"
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if str(self).startswith(str(run)):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_mkdir(self, *args, **kwargs)

    clean_env.setattr(Path, "mkdir", mkdir)
    code, err = run_main(cli.main, train_argv(pairs, run), capsys)
    assert code == 2
    assert f"cannot create run directory folder {run}: Read-only file system; choose a --run-dir on writable" in err
    assert not run.exists()


def test_run_dir_without_write_permission(pairs, tmp_path, clean_env, capsys):
    run = tmp_path / "run"
    real_access = os.access
    clean_env.setattr("trainer.record.rundir.os.access",
                      lambda path, mode, **kw: False if str(path) == str(run) else real_access(path, mode, **kw))
    code, err = run_main(cli.main, train_argv(pairs, run), capsys)
    assert code == 2 and f"run directory {run} is not writable; fix its permissions or choose another --run-dir" in err
    assert files_in(run) == []


def full_disk_under(monkeypatch, folder: Path) -> None:
    """``os.fsync`` of a file under ``folder`` fails with ENOSPC, as a full disk does mid-write."""
    real_fsync = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_disk_full_past_the_grace_fails_the_run_and_leaves_no_partial_files(pairs, tmp_path, clean_env, capsys):
    """Checkpoints that a full disk keeps out are held and retried (trainer.record.storage) until
    --storage-full-grace-s runs out; then the run fails, naming the reason, the file and the errno."""
    run = RunPaths.of(tmp_path / "run")
    full_disk_under(clean_env, run.checkpoints)
    code, err = run_main(cli.main, train_argv(pairs, run.root, "--storage-full-grace-s", "0.5"), capsys)
    assert code == 2
    assert (f"longer than --storage-full-grace-s 0.5: cannot write {run.checkpoint(4)} ([Errno {errno.ENOSPC}] "
            "ENOSPC: No space left on device)") in err  # the held checkpoint of step 2 was replaced by step 4's
    record = read_json(run.run_json)
    assert record["state"] == "failed" and record["failure_kind"] == "storage_full"
    assert "No space left on device" in record["error"] and record["exit_code"] == 2
    assert run.list_checkpoints() == [] and not run.model.exists()
    assert not [f for f in files_in(run.root) if f.endswith(".tmp") or "/." in f"/{f}"]  # temp files removed


def test_disk_full_for_two_seconds_mid_run_is_ridden_out(pairs, tmp_path, clean_env, capsys, caplog):
    """The run directory fills as the first checkpoint is written and frees 2 s later: the run trains on and ends
    succeeded in its one attempt, with every metrics row in order, the last checkpoint and model.pt."""
    run = RunPaths.of(tmp_path / "run")
    spell: dict[str, float] = {}
    real_write, real_fsync = os.write, os.fsync

    def full(fd: int) -> bool:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(str(run.checkpoints)):
            spell.setdefault("until", time.monotonic() + 2.0)
        return path.startswith(str(run.root)) and time.monotonic() < spell.get("until", 0.0)

    def write(fd: int, data: bytes) -> int:
        if full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def fsync(fd: int) -> None:
        if full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    clean_env.setattr(os, "write", write)
    clean_env.setattr(os, "fsync", fsync)
    with caplog.at_level("WARNING"):
        code, err = run_main(cli.main, train_argv(pairs, run.root, "--steps", "12", "--log-interval", "1"), capsys)
    assert code == 0, err
    record = read_json(run.run_json)
    assert record["state"] == "succeeded" and record["final_step"] == 12 and len(record["attempts"]) == 1
    assert [row["step"] for row in read_metrics(run)] == list(range(1, 13))
    assert run.list_checkpoints()[-1][0] == 12 and run.model.exists() and run.model_meta.exists()
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if m.startswith("storage full: cannot write")]) == 1
    assert len([m for m in messages if m.startswith("storage writable again")]) == 1


def test_disk_full_at_start_writes_no_run_json(pairs, tmp_path, clean_env, capsys):
    """The first write is rank 0's claim of the run directory's lease (trainer.record.lease)."""
    run = RunPaths.of(tmp_path / "run")
    full_disk_under(clean_env, run.root)
    code, err = run_main(cli.main, train_argv(pairs, run.root), capsys)
    assert code == 2 and f"cannot write {run.lease}: No space left on device" in err
    assert files_in(run.root) == []


# -- image data: the error names the file; no run.json --------------------------------------------


@pytest.mark.parametrize("damage,message", [
    ("empty_target", "no images"),
    ("nan", "plate.1002.png"),
])
def test_bad_data_writes_no_run_json(pairs, tmp_path, clean_env, capsys, damage, message):
    if damage == "empty_target":
        for f in pairs[1].iterdir():
            f.unlink()
    else:
        from trainer.data.images import write_image

        img = np.full((40, 48, 3), 0.5, np.float32)
        img[3, 4] = np.nan
        write_image(pairs[0] / "plate.1002.exr", img)
        (pairs[0] / "plate.1002.png").unlink()
        message = "plate.1002.exr"
    code, err = run_main(cli.main, train_argv(pairs, tmp_path / "run"), capsys)
    assert code == 2 and err.startswith("cuetrain: error:") and message in err
    assert files_in(tmp_path / "run") == []


# -- environment variables -----------------------------------------------------------------------


def test_unknown_local_address_lists_the_interfaces(pairs, tmp_path, clean_env, capsys):
    for name, value in {"COPYCAT_MAIN_ADDR": "127.0.0.1", "COPYCAT_MAIN_PORT": "29999", "COPYCAT_RANK": "0",
                        "COPYCAT_WORLD_SIZE": "2", "COPYCAT_LOCAL_ADDR": "eth99"}.items():
        clean_env.setenv(name, value)
    code, err = run_main(cli.main, train_argv(pairs, tmp_path / "run"), capsys)
    assert code == 2 and "COPYCAT_LOCAL_ADDR='eth99' is neither an interface nor an address of this host" in err
    assert "use one of: lo (127.0.0.1)" in err and files_in(tmp_path / "run") == []


def frame_argv(run: Path, *extra: str, world: str = "2") -> list[str]:
    return ["--world-size", world, *extra, "--", "--input", str(run / "in"), "--target", str(run / "gt"),
            "--run-dir", str(run)]


@pytest.mark.parametrize("env,argv,code,message", [
    ({"CUE_IFRAME": "x"}, None, 2, "CUE_IFRAME='x' is not an integer"),
    ({"CUE_IFRAME": "1", "CUE_THREADS": "-2"}, None, 2, "CUE_THREADS=-2 is out of range; it must be >= 0"),
    ({}, None, 2, "no frame number: pass --frame N or run under RQD (CUE_IFRAME)"),
    ({"CUE_IFRAME": "1"}, ["--world-size", "2", "--", "--input", "a", "--target", "b"], 2,
     "missing required argument(s) --run-dir"),
    ({"CUE_IFRAME": "1"}, ["--", "--run-dir", "r"], 2, "the following arguments are required: --world-size"),
])
def test_frame_refuses_bad_farm_input(tmp_path, clean_env, capsys, env, argv, code, message):
    for name, value in env.items():
        clean_env.setenv(name, value)
    got, err = run_main(frame.main, argv or frame_argv(tmp_path / "run"), capsys)
    assert got == code and message in err
    assert not (tmp_path / "run" / "run.json").exists()


def test_cuebot_rendezvous_outside_rqd_is_exit_3(tmp_path, clean_env, capsys):
    clean_env.setenv("CUE_IFRAME", "1")
    assert frame.main(frame_argv(tmp_path / "run", "--rendezvous", "cuebot")) == 3
    assert "the cuebot rendezvous needs CUE_JOB and CUE_LAYER" in capsys.readouterr().out


# -- world size vs global batch and hosts --------------------------------------------------------


def test_submit_with_more_ranks_than_crops_is_refused(tmp_path, clean_env, capsys):
    argv = ["submit", "--template", "cpu-test", "--world-size", "4", "--show", "s", "--shot", "s", "--dry-run",
            "--input", str(tmp_path / "in"), "--target", str(tmp_path / "gt"), "--run-dir", str(tmp_path / "run"),
            "--batch-size", "2"]
    code, err = run_main(farm_cli.main, argv, capsys)
    assert code == 2 and "batch_size=2 is smaller than world_size=4" in err and "raise --batch-size" in err
    assert not (tmp_path / "run").exists()


def test_local_gang_with_more_ranks_than_crops_stops_with_the_reason(pairs, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in DIST}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=CHILD_PYTHONPATH)
    argv = ["local", "--world-size", "3", *train_argv(pairs, tmp_path / "run")[1:]]
    done = subprocess.run([sys.executable, "-m", "trainer.cli", *argv], env=env, cwd=ROOT, text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "[rank 0] cuetrain: error: batch size 2 is smaller than the world size 3" in done.stdout
    assert "raise --batch-size or use fewer ranks" in done.stdout
    assert not (tmp_path / "run" / "run.json").exists()


def test_local_world_size_0_is_a_clear_error(pairs, tmp_path, clean_env, capsys):
    code, err = run_main(cli.main, ["local", "--world-size", "0", *train_argv(pairs, tmp_path / "run")[1:]], capsys)
    assert code == 2 and "--world-size" in err and not (tmp_path / "run").exists()


def test_resume_with_another_model_size_is_a_clear_error(pairs, tmp_path, clean_env, capsys):
    assert run_main(cli.main, train_argv(pairs, tmp_path / "run"), capsys)[0] == 0
    code, err = run_main(cli.main, train_argv(pairs, tmp_path / "run", "--resume", "--model-size", "medium",
                                              "--steps", "6"), capsys)
    assert code == 2 and "is another network (model size small there, medium here): resume with --model-size small" \
        in err


# -- farm services: Cuebot unreachable when frame 0 fails the layer --------------------------------


def test_unreachable_cuebot_when_failing_a_layer_is_logged_quickly(tmp_path, clean_env):
    """Frame 0's pycue reads CUEBOT_HOSTS itself; an unreachable Cuebot must not hang the frame."""
    import opencue

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"  # closed once the block ends
    clean_env.setattr(layer_failure, "NOTICE_GRACE_S", 0.0)
    clean_env.setenv("CUEBOT_HOSTS", address)
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    pub = Publication("127.0.0.1", 1, "a", "", 0.0, 1)
    cuebot = opencue.Cuebot
    saved = list(cuebot.Hosts), cuebot.RpcChannel, cuebot.Timeout
    cuebot.Hosts, cuebot.RpcChannel = [], None  # as in a fresh frame process: pycue connects on first use
    t0 = time.monotonic()
    try:
        layer_failure.fail_layer(paths, pub, "gang incomplete: ranks 1 did not join", CueFrameEnv(0, "job", "train"), None,
                         rendezvous.FileSource(paths.rendezvous))
    finally:
        cuebot.Hosts, cuebot.RpcChannel, cuebot.Timeout = saved
    assert time.monotonic() - t0 < 20
    action = read_json(paths.run_json)["gang_failure"]["cuebot"]
    assert action.startswith("could not fail the layer through pycue (ConnectionException")
    assert address in action and "check CUEBOT_HOSTS" in action
    assert rendezvous.FileSource(paths.rendezvous).read().failed.startswith("gang incomplete")

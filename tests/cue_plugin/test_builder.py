"""The job spec: golden XML files, and the command surviving XML, Cuebot's tokens and RQD's /bin/sh intact.

Regenerate the golden files after an intended change: ``CUETRAIN_UPDATE_GOLDEN=1 pytest tests/cue_plugin``.
"""

import os
import stat
import subprocess
import xml.dom.minidom
from pathlib import Path
from xml.etree import ElementTree

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cue_plugin.submit import builder, templates
from cue_plugin.submit.command import CUEBOT_TOKENS
from cue_plugin.submit.spec import FarmError
from tests.cue_plugin.conftest import make_config, make_job
from trainer.core.config import TrainConfig

GOLDEN = Path(__file__).parent / "golden"
PYTHON = "/opt/cuetrain/venv/bin/python"
TOKEN = "0123456789abcdef0123456789abcdef"


@pytest.fixture(autouse=True)
def fixed_submitter(monkeypatch):
    """The spec holds the submitter's uid and facility: pin them (and the env overrides pyoutline reads)."""
    import outline.util

    monkeypatch.setattr(outline.util, "get_uid", lambda: 1000)
    for name in ("FACILITY", "RENDER_TO", "OL_OS", "OL_TAG_OVERRIDE"):
        monkeypatch.delenv(name, raising=False)


def check_golden(name: str, spec: str) -> None:
    pretty = xml.dom.minidom.parseString(spec).toprettyxml(indent="  ")
    path = GOLDEN / f"{name}.xml"
    if os.environ.get("CUETRAIN_UPDATE_GOLDEN") == "1":
        path.write_text(pretty)
    assert path.exists(), f"{path} missing: run with CUETRAIN_UPDATE_GOLDEN=1 to create it"
    assert pretty == path.read_text(), f"{path} differs: review, then CUETRAIN_UPDATE_GOLDEN=1 to accept"


def test_golden_cpu_test_template():
    job = templates.make_job(make_config(batch_size=8), template="cpu-test", show="demo", shot="sh010", user="artist")
    check_golden("cpu_test", builder.dry_run(job, python=PYTHON, token=TOKEN))


def test_golden_gpu_job_with_awkward_paths_and_env():
    cfg = make_config(root="/shows/my show/it's $(here)", steps=5000, batch_size=16, resume=True)
    job = templates.make_job(cfg, template="gpu-large", show="demo", shot="sh010", user="artist", name="denoise",
                             extra_env={"NUKE_PATH": "/tools/nuke path", "Z_FLAG": "<&>"})
    check_golden("gpu_large_awkward", builder.dry_run(job, python=PYTHON, token=TOKEN))


def test_golden_four_ranks_two_per_frame_is_one_layer_of_two_frames():
    """``--world-size 4 --ranks-per-frame 2``: ONE layer, range 0-1, 2 x the per-rank resources per frame."""
    job = templates.make_job(make_config(batch_size=8), template="cpu-test", world_size=4, ranks_per_frame=2,
                             show="demo", shot="sh010", user="artist")
    spec = builder.dry_run(job, python=PYTHON, token=TOKEN)
    check_golden("cpu_test_4_ranks_2_per_frame", spec)
    layers = ElementTree.fromstring(spec).findall("./job/layers/layer")
    assert len(layers) == 1 and layers[0].findtext("range") == "0-1"
    assert (layers[0].findtext("cores"), layers[0].findtext("memory")) == ("2.0", "8192m")  # cpu-test: 1 core, 4 GiB
    assert "--world-size 4" in layers[0].findtext("cmd") and "--ranks-per-frame 2" in layers[0].findtext("cmd")
    env = {k.get("name"): k.text for k in layers[0].findall("./env/key")}
    assert env["COPYCAT_WORLD_SIZE"] == "4"


def test_golden_elastic_job_passes_the_node_agent_its_budget_and_window():
    """``--min-world-size 2`` on 4 ranks: the frames' node agents may shrink the gang to 2 (issue 10)."""
    job = templates.make_job(make_config(batch_size=8), template="cpu-test", world_size=4, min_world_size=2,
                             elastic_window_s=90, max_restarts=5, show="demo", shot="sh010", user="artist")
    spec = builder.dry_run(job, python=PYTHON, token=TOKEN)
    check_golden("cpu_test_elastic", spec)
    cmd = ElementTree.fromstring(spec).find("./job/layers/layer").findtext("cmd")
    assert "--max-restarts 5 --min-world-size 2 --elastic-window-s 90 --" in cmd


@pytest.mark.parametrize("values,match", [
    (dict(min_world_size=3), r"min_world_size=3 must be a multiple of ranks_per_frame=2"),
    (dict(min_world_size=2, rendezvous="cuebot"), r"needs rendezvous='file'"),
    (dict(max_restarts=-1), r"max_restarts=-1 must be >= 0")])
def test_bad_agent_values_are_refused(values, match):
    with pytest.raises(FarmError, match=match):
        templates.make_job(make_config(batch_size=8), template="cpu-test", world_size=4, ranks_per_frame=2,
                           show="demo", shot="sh010", user="artist", **values)


def test_gpu_node_template_asks_for_its_ranks_gpus_per_frame():
    job = templates.make_job(make_config(batch_size=16), template="gpu-node-4x", show="demo", shot="sh010",
                             user="artist")
    layer = ElementTree.fromstring(builder.dry_run(job, python=PYTHON, token=TOKEN)).find("./job/layers/layer")
    assert (job.world_size, job.ranks_per_frame, layer.findtext("range")) == (8, 4, "0-1")
    assert (layer.findtext("gpus"), layer.findtext("gpu_memory")) == ("4", "98304m")  # 4 x (1 GPU, 24 GiB)
    assert (layer.findtext("cores"), layer.findtext("memory")) == ("24.0", "30720m")  # 4 x (6 cores, 7.5 GiB)


def test_world_size_not_a_multiple_of_ranks_per_frame_names_both():
    with pytest.raises(FarmError, match=r"world_size=6 is not a multiple of ranks_per_frame=4"):
        templates.make_job(make_config(batch_size=8), template="gpu-node-4x", world_size=6, show="demo",
                           shot="sh010", user="artist")


def test_layer_shape(job):
    root = ElementTree.fromstring(builder.dry_run(job, python=PYTHON, token=TOKEN))
    layers = root.findall("./job/layers/layer")
    assert [layer.get("name") for layer in layers] == ["train"]
    layer = layers[0]
    assert (layer.findtext("range"), layer.findtext("chunk"), layer.findtext("cores")) == ("0-1", "1", "1.0")
    env = {k.get("name"): k.text for k in layer.findall("./env/key")}
    assert env == {"COPYCAT_WORLD_SIZE": "2", "COPYCAT_SYNC_INTERVAL": "1", "PYTHONUNBUFFERED": "1",
                   "CUETRAIN_GANG_TOKEN": TOKEN}
    assert layer.find("gpus") is None and layer.find("tags") is None
    assert root.findtext("user") == "artist" and root.find("email") is None


def test_default_interpreter_is_absolute_and_token_random(job):
    import sys

    argv = builder.frame_argv(job)
    assert argv[0] == sys.executable and os.path.isabs(argv[0]) and argv[5] == "#IFRAME#"
    envs = [{k.get("name"): k.text for k in ElementTree.fromstring(builder.dry_run(job)).findall(".//env/key")}
            for _ in range(2)]
    assert envs[0]["CUETRAIN_GANG_TOKEN"] != envs[1]["CUETRAIN_GANG_TOKEN"]


@pytest.mark.parametrize("bad", ["/data/a\nb", "/data/\x00", "/data/\x1b[0m", "/shots/#IFRAME#/in", "/x/#JOB#",
                                 "/data/\udcff"])
def test_arguments_that_cannot_survive_are_refused(bad):
    with pytest.raises(FarmError, match="rename the file or folder"):
        builder.dry_run(make_job(train=make_config(root=bad)), python=PYTHON, token=TOKEN)


@pytest.mark.parametrize("env,match", [({"A B": "1"}, "not a valid environment variable name"),
                                       ({"é": "1"}, "not a valid environment variable name"),
                                       ({"COPYCAT_WORLD_SIZE": "9"}, "may not set COPYCAT_WORLD_SIZE")])
def test_bad_extra_env_is_refused(env, match):
    with pytest.raises(FarmError, match=match):
        builder.dry_run(make_job(extra_env=env), python=PYTHON, token=TOKEN)


def cuebot_substitute(command: str, frame: int) -> str:
    """Cuebot's token replacement (DispatchSupportService.prepareRqdRunFrame), for one-frame chunks of layer train."""
    for token, value in (("#ZFRAME#", f"{frame:04d}"), ("#IFRAME#", str(frame)), ("#FRAME_START#", str(frame)),
                         ("#FRAME_END#", str(frame)), ("#FRAME_CHUNK#", "1"), ("#LAYER#", "train"),
                         ("#JOB#", "demo-sh010-artist_cuetrain"), ("#FRAMESPEC#", str(frame)),
                         ("#FRAME#", f"{frame:04d}-train")):
        command = command.replace(token, value)
    return command


def run_like_rqd(command: str, workdir: Path) -> list[str]:
    """Run ``command`` as RQD does on Linux: written to a file without #!, executed by /usr/bin/time
    (execvp falls back to /bin/sh), with RQD's fixed PATH. Returns the argv the "interpreter" got."""
    cmd_file = workdir / "rqd-cmd"
    cmd_file.write_text(command, encoding="utf-8")
    cmd_file.chmod(0o777)
    out = workdir / "argv.bin"
    env = {"PATH": "/bin:/usr/bin", "TERM": "unknown", "ARGV_OUT": str(out)}
    subprocess.run(["/usr/bin/time", "-p", "-o", str(workdir / "stat"), str(cmd_file)], env=env, cwd=workdir,
                   check=True, timeout=30)
    return out.read_bytes().decode("utf-8").split("\0")[:-1]


@pytest.fixture(scope="module")
def argv_stub(tmp_path_factory) -> str:
    """A fake interpreter in an awkward folder that records its arguments NUL-separated in $ARGV_OUT."""
    folder = tmp_path_factory.mktemp("stub") / "py env's $(dir) `x` & *"
    folder.mkdir()
    stub = folder / "python 3"
    stub.write_text('#!/bin/sh\nprintf "%s\\0" "$@" > "$ARGV_OUT"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return str(stub)


def _roundtrip(job, stub: str, workdir: Path, frame: int = 1) -> tuple[list[str], list[str]]:
    spec = builder.dry_run(job, python=stub, token=TOKEN)
    command = ElementTree.fromstring(spec).findtext("./job/layers/layer/cmd")
    expected = [str(frame) if a == "#IFRAME#" else a for a in builder.frame_argv(job, stub)[1:]]
    return run_like_rqd(cuebot_substitute(command, frame), workdir), expected


def test_nasty_paths_reach_the_frame_unchanged(argv_stub, tmp_path):
    nasty = ["it's here", '"$(touch /tmp/pwned)"', "`id`", "a  b", "*", "~", "\\n", "!$HOME", ";rm -rf x;", "-",
             "", "#", "'", "é ü 日本", "{a,b}", "$((1+1))"]
    for i, name in enumerate(nasty):
        cfg = make_config(root=f"/data/{name}", steps=10 + i)
        got, expected = _roundtrip(make_job(train=cfg), argv_stub, tmp_path, frame=i % 2)
        assert got == expected
    assert not Path("/tmp/pwned").exists()


_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\ufffe\uffff"), max_size=30)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inp=_TEXT, tgt=_TEXT, run=_TEXT)
def test_fuzzed_paths_reach_the_frame_unchanged(argv_stub, tmp_path, inp, tgt, run):
    assume(not any(t in p for p in (inp, tgt, run) for t in CUEBOT_TOKENS))
    cfg = TrainConfig(input_dir=inp, target_dir=tgt, run_dir=run)
    got, expected = _roundtrip(make_job(train=cfg), argv_stub, tmp_path)
    assert got == expected

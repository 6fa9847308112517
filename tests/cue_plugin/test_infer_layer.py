"""The inference layer (cue_plugin.submit.infer, cue_plugin.node.infer_frame): golden specs, the frame command, the double's
layer-on-layer depend, and train + infer end to end on the Cuebot double with real RQDs.

Regenerate the golden files after an intended change: ``CUETRAIN_UPDATE_GOLDEN=1 pytest tests/cue_plugin``.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import OpenImageIO as oiio
import pytest
from opencue_proto import job_pb2

from cue_plugin.submit import builder, cli, templates
from cue_plugin.submit import infer as infer_layer
from cue_plugin.submit.infer import make_layer
from cue_plugin.submit.spec import InferenceJob, InferenceLayer, frame_range
from cue_plugin.submit.opencue_farm import OpenCueFarm
from cue_plugin.submit.spec import JobHandle
from tests.conftest import CHILD_PYTHONPATH, make_pairs, run_cli
from tests.cue_plugin.conftest import make_config
from tests.cue_plugin.test_builder import PYTHON, TOKEN, check_golden, fixed_submitter  # noqa: F401 (fixture)
from tests.cue_plugin.test_e2e_training import ROOT, farm, wait_finished  # noqa: F401 (fixture)
from tests.cuebot.completion import Completion
from tests.cuebot.jobspec import NotSupported, parse_spec
from tests.cuebot.records import FarmState
from trainer.core.config import TrainConfig
from trainer.record.rundir import RunPaths

INFER = InferenceLayer(model="/shows/demo/train/run/model.pt", input_dir="/shows/demo/plates/sh010",
                       output_dir="/shows/demo/comp/sh010_denoised", frames=tuple(range(1001, 1024)), chunk=10)


def train_and_infer_spec(infer: InferenceLayer = INFER) -> str:
    job = templates.make_job(make_config(batch_size=8), template="gpu-small", show="demo", shot="sh010",
                             user="artist", infer=infer)
    return builder.dry_run(job, python=PYTHON, token=TOKEN)


def test_golden_train_then_infer_layer_on_layer():
    spec = train_and_infer_spec()
    check_golden("train_and_infer", spec)
    root = ElementTree.fromstring(spec)
    assert [layer.get("name") for layer in root.findall("./job/layers/layer")] == ["train", "infer"]
    depend = root.find("./depends/depend")
    assert depend.get("type") == "LAYER_ON_LAYER" and depend.get("anyframe") == "False"
    assert (depend.findtext("deplayer"), depend.findtext("onlayer")) == ("infer", "train")
    infer = root.find("./job/layers/layer[@name='infer']")
    assert (infer.findtext("range"), infer.findtext("chunk"), infer.findtext("gpus")) == ("1001-1023", "10", "1")


def test_golden_infer_only_job():
    job = InferenceJob(infer=INFER, show="demo", shot="sh010", user="artist", name="denoise_sh010")
    spec = infer_layer.dry_run(job, python=PYTHON)
    check_golden("infer_only", spec)
    root = ElementTree.fromstring(spec)
    assert root.find("./depends/depend") is None and len(root.findall("./job/layers/layer")) == 1


def test_frame_range_joins_runs():
    assert frame_range([1003, 1001, 1002, 1007, 1009, 1010]) == "1001-1003,1007,1009-1010"
    assert frame_range([5]) == "5"


def test_the_command_survives_cuebot_tokens_and_sh(tmp_path):
    """Cuebot replaces the tokens inside the quotes; /bin/sh hands the frame exactly these arguments."""
    odd = InferenceLayer(model=str(tmp_path / "it's $(x)" / "model.pt"), input_dir=str(tmp_path / "in put"),
                         output_dir=str(tmp_path / "out;rm"), frames=(1, 2, 3), chunk=2)
    text = ElementTree.fromstring(train_and_infer_spec(odd)).findtext("./job/layers/layer[@name='infer']/cmd")
    line = text.replace("#FRAME_START#", "3").replace("#FRAME_END#", "4")
    argv = subprocess.run(["/bin/sh", "-c", line.replace(PYTHON, "printf '%s\\0'", 1)], capture_output=True,
                          text=True, check=True).stdout.split("\0")[:-1]
    assert argv == infer_layer.frame_argv(odd, PYTHON)[1:11] + ["3", "--last", "4"]


def test_submit_flags(tmp_path, capsys):
    inp, tgt = make_pairs(tmp_path / "data")
    base = ["submit", "--dry-run", "--template", "cpu-test", "--show", "demo", "--shot", "sh010", "--user", "artist",
            "--input", str(inp), "--target", str(tgt), "--run-dir", str(tmp_path / "run")]
    assert cli.main([*base, "--infer-input", str(inp)]) == 2
    assert "--infer-input and --infer-output go together" in capsys.readouterr().err
    assert cli.main([*base, "--infer-input", str(tmp_path / "nope"), "--infer-output", str(tmp_path / "o")]) == 2
    assert f"{tmp_path / 'nope'} does not exist" in capsys.readouterr().err
    assert cli.main([*base, "--infer-input", str(inp), "--infer-output", str(tmp_path / "o"),
                     "--infer-chunk", "3"]) == 0
    infer = ElementTree.fromstring(capsys.readouterr().out).find("./job/layers/layer[@name='infer']")
    assert (infer.findtext("range"), infer.findtext("chunk")) == ("1001-1004", "3")
    assert f"--model {tmp_path / 'run' / 'model.pt'}" in infer.findtext("cmd")


def test_submit_infer_needs_an_existing_model(tmp_path, capsys):
    inp, _ = make_pairs(tmp_path / "data")
    argv = ["submit-infer", "--dry-run", "--show", "demo", "--shot", "sh010", "--input", str(inp), "--output",
            str(tmp_path / "o")]
    assert cli.main([*argv, "--model", str(tmp_path / "model.pt")]) == 2
    assert "pass RUN_DIR/model.pt of a finished run" in capsys.readouterr().err
    (tmp_path / "model.pt").write_bytes(b"x")
    assert cli.main([*argv, "--model", str(tmp_path / "model.pt"), "--template", "cpu-test", "--chunk", "4"]) == 0
    layer = ElementTree.fromstring(capsys.readouterr().out).find("./job/layers/layer")
    assert (layer.get("name"), layer.findtext("range"), layer.findtext("chunk")) == ("infer", "1001-1004", "4")


@pytest.mark.parametrize("json", [False, True])
def test_submit_infer_refuses_a_bad_env_pair_as_submit_does(tmp_path, capsys, json):
    """``--env BADPAIR`` was silently dropped by submit-infer; both commands now refuse it alike (issue 20)."""
    inp, tgt = make_pairs(tmp_path / "data")
    (tmp_path / "model.pt").write_bytes(b"x")
    flags = ["--dry-run", "--show", "demo", "--shot", "sh010", "--env", "OK=1", "--env", "BADPAIR"]
    flags += ["--json"] if json else []
    infer = ["submit-infer", "--model", str(tmp_path / "model.pt"), "--input", str(inp), "--output",
             str(tmp_path / "o"), *flags]
    train = ["submit", "--template", "cpu-test", "--input", str(inp), "--target", str(tgt), "--run-dir",
             str(tmp_path / "run"), *flags]
    for argv in (infer, train):
        assert cli.main(argv) == 2
        out, err = capsys.readouterr()
        assert f"cuetrain {argv[0]}: error: --env 'BADPAIR' is not KEY=VALUE" in err
        if json:
            assert '"error": "--env \'BADPAIR\' is not KEY=VALUE"' in out


# -- the double's layer-on-layer depend ---------------------------------------------------------


def test_double_holds_the_depending_layer_until_the_other_completes(tmp_path):
    state = FarmState()
    (job,) = parse_spec(train_and_infer_spec(), log_root=tmp_path)
    state.add_job(job)
    train, infer = job.layers
    states = lambda layer: {f.state for f in job.frames if f.layer_id == layer.id}  # noqa: E731
    assert states(train) == {job_pb2.WAITING} and states(infer) == {job_pb2.DEPEND}
    frames = [f for f in job.frames if f.layer_id == train.id]
    for frame, exit_status in ((frames[0], 0), (frames[1], 1)):  # one succeeds, one fails (retried: WAITING)
        frame.resource_id, frame.state = frame.id, job_pb2.RUNNING  # as the dispatcher leaves it
        state.complete_frame("", frame.id, frame.id, Completion(exit_status=exit_status), 0)
    assert states(infer) == {job_pb2.DEPEND}
    frames[1].resource_id, frames[1].state = frames[1].id, job_pb2.RUNNING  # its retry ran
    state.complete_frame("", frames[1].id, frames[1].id, Completion(exit_status=0), 0)
    assert states(train) == {job_pb2.SUCCEEDED} and states(infer) == {job_pb2.WAITING}
    assert job.state == job_pb2.PENDING


def test_double_refuses_depends_it_does_not_model(tmp_path):
    spec = train_and_infer_spec().replace('type="LAYER_ON_LAYER"', 'type="FRAME_BY_FRAME"')
    with pytest.raises(NotSupported, match="only LAYER_ON_LAYER"):
        parse_spec(spec, log_root=tmp_path)


# -- end to end: Cuebot double + 2 real RQDs + real trainer and inference -----------------------


def write_plates(folder: Path, count: int = 5) -> None:
    """Half-float RGBA EXR plates with metadata (zip compression, a custom string, owner)."""
    from skimage import data, transform

    folder.mkdir(parents=True)
    photo = transform.resize(data.astronaut(), (36, 44), anti_aliasing=True).astype(np.float32) * 2.0
    for i in range(count):
        spec = oiio.ImageSpec(44, 36, 4, "half")
        spec.channelnames = ("R", "G", "B", "A")
        spec.attribute("compression", "piz")
        spec.attribute("cuetrain:shot", "sh010")
        spec.attribute("Copyright", "studio")
        pixels = np.dstack([np.roll(photo, i, axis=1), np.full((36, 44, 1), 0.5 + 0.1 * i, np.float32)])
        out = oiio.ImageOutput.create(str(folder / f"plate.{1001 + i:04d}.exr"))
        assert out.open(str(folder / f"plate.{1001 + i:04d}.exr"), spec) and out.write_image(pixels) and out.close()


def read_all(path: Path) -> tuple[dict, np.ndarray]:
    inp = oiio.ImageInput.open(str(path))
    spec = inp.spec()
    pixels = inp.read_image(0, 0, 0, spec.nchannels, "float")
    inp.close()
    meta = {p.name: p.value for p in spec.extra_attribs if p.name != "DateTime"}
    return dict(meta, format=str(spec.format), channels=tuple(spec.channelnames), size=(spec.width, spec.height)), pixels


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_train_then_infer_on_the_farm_matches_local_inference(farm, tmp_path):  # noqa: F811 (fixture)
    t0 = time.monotonic()
    inp, tgt = make_pairs(tmp_path / "data")
    plates, out = tmp_path / "plates", tmp_path / "denoised"
    write_plates(plates)
    run = RunPaths.of(tmp_path / "run")
    cfg = TrainConfig(input_dir=str(inp), target_dir=str(tgt), run_dir=str(run.root), steps=4, batch_size=2,
                      crop_size=16, lr=1e-2, log_interval=2, checkpoint_interval=2, contact_sheet_interval=2)
    extra = {"PYTHONPATH": CHILD_PYTHONPATH, "OMP_NUM_THREADS": "1", "CUETRAIN_MAIN_HOST": "127.0.0.1",
             "CUEBOT_HOSTS": farm.cuebot.address, "CUETRAIN_EXPORT_ONNX": "0"}
    job = templates.make_job(cfg, template="cpu-test", world_size=2, show="cuetrain", shot="e2e", user="trainer",
                             extra_env=extra, rendezvous_timeout_s=60, max_retries=0,
                             infer=make_layer(run.model, plates, out, chunk=2))
    cue = OpenCueFarm(hosts=[farm.cuebot.address], allow_root=True)
    handle = cue.submit(job)
    wait_finished(cue, handle, run, timeout=180)
    took = time.monotonic() - t0
    import opencue

    frames = opencue.api.getJob(handle.job_id).getFrames()
    by_layer: dict[str, list] = {}
    for f in frames:
        by_layer.setdefault(f.data.layer_name, []).append(f.data)
    assert sorted(by_layer) == ["infer", "train"]
    assert {job_pb2.FrameState.Name(f.state) for fs in by_layer.values() for f in fs} == {"SUCCEEDED"}
    assert sorted(f.number for f in by_layer["infer"]) == [1001, 1003, 1005]  # chunks of 2 over 1001-1005
    assert min(f.start_time for f in by_layer["infer"]) >= max(f.stop_time for f in by_layer["train"])
    status = cue.describe(handle)  # the Runs panel's ranks: frames of layer train only
    assert (status.ranks_total, sorted(status.frames)) == (2, ["0", "1", "infer/1001", "infer/1003", "infer/1005"])

    local = tmp_path / "local"
    result = run_cli("infer", "--model", str(run.model), "--input", str(plates), "--output", str(local))
    assert result.returncode == 0, result.stderr[-2000:]
    for source in sorted(plates.iterdir()):
        (src_meta, src_px), (farm_meta, farm_px) = read_all(source), read_all(out / source.name)
        local_meta, local_px = read_all(local / source.name)
        assert farm_meta == src_meta == local_meta  # half RGBA, piz, custom attributes, size
        assert np.array_equal(farm_px, local_px), source.name
        assert np.array_equal(farm_px[..., 3], src_px[..., 3])  # alpha passed through
        assert np.abs(farm_px[..., :3] - src_px[..., :3]).max() > 1e-3  # the trained model changed the colour
    print(f"train + infer layers SUCCEEDED in {took:.1f} s ({len(by_layer['infer'])} infer frames)")

    # cuetrain submit-infer: the same layer alone, for the model the job trained
    again = tmp_path / "again"
    env = [f"--env={k}={v}" for k, v in extra.items()]
    assert cli.main(["submit-infer", "--model", str(run.model), "--input", str(plates), "--output", str(again),
                     "--chunk", "5", "--template", "cpu-test", "--show", "cuetrain", "--shot", "e2e", "--user",
                     "trainer", "--name", "again", *env], farm=cue) == 0
    alone = opencue.api.findJob("cuetrain-e2e-trainer_again")
    wait_finished(cue, JobHandle(job_id=alone.id(), job_name=alone.name(), run_dir=""), run, timeout=90)
    (frame,) = opencue.api.getJob(alone.id()).getFrames()
    assert (frame.data.layer_name, job_pb2.FrameState.Name(frame.data.state)) == ("infer", "SUCCEEDED")
    for source in sorted(plates.iterdir()):
        assert np.array_equal(read_all(again / source.name)[1], read_all(local / source.name)[1])

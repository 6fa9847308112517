"""The Cuebot double end to end: pyoutline -> double -> real RQD processes -> pycue and CueGUI.

Every farm (double + RQDs) is torn down by the `cuebot_farm` fixture, pass or fail.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import grpc
import pytest
from opencue_proto import job_pb2, job_pb2_grpc, show_pb2, show_pb2_grpc

from tests.cuebot.double import CuebotDouble, log_file
from tests.cuebot.fixtures import cuebot_farm, isolate_pyoutline  # noqa: F401

# No display on the farm machines: Qt must render offscreen, set before pytest-qt's
# QApplication exists (tests/conftest.py is the better home once it sets up Qt for all tests).
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytestmark = pytest.mark.timeout(60)
# Screenshots go to docs/ only when asked (CUETRAIN_UPDATE_DOCS=1), so a test run leaves the tree clean.
DOCS = Path(__file__).resolve().parents[1] / "docs"
SETTLE_TIMEOUT_S = 30
SEPARATOR = "=" * 59  # RQD's frame log header / footer rule


def launch(workdir: Path, name: str, layers: dict[str, dict]):
    """Submit an outline through pyoutline's real launcher (its session under `workdir`);
    returns the pycue Job."""
    import outline
    from outline.modules.shell import Shell

    ol = outline.Outline(name, shot="sh010", show="cuetrain", user="trainer")
    for layer_name, args in layers.items():
        ol.add_layer(Shell(layer_name, chunk=1, **args))
    with isolate_pyoutline(workdir / "sessions"):
        return outline.cuerun.launch(ol, use_pycuerun=False)[0]


def wait_frames(job, states: dict[str, int], timeout: float = SETTLE_TIMEOUT_S) -> list:
    """Poll pycue until each frame named in `states` is in its state; returns the frames."""
    deadline = time.monotonic() + timeout
    while True:
        frames = job.getFrames()
        now = {frame.name(): frame.state() for frame in frames}
        if all(now.get(name) == state for name, state in states.items()):
            return frames
        if time.monotonic() > deadline:
            raise TimeoutError(f"frames {now} never reached {states}")
        time.sleep(0.2)


def rqlog_body(job_record, frame_name: str) -> list[str]:
    """The lines the frame printed, as RQD logged them between its header and footer."""
    text = Path(log_file(job_record, frame_name)).read_text()
    return text.split(SEPARATOR)[2].strip().splitlines()


@pytest.mark.slow
def test_pyoutline_job_runs_frames_on_two_rqds(cuebot_farm):
    import opencue

    farm = cuebot_farm(rqds=2)
    out = farm.out_dir
    with farm.use_pycue():
        job = launch(farm.workdir, "render", {"write": dict(
            command=f'/bin/sh -c "echo frame #IFRAME# $CUE_IFRAME $CUE_LAYER '
                    f'> {out}/out_#IFRAME#.txt"', range="0-1")})
        name = job.name()
        assert name == "cuetrain-sh010-trainer_render"  # show-shot-user_name, as Cuebot
        assert opencue.api.findJob(name).id() == job.id()
        assert opencue.api.isJobPending(name)

        farm.cuebot.wait_job_finished(name, timeout=SETTLE_TIMEOUT_S)

        finished = opencue.api.getJobs(job=[name], include_finished=True)[0]
        assert finished.state() == job_pb2.FINISHED
        assert finished.succeededFrames() == finished.totalFrames() == 2
        frames = finished.getFrames()
        assert {f.name(): f.state() for f in frames} == {
            "0000-write": job_pb2.SUCCEEDED, "0001-write": job_pb2.SUCCEEDED}
        # One frame per host: each RQD ran one; last_resource is Cuebot's host/cores/gpus.
        assert sorted(f.resource() for f in frames) == ["rqd0/1.00/0", "rqd1/1.00/0"]
        # A FINISHED job loses its visible name, as in Cuebot.
        assert not opencue.api.isJobPending(name)
        with pytest.raises(opencue.exception.EntityNotFoundException):
            opencue.api.findJob(name)

    for number in (0, 1):
        written = out / f"out_{number}.txt"
        assert written.read_text() == f"frame {number} {number} write\n"
        assert written.stat().st_uid == farm.identity.uid != 0  # RQD ran it as the frame user


@pytest.mark.slow
def test_failing_frame_retries_then_dies_and_kill_stops_running_frames(cuebot_farm):
    import opencue

    farm = cuebot_farm(rqds=2)
    with farm.use_pycue():
        job = launch(farm.workdir, "failing", {
            "fail": dict(command="/bin/sh -c 'echo failing; exit 1'", range="1"),
            "sleeper": dict(command="/bin/sh -c 'sleep 30'", range="1")})
        frames = wait_frames(job, {"0001-fail": job_pb2.DEAD, "0001-sleeper": job_pb2.RUNNING})
        failed = next(f for f in frames if f.name() == "0001-fail")
        record = farm.cuebot.jobs()[0]
        # pyoutline asks for maxretries=2; Cuebot clamps it to FRAME_RETRIES_MAX = 1.
        assert record.max_retries == 1
        assert failed.retries() == 1 and failed.exitStatus() == 1
        assert next(f.runs for f in record.frames if f.name == "0001-fail") == 2
        failed.retry()  # FrameInterface.Retry: WAITING again, runs once more, dies again
        failed = next(f for f in wait_frames(job, {"0001-fail": job_pb2.DEAD})
                      if f.name() == "0001-fail")
        assert failed.retries() == 2
        record = farm.cuebot.jobs()[0]
        assert next(f.runs for f in record.frames if f.name == "0001-fail") == 3
        # A DEAD frame keeps the job PENDING until someone acts on it.
        pending = opencue.api.getJob(job.id())
        assert pending.state() == job_pb2.PENDING and pending.deadFrames() == 1
        assert opencue.api.isJobPending(job.name())

        pending.kill(reason="test over")
        killed = opencue.api.getJob(job.id())
        assert killed.state() == job_pb2.FINISHED
        states = {f.name(): f.state() for f in killed.getFrames()}
        assert states == {"0001-fail": job_pb2.DEAD, "0001-sleeper": job_pb2.WAITING}

    sleeper_log = Path(log_file(record, "0001-sleeper"))
    deadline = time.monotonic() + 10
    while "RenderQ Job Complete" not in sleeper_log.read_text():  # RQD killed the frame
        assert time.monotonic() < deadline, "RQD did not kill the sleeping frame"
        time.sleep(0.1)
    assert "reason=test over" in sleeper_log.read_text()  # RQD's footer: killMessage


def test_spec_and_run_frame_follow_cuebot(tmp_path):
    import outline
    from outline.modules.shell import Shell

    from tests.cuebot.dispatcher import FrameIdentity, build_run_frame
    from tests.cuebot.jobspec import parse_spec
    from tests.cuebot.records import ProcRecord

    ol = outline.Outline("Spec-Test", shot="sh010", show="cuetrain", user="trainer")
    ol.add_layer(Shell("Chunked-Layer", command="render #ZFRAME# #FRAMESPEC# #FRAME_END# "
                       "#LAYER# #JOB# #FRAME#", range="1-10", chunk=4, cores=2,
                       memory="512m", env={"STAGE": "train"}))
    with isolate_pyoutline(tmp_path / "sessions"):
        spec = outline.cuerun.OutlineLauncher(ol).serialize(use_pycuerun=False)
    job = parse_spec(spec, log_root=tmp_path / "logs")[0]
    layer = job.layers[0]
    assert (job.name, layer.name, job.max_retries) == ("cuetrain-sh010-trainer_spec_test",
                                                       "chunked_layer", 1)
    assert (layer.min_cores, layer.min_memory, layer.env) == (200, 512 * 1024, {"STAGE": "train"})
    assert [f.name for f in job.frames] == ["0001-chunked_layer", "0005-chunked_layer",
                                            "0009-chunked_layer"]
    frame = job.frames[1]
    run = build_run_frame(job, layer, frame, ProcRecord("proc", frame.id, 200, 0),
                          FrameIdentity(uid=1234, gid=1234, user="someone"))
    assert run.command == ("render 0005 5-8 8 chunked_layer cuetrain-sh010-trainer_spec_test "
                           "0005-chunked_layer")
    assert (run.uid, run.user_name, run.num_cores, run.log_dir) == (1234, "someone", 200,
                                                                     job.log_dir)
    assert {key: run.environment[key] for key in (
        "CUE_IFRAME", "CUE_CHUNK", "CUE_RANGE", "CUE_THREADS", "CUE_LAYER", "STAGE")} == {
        "CUE_IFRAME": "5", "CUE_CHUNK": "4", "CUE_RANGE": "1-10", "CUE_THREADS": "2",
        "CUE_LAYER": "chunked_layer", "STAGE": "train"}


def test_queries_and_frame_actions_through_pycue_without_rqds(tmp_path):
    """No RQD: frames stay WAITING, so searches and state changes are deterministic."""
    import opencue

    from tests.cuebot.fixtures import use_pycue

    with CuebotDouble(log_root=str(tmp_path / "logs")) as cuebot, use_pycue(cuebot.address):
        job = launch(tmp_path, "queries", {"beauty": dict(command="true", range="1-4"),
                                       "mask": dict(command="true", range="1-2")})
        assert opencue.api.getJobNames(show=["cuetrain"]) == [job.name()]
        assert opencue.api.getJobs(user=["nobody"]) == []
        frame = opencue.api.findFrame(job.name(), "beauty", 3)
        assert (frame.name(), frame.state()) == ("0003-beauty", job_pb2.WAITING)
        assert [f.name() for f in opencue.api.getFrames(job.name(), layer=["mask"])] == [
            "0001-mask", "0002-mask"]
        assert [f.name() for f in job.getFrames(range="2-3", layer=["beauty"])] == [
            "0002-beauty", "0003-beauty"]
        beauty = job.getLayers()[0]
        assert (beauty.name(), len(beauty.getFrames())) == ("beauty", 4)
        updated = job.getUpdatedFrames(int(time.time()) - 5)
        assert updated.state == job_pb2.PENDING and len(updated.updated_frames.updated_frames) == 6

        beauty.eat()  # LayerInterface.EatFrames
        job.eatFrames(layer=["mask"])  # JobInterface.EatFrames: all frames done -> FINISHED
        assert opencue.api.getJob(job.id()).state() == job_pb2.FINISHED
        assert {f.state() for f in job.getFrames()} == {job_pb2.EATEN}


def test_rpcs_the_double_does_not_implement_answer_unimplemented():
    with CuebotDouble() as cuebot, grpc.insecure_channel(cuebot.address) as channel:
        for call, request in [
            (show_pb2_grpc.ShowInterfaceStub(channel).GetShows, show_pb2.ShowGetShowsRequest()),
            (job_pb2_grpc.JobInterfaceStub(channel).SetPriority,
             job_pb2.JobSetPriorityRequest(val=10))]:
            with pytest.raises(grpc.RpcError) as caught:
                call(request, timeout=5)
            assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert "CuebotDouble does not implement" in caught.value.details()


@pytest.mark.slow
def test_cuegui_monitors_show_the_job_and_its_frames(cuebot_farm, tmp_path):
    """CueGUI runs in its own environment (.venv-cuegui), as a separate process, against the double."""
    from tests.cuebot.cuegui_setup import run_cuegui_app

    farm = cuebot_farm(rqds=2)
    with farm.use_pycue():
        job = launch(farm.workdir, "monitored", {
            "good": dict(command="/bin/sh -c 'echo ok'", range="1-3"),
            "fail": dict(command="/bin/sh -c 'exit 3'", range="1")})
        wait_frames(job, {"0001-good": job_pb2.SUCCEEDED, "0002-good": job_pb2.SUCCEEDED,
                          "0003-good": job_pb2.SUCCEEDED, "0001-fail": job_pb2.DEAD})
    # docs/cuegui_job.png shows a real training job instead: tests/gui/test_cuegui_plugin.py
    shown = run_cuegui_app(farm.cuebot.address, job.id(), tmp_path, ["3 of 4", "DEAD"])
    assert shown["shown"], shown
    assert "NumPy" not in shown["stderr"] and "Traceback" not in shown["stderr"], shown["stderr"]
    assert shown["jobs"][0][:6] == ["cuetrain-sh010-trainer_monitored", "", "", "Failing", "3 of 4", "0"]
    assert sorted((row[2], row[1], row[3]) for row in shown["frames"]) == [
        ("fail", "1", "DEAD"), ("good", "1", "SUCCEEDED"), ("good", "2", "SUCCEEDED"),
        ("good", "3", "SUCCEEDED")]


@pytest.mark.slow
def test_rqd_frame_log_keeps_one_line_per_read(cuebot_farm):
    """RQD 1.37 (rqcore.FrameAttendantThread.runLinux) polls the frame's pipes and calls
    readline() once per wake-up on a buffered reader: lines that reached the pipe together
    stay in the reader's buffer and are dropped when the frame exits. Checked here, exactly:
    - five lines in one write (e.g. a block-buffered program at exit): only the first is logged;
    - five lines written 0.5 s apart (each alone in the pipe when RQD wakes up): all five;
    - workaround: the frame keeps its own log (here `tee` into $CUE_LOG_PATH): all five.
    Lines flushed one by one but back to back fall in between (an in-order prefix whose length
    depends on when RQD wakes up), which is why frames keep their own complete log."""
    farm = cuebot_farm(rqds=2)
    five = "for i in 1 2 3 4 5; do echo line-$i; done"
    spaced = "for i in 1 2 3 4 5; do echo line-$i; sleep 0.5; done"
    one_write = r'printf "line-1\nline-2\nline-3\nline-4\nline-5\n"'  # sh's printf: one write
    with farm.use_pycue():
        job = launch(farm.workdir, "logging", {
            "onewrite": dict(command=f"/bin/sh -c '{one_write}'", range="1"),
            "spaced": dict(command=f"/bin/sh -c '{spaced}'", range="1"),
            "teed": dict(command=f"/bin/sh -c '{five} | tee $CUE_LOG_PATH/$CUE_FRAME.own.log'",
                         range="1")})
        farm.cuebot.wait_job_finished(job.name(), timeout=SETTLE_TIMEOUT_S)

    record = farm.cuebot.jobs()[0]
    expected = [f"line-{i}" for i in range(1, 6)]
    assert rqlog_body(record, "0001-onewrite") == ["line-1"]
    assert rqlog_body(record, "0001-spaced") == expected
    own_log = Path(record.log_dir) / "0001-teed.own.log"
    assert own_log.read_text().splitlines() == expected

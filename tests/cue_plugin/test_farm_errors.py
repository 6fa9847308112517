"""OpenCueFarm at its boundary: refusing root, and pycue/gRPC failures as FarmError saying what to do."""

import socket
import time

import grpc
import pytest

from cue_plugin.submit.opencue_farm import OpenCueFarm, handle_from_run_dir
from cue_plugin.submit.spec import FarmError, JobHandle
from tests.cue_plugin.conftest import make_config, make_job
from trainer.record.rundir import RunPaths
from trainer.record.runrecord import update_record


@pytest.fixture
def restore_pycue():
    """OpenCueFarm(hosts=...) repoints pycue's process-wide connection; put it back afterwards."""
    import opencue

    saved = list(opencue.Cuebot.Hosts), opencue.Cuebot.RpcChannel, opencue.Cuebot.Timeout
    opencue.Cuebot.RpcChannel = None
    yield
    opencue.Cuebot.closeChannel()
    opencue.Cuebot.Hosts, opencue.Cuebot.RpcChannel, opencue.Cuebot.Timeout = saved


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_cuebot_is_a_farm_error_quickly(restore_pycue, tmp_path):
    address = f"127.0.0.1:{closed_port()}"
    farm = OpenCueFarm(hosts=[address], timeout_s=2, allow_root=True)
    start = time.monotonic()
    for call in (lambda: farm.describe(JobHandle("id", "name", "")), lambda: farm.cancel(JobHandle("", "n", "")),
                 lambda: farm.submit(make_job(train=make_config(root=str(tmp_path))))):
        with pytest.raises(FarmError, match=rf"cannot reach Cuebot at {address}: check CUEBOT_HOSTS / opencue.yaml"):
            call()
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("user", ["root", "artist"])
def test_root_is_refused_before_contacting_anything(tmp_path, monkeypatch, user):
    monkeypatch.setattr("os.geteuid", lambda: 0 if user == "artist" else 1000)
    with pytest.raises(FarmError, match="RQD refuses to run frames as root"):
        OpenCueFarm(hosts=["127.0.0.1:1"]).submit(make_job(user=user, train=make_config(root=str(tmp_path))))
    assert not (tmp_path / "run").exists()


class _RpcError(grpc.RpcError):
    def __init__(self, code):
        self._code = code

    def code(self):
        return self._code

    def details(self):
        return f"details for {self._code.name}"


@pytest.mark.parametrize("exc,match", [
    (_RpcError(grpc.StatusCode.UNAVAILABLE), "cannot reach Cuebot"),
    (_RpcError(grpc.StatusCode.NOT_FOUND), "Cuebot does not know it"),
    (_RpcError(grpc.StatusCode.PERMISSION_DENIED), "answered StatusCode.PERMISSION_DENIED: details for"),
    (ConnectionResetError("reset"), "cannot reach Cuebot"),
])
def test_grpc_errors_are_translated(exc, match):
    farm = OpenCueFarm(hosts=["cuebot.example:8443"])
    with pytest.raises(FarmError, match=match):
        with farm._errors("describe job x"):
            raise exc


def test_pycue_exceptions_are_translated():
    import opencue.exception as cue_exc

    farm = OpenCueFarm()
    with pytest.raises(FarmError, match="does not know it"):
        with farm._errors("find job x"):
            raise cue_exc.EntityNotFoundException("Object does not exist.")
    with pytest.raises(FarmError, match="answered with an error: boom"):
        with farm._errors("find job x"):
            raise cue_exc.CueInternalErrorException("boom")


def test_handle_from_run_dir(tmp_path):
    paths = RunPaths.of(tmp_path)
    with pytest.raises(FarmError, match="does not exist"):
        handle_from_run_dir(str(tmp_path))
    update_record(paths, state="running")
    with pytest.raises(FarmError, match="records no farm job"):
        handle_from_run_dir(str(tmp_path))
    update_record(paths, farm={"job_id": "abc", "job_name": "demo-sh010-artist_x"})
    assert handle_from_run_dir(str(tmp_path)) == JobHandle("abc", "demo-sh010-artist_x", str(tmp_path))

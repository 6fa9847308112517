"""The Cuebot double books frames by idle cores, memory, GPUs and GPU memory, as Cuebot does (no RQD needed)."""

from opencue_proto import job_pb2

from tests.cuebot.dispatcher import Dispatcher, FrameIdentity, fits
from tests.cuebot.records import FarmState, FrameRecord, HostRecord, JobRecord, LayerRecord, ProcRecord

GB = 1024 * 1024  # KB


def layer(cores: int = 100, memory: int = 4 * GB, gpus: int = 0, gpu_memory: int = 0) -> LayerRecord:
    return LayerRecord(id="L", job_id="J", name="train", type=job_pb2.RENDER, command="true", range="0-3",
                       chunk_size=1, dispatch_order=0, min_cores=cores, max_cores=0, min_memory=memory,
                       min_gpus=gpus, min_gpu_memory=gpu_memory, threadable=False, tags=[], services=[], env={})


def host(name: str, cores: int = 800, memory: int = 32 * GB, gpus: int = 0, gpu_memory: int = 0) -> HostRecord:
    return HostRecord(name=name, address="127.0.0.1:1", total_cores=cores, total_memory=memory, free_memory=memory,
                      tags=[], boot_time=0, ping_time=0, total_gpus=gpus, total_gpu_memory=gpu_memory)


def book(h: HostRecord, lay: LayerRecord) -> None:
    h.procs[str(len(h.procs))] = ProcRecord(str(len(h.procs)), "f", lay.min_cores, lay.min_gpus, lay.min_memory,
                                            lay.min_gpu_memory)


def fill(h: HostRecord, lay: LayerRecord) -> int:
    """How many frames of ``lay`` the host takes."""
    while fits(h, lay):
        book(h, lay)
    return len(h.procs)


def test_each_resource_limits_how_many_frames_a_host_takes():
    assert fill(host("cores", cores=200), layer(cores=100)) == 2
    assert fill(host("memory", memory=10 * GB), layer(memory=4 * GB)) == 2
    assert fill(host("gpus", gpus=4, gpu_memory=64 * GB), layer(gpus=1, gpu_memory=8 * GB)) == 4
    assert fill(host("gpu memory", gpus=4, gpu_memory=20 * GB), layer(gpus=1, gpu_memory=8 * GB)) == 2
    assert fill(host("no gpu"), layer(gpus=1)) == 0


def test_the_dispatcher_spreads_frames_over_hosts_by_resources_not_one_per_host():
    state = FarmState()
    lay = layer(cores=100, memory=12 * GB)  # 2 fit in a 32 GB host by memory (8 by cores)
    frames = [FrameRecord(id=f"F{i}", job_id="J", layer_id="L", name=f"{i:04d}-train", number=i, dispatch_order=i)
              for i in range(4)]
    state.add_job(JobRecord(id="J", name="job", show="s", shot="s", user="u", uid=1000, facility="local",
                            os="linux", priority=1, paused=False, auto_eat=False, max_retries=0, log_dir="/tmp",
                            env={}, layers=[lay], frames=frames))
    state.hosts = {"a": host("a"), "b": host("b"), "c": host("c")}
    dispatcher = Dispatcher(state, FrameIdentity(), max_frames_per_host=None)
    dispatcher._launch = lambda *args: None  # no RQD: only the booking is checked
    assert dispatcher.dispatch_once() == 4
    assert [f.host for f in frames] == ["a", "a", "b", "b"]
    assert (state.hosts["a"].idle_memory, state.hosts["c"].idle_memory) == (8 * GB, 32 * GB)

"""The dispatcher thread: books WAITING frames onto RQD hosts with RqdInterface.LaunchFrame.

The RunFrame is built as Cuebot's DispatchSupportService.prepareRqdRunFrame builds it:
- command tokens #ZFRAME# #IFRAME# #FRAME_START# #FRAME_END# #FRAME_CHUNK# #LAYER# #JOB#
  #FRAMESPEC# #FRAME# replaced, in that order;
- environment: the job's env, the layer's env, then CUE3, CUE_THREADS, CUE_MEMORY, CUE_GPUS,
  CUE_GPU_MEMORY, CUE_LOG_PATH, CUE_RANGE, CUE_CHUNK, CUE_IFRAME, CUE_LAYER, CUE_JOB,
  CUE_FRAME, CUE_SHOW, CUE_SHOT, CUE_USER, CUE_JOB_ID, CUE_LAYER_ID, CUE_FRAME_ID,
  CUE_THREADABLE. RQD adds its own (rqcore.FrameAttendantThread.__createEnvVariables): PATH,
  TERM, TZ, USER, LOGNAME, mcp, show, shot, jobid, jobhost, frame, zframe, logfile,
  maxframetime, minspace, SP_NOMYCSHRC, CUE_GPU_MEMORY and CUE3 (both overridden by ours),
  CUE_GPU_CORES / CUE_HT when it reserves GPUs / hyper-threads;
- uid, gid and user_name are the double's frame identity (see CuebotDouble): RQD refuses
  uid <= 0 and, with RQD_BECOME_JOB_USER, runs the command through `su <user_name>`.

Booking: hosts are visited in registration order; a host takes frames while it has fewer than
`max_frames_per_host` runs (None: no such limit) and the frame's layer fits in what the host has
idle, as Cuebot decides it (see `fits`): cores, memory, GPUs and GPU memory, each the host's total
less what its booked procs reserve. Jobs go by priority then launch time; paused jobs wait. Layer
tags are not matched to hosts, and Cuebot's holding back of one GPU's worth of resources on GPU
hosts for GPU frames (DispatchHost.removeGpu) is not mirrored. A host whose RQD refused a frame
is left alone for `REFUSED_BACKOFF_S`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import grpc
from opencue_proto import host_pb2, job_pb2, rqd_pb2, rqd_pb2_grpc

from tests.cuebot.jobspec import frame_numbers
from tests.cuebot.records import (CORE_UNITS, FarmState, FrameRecord, HostRecord, JobRecord,
                                  LayerRecord, ProcRecord, new_id)

log = logging.getLogger(__name__)
RQD_TIMEOUT_S = 10
REFUSED_BACKOFF_S = 1.0


@dataclasses.dataclass(frozen=True)
class FrameIdentity:
    """The account RQD runs frames as: must exist on the host, with a login shell for `su`."""

    uid: int = 1000
    gid: int = 1000
    user: str = "cuetrain"


def frame_spec(numbers: list[int]) -> str:
    """A chunk's frames as a range string: "5", "1-4", "1-7x3" or "1,2,9"."""
    if len(numbers) == 1:
        return str(numbers[0])
    steps = {b - a for a, b in zip(numbers, numbers[1:])}
    if len(steps) == 1 and (step := steps.pop()) > 0:
        suffix = "" if step == 1 else f"x{step}"
        return f"{numbers[0]}-{numbers[-1]}{suffix}"
    return ",".join(map(str, numbers))


def fits(host: HostRecord, layer: LayerRecord) -> bool:
    """True when one more frame of `layer` fits in what `host` has idle.

    Cuebot's rule (cuebot/src/main/java/com/imageworks/spcue/dispatcher/CoreUnitDispatcher.java,
    dispatchHost(host, job): a frame is booked unless `host.idleCores < frame.minCores ||
    host.idleMemory < frame.minMemory || host.idleGpus < frame.minGpus || host.idleGpuMemory <
    frame.minGpuMemory`; DispatchHost.useResources then subtracts the proc's reservation). Cores
    in core units (100 = one core), memory in KB. Cuebot's negative "all but N cores" requests
    (handleNegativeCoresRequirement) are not mirrored.
    """
    return (host.idle_cores >= layer.min_cores and host.idle_memory >= layer.min_memory
            and host.idle_gpus >= layer.min_gpus and host.idle_gpu_memory >= layer.min_gpu_memory)


def build_run_frame(job: JobRecord, layer: LayerRecord, frame: FrameRecord, proc: ProcRecord,
                    identity: FrameIdentity) -> rqd_pb2.RunFrame:
    all_frames = frame_numbers(layer.range, 1)
    start = all_frames.index(frame.number)
    chunk = all_frames[start:start + layer.chunk_size]
    tokens = [
        ("#ZFRAME#", "%04d" % frame.number), ("#IFRAME#", str(frame.number)),
        ("#FRAME_START#", str(frame.number)),
        ("#FRAME_END#", str(frame.number + layer.chunk_size - 1)),
        ("#FRAME_CHUNK#", str(layer.chunk_size)), ("#LAYER#", layer.name),
        ("#JOB#", job.name), ("#FRAMESPEC#", frame_spec(chunk)), ("#FRAME#", frame.name)]
    command = layer.command
    for token, value in tokens:
        command = command.replace(token, value)
    env = {**job.env, **layer.env,
           "CUE3": "1", "CUE_THREADS": str(max(1, proc.cores // CORE_UNITS)),
           "CUE_MEMORY": str(proc.memory),  # DispatchSupportService: proc.memoryReserved
           "CUE_GPUS": str(proc.gpus),
           "CUE_GPU_MEMORY": str(layer.min_gpu_memory), "CUE_LOG_PATH": job.log_dir,
           "CUE_RANGE": layer.range, "CUE_CHUNK": str(layer.chunk_size),
           "CUE_IFRAME": str(frame.number), "CUE_LAYER": layer.name, "CUE_JOB": job.name,
           "CUE_FRAME": frame.name, "CUE_SHOW": job.show, "CUE_SHOT": job.shot,
           "CUE_USER": job.user, "CUE_JOB_ID": job.id, "CUE_LAYER_ID": layer.id,
           "CUE_FRAME_ID": frame.id, "CUE_THREADABLE": "1" if layer.threadable else "0"}
    return rqd_pb2.RunFrame(
        resource_id=proc.id, job_id=job.id, job_name=job.name, frame_id=frame.id,
        frame_name=frame.name, layer_id=layer.id, command=command, user_name=identity.user,
        log_dir=job.log_dir, show=job.show, shot=job.shot, start_time=int(time.time() * 1000),
        uid=identity.uid, gid=identity.gid, num_cores=proc.cores, num_gpus=proc.gpus,
        environment=env, os=job.os)


class Dispatcher:
    """Books frames on a thread of its own; RQD calls are made outside the state lock."""

    def __init__(self, state: FarmState, identity: FrameIdentity,
                 max_frames_per_host: int | None = 1, interval_s: float = 0.2) -> None:
        self.state = state
        self.identity = identity
        self.max_frames_per_host = max_frames_per_host
        self.interval_s = interval_s
        self._channels: dict[str, grpc.Channel] = {}
        self._channels_lock = threading.Lock()  # servicer threads send kills too
        self._backoff_until: dict[str, float] = {}
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cuebot-double-dispatch",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        with self.state.changed:
            self.state.changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=RQD_TIMEOUT_S + 5)
        with self._channels_lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                booked = self.dispatch_once()
            except Exception:  # a dispatcher bug must not silently stop the farm
                log.exception("dispatch pass failed")
                booked = 0
            if not booked:
                with self.state.changed:
                    self.state.changed.wait(self.interval_s)

    def rqd(self, address: str) -> rqd_pb2_grpc.RqdInterfaceStub:
        with self._channels_lock:
            if address not in self._channels:
                self._channels[address] = grpc.insecure_channel(address)
            return rqd_pb2_grpc.RqdInterfaceStub(self._channels[address])

    def dispatch_once(self) -> int:
        """Book every frame that fits now, then launch them. Returns how many were booked."""
        bookings = []
        with self.state.lock:
            for host in self.state.hosts.values():
                while self._has_room(host):
                    found = self._next_frame(host)
                    if found is None:
                        break
                    job, layer, frame = found
                    proc = ProcRecord(new_id(), frame.id, layer.min_cores, layer.min_gpus,
                                      layer.min_memory, layer.min_gpu_memory)
                    self.state.start_frame(frame, host, proc)
                    request = build_run_frame(job, layer, frame, proc, self.identity)
                    bookings.append((host, frame, proc.id, request))
        for host, frame, proc_id, request in bookings:
            self._launch(host, frame, proc_id, request)
        return len(bookings)

    def _has_room(self, host: HostRecord) -> bool:
        if self._backoff_until.get(host.name, 0) > time.time():
            return False
        full = self.max_frames_per_host is not None and len(host.procs) >= self.max_frames_per_host
        return host.state == host_pb2.UP and not full

    def _next_frame(self, host: HostRecord):
        jobs = sorted((job for job in self.state.jobs.values()
                       if job.state == job_pb2.PENDING and not job.paused),
                      key=lambda job: (-job.priority, job.start_time))
        for job in jobs:
            layers = {layer.id: layer for layer in job.layers}
            for frame in job.frames:
                layer = layers[frame.layer_id]
                if frame.state == job_pb2.WAITING and fits(host, layer) and layer.type != job_pb2.POST:
                    return job, layer, frame
        return None

    def _launch(self, host: HostRecord, frame: FrameRecord, proc_id: str,
                request: rqd_pb2.RunFrame) -> None:
        try:
            self.rqd(host.address).LaunchFrame(
                rqd_pb2.RqdStaticLaunchFrameRequest(run_frame=request), timeout=RQD_TIMEOUT_S)
        except grpc.RpcError as exc:
            log.warning("%s refused %s: %s", host.name, frame.name, exc.details())
            with self.state.lock:
                self.state.counters["launch_errors"] += 1
                self._backoff_until[host.name] = time.time() + REFUSED_BACKOFF_S
                self.state.clear_launch(frame, host, proc_id)
            return
        with self.state.lock:
            self.state.counters["dispatched"] += 1
            self.state.confirm_launch(frame, proc_id)

    def kill(self, kills: list[tuple[str, str, str]]) -> None:
        """RqdInterface.KillRunningFrame for each (rqd address, frame id, message)."""
        for address, frame_id, message in kills:
            try:
                self.rqd(address).KillRunningFrame(
                    rqd_pb2.RqdStaticKillRunningFrameRequest(frame_id=frame_id, message=message),
                    timeout=RQD_TIMEOUT_S)
            except grpc.RpcError as exc:  # NOT_FOUND: the frame ended meanwhile
                log.info("kill of %s on %s: %s", frame_id, address, exc.code())

"""Farm state of the Cuebot double: job, layer, frame and host records, and their protobufs.

One `FarmState` owns every record behind one lock; servicers and the dispatcher change records
only through it. Frame state rules follow Cuebot (FrameCompleteHandler.determineFrameState,
FrameDaoJdbc.updateFrameStarted, JobDaoJdbc.isJobComplete/updateJobFinished):

- a frame's `retry_count` grows when it is started and its last exit status is not one of
  FrameDaoJdbc.updateFrameStarted's exceptions (completion.counts_a_retry: never ran, 286 SKIP_RETRY,
  256 FAILED_LAUNCH, 299 cleared, 301 orphan, 302 failed kill, 399 down host), so a frame that failed
  and is waiting for its retry still shows the count of the run it is waiting for;
- a frame's completion follows Cuebot's determineFrameState (completion.py: memory failures 33/137,
  NIMBY kills, layer and LLU timeouts and the 12 h no-retry rule besides the retry count), and a
  host that stops pinging goes DOWN with its frames back to WAITING (sweep_down_hosts);
- a job is complete (FINISHED) once no frame is WAITING, RUNNING, DEAD, DEPEND or CHECKPOINT:
  a DEAD frame keeps its job PENDING until it is retried, eaten or the job is killed;
- a FINISHED job loses its visible name: FindJob, FindFrame and IsJobPending no longer see it,
  GetJob and GetJobs(include_finished=True) still do.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
import uuid

from opencue_proto import host_pb2, job_pb2

from tests.cuebot.completion import (EXIT_STATUS_DOWN_HOST, EXIT_STATUS_FRAME_CLEARED, HOST_DOWN_INTERVAL_S,
                                     MEMORY_INCREASE_KB, Clock, Completion, CuebotRules, counts_a_retry,
                                     determine_frame_state, is_memory_failure)

# Frame states that count as finished work; the rest keep a job PENDING.
DONE_STATES = (job_pb2.SUCCEEDED, job_pb2.EATEN)
CORE_UNITS = 100  # Cuebot and RQD count cores in hundredths: 100 = one core


def new_id() -> str:
    return str(uuid.uuid4())


def proc_name(host: str, core_units: int, gpus: int) -> str:
    """Frame.last_resource as Cuebot's CueUtil.buildProcName writes it: `host/1.00/0`."""
    return "%s/%4.2f/%d" % (host, core_units / CORE_UNITS, gpus) if host else ""


@dataclasses.dataclass
class LayerRecord:
    id: str
    job_id: str
    name: str
    type: int  # job_pb2.LayerType
    command: str
    range: str
    chunk_size: int
    dispatch_order: int
    min_cores: int  # core units
    max_cores: int
    min_memory: int  # KB
    min_gpus: int
    min_gpu_memory: int  # KB
    threadable: bool
    tags: list[str]
    services: list[str]
    env: dict[str, str]
    timeout: int = 0
    timeout_llu: int = 0
    depend_on: list[str] = dataclasses.field(default_factory=list)  # ids of layers still to finish


@dataclasses.dataclass
class FrameRecord:
    id: str
    job_id: str
    layer_id: str
    name: str  # "0001-layer", Cuebot's CueUtil.buildFrameName
    number: int
    dispatch_order: int
    state: int = job_pb2.WAITING
    retry_count: int = 0
    exit_status: int = -1  # Cuebot's value for "never ran"
    exit_signal: int = 0
    start_time: int = 0
    stop_time: int = 0
    host: str = ""  # host of the latest run
    cores: int = 0  # core units of the latest run
    gpus: int = 0
    reserved_memory: int = 0
    resource_id: str = ""  # proc id of the run that owns the frame; "" when none does
    max_rss: int = 0
    used_memory: int = 0
    llu_time: int = 0
    runs: int = 0  # launches RQD accepted, for assertions
    failures: int = 0  # runs that ended with a non-zero exit status
    updated: float = dataclasses.field(default_factory=time.time)

    @property
    def last_resource(self) -> str:
        return proc_name(self.host, self.cores, self.gpus)


@dataclasses.dataclass
class JobRecord:
    id: str
    name: str
    show: str
    shot: str
    user: str
    uid: int
    facility: str
    os: str
    priority: int
    paused: bool
    auto_eat: bool
    max_retries: int
    log_dir: str
    env: dict[str, str]
    layers: list[LayerRecord]
    frames: list[FrameRecord]
    state: int = job_pb2.PENDING
    start_time: int = dataclasses.field(default_factory=lambda: int(time.time()))
    stop_time: int = 0

    def layer(self, layer_id: str) -> LayerRecord:
        return next(layer for layer in self.layers if layer.id == layer_id)


@dataclasses.dataclass
class ProcRecord:
    """One frame run booked on a host, Cuebot's VirtualProc: held until RQD reports it done."""

    id: str
    frame_id: str
    cores: int
    gpus: int
    memory: int = 0  # KB reserved (the layer's min_memory)
    gpu_memory: int = 0  # KB reserved (the layer's min_gpu_memory)


@dataclasses.dataclass
class HostRecord:
    name: str
    address: str  # "127.0.0.1:PORT" of the host's RqdInterface
    total_cores: int  # core units
    total_memory: int  # KB
    free_memory: int
    tags: list[str]
    boot_time: int
    ping_time: int
    state: int = host_pb2.UP
    procs: dict[str, ProcRecord] = dataclasses.field(default_factory=dict)
    id: str = dataclasses.field(default_factory=new_id)
    total_gpus: int = 0  # RenderHost.num_gpus
    total_gpu_memory: int = 0  # KB, RenderHost.total_gpu_mem

    @property
    def idle_cores(self) -> int:
        return self.total_cores - sum(proc.cores for proc in self.procs.values())

    @property
    def idle_memory(self) -> int:
        """KB not reserved by a booked proc (Cuebot's DispatchHost.idleMemory after useResources)."""
        return self.total_memory - sum(proc.memory for proc in self.procs.values())

    @property
    def idle_gpus(self) -> int:
        return self.total_gpus - sum(proc.gpus for proc in self.procs.values())

    @property
    def idle_gpu_memory(self) -> int:
        return self.total_gpu_memory - sum(proc.gpu_memory for proc in self.procs.values())


def raise_layer_memory(layer: LayerRecord, proc_reserved_kb: int) -> None:
    """Cuebot's answer to a memory failure, on the layer's minimum memory [KB].

    FrameCompleteHandler.retryFrameWithRaisedMemory (cuebot/src/main/java/com/imageworks/spcue/dispatcher/
    FrameCompleteHandler.java)::

        long increase = getMemoryIncrease(frame);      // CueUtil.GB2 unless a service sets one
        jobManager.enableMemoryOptimizer(frame, false);
        jobManager.increaseLayerMemoryRequirement(frame, proc.memoryReserved + increase);

    and LayerDaoJdbc.increaseLayerMinMemory (.../dao/postgres/LayerDaoJdbc.java)::

        "UPDATE layer SET int_mem_min=? WHERE pk_layer=? AND int_mem_min < ?", val, layer.getLayerId(), val

    so the minimum becomes max(min, the failed run's reservation + 2 GB): two frames of a layer that both
    fail with the same reservation raise it once, not twice. The retried frame is booked with the new
    minimum and RQD gets it as CUE_MEMORY (DispatchSupportService: putEnvironment("CUE_MEMORY",
    proc.memoryReserved)). The double has no memory optimizer, so nothing is disabled.
    """
    layer.min_memory = max(layer.min_memory, proc_reserved_kb + MEMORY_INCREASE_KB)


class JobExists(ValueError):
    """A PENDING job already has that name (Cuebot's JobLaunchException)."""


class FarmState:
    """Every record of the double, behind one lock; `changed` wakes waiters on any change."""

    def __init__(self, clock: Clock | None = None, rules: CuebotRules | None = None) -> None:
        self.clock = clock or Clock()  # frame start/stop and run times, host pings (completion.py)
        self.rules = rules or CuebotRules()  # the Cuebot version/facility modelled (no-retry limit, retry cap)
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.jobs: dict[str, JobRecord] = {}  # by id, in launch order
        self.frames: dict[str, FrameRecord] = {}  # by id
        self.hosts: dict[str, HostRecord] = {}  # by name
        self.counters = {"dispatched": 0, "reports": 0, "launch_errors": 0}

    def touch(self, frame: FrameRecord) -> None:
        frame.updated = time.time()
        self.changed.notify_all()

    def add_job(self, job: JobRecord) -> None:
        with self.lock:
            if any(other.name == job.name and other.state == job_pb2.PENDING
                   for other in self.jobs.values()):
                raise JobExists("error launching job, active job already exists: " + job.name)
            self.jobs[job.id] = job
            self.frames.update((frame.id, frame) for frame in job.frames)
            self.changed.notify_all()

    def pending_job(self, name: str) -> JobRecord | None:
        """The job Cuebot still shows under `name` (str_visible_name): only a PENDING one."""
        with self.lock:
            return next((job for job in self.jobs.values()
                         if job.name == name and job.state == job_pb2.PENDING), None)

    def snapshot(self) -> list[JobRecord]:
        with self.lock:
            return copy.deepcopy(list(self.jobs.values()))

    # -- frame lifecycle ------------------------------------------------------------------

    def start_frame(self, frame: FrameRecord, host: HostRecord, proc: ProcRecord) -> None:
        """WAITING -> RUNNING on `host`, before RQD is asked (FrameDaoJdbc.updateFrameStarted), which
        adds a retry unless the last exit status is one of its exceptions (completion.counts_a_retry)."""
        if counts_a_retry(frame.exit_status):
            frame.retry_count += 1
        frame.state = job_pb2.RUNNING
        frame.host, frame.cores, frame.gpus = host.name, proc.cores, proc.gpus
        frame.resource_id = proc.id
        frame.start_time, frame.stop_time = int(self.clock()), 0
        frame.used_memory = frame.max_rss = 0
        frame.reserved_memory = proc.memory  # UPDATE_FRAME_STARTED: int_mem_reserved = proc.memoryReserved
        host.procs[proc.id] = proc
        self.touch(frame)

    def confirm_launch(self, frame: FrameRecord, proc_id: str) -> None:
        """RQD accepted the RunFrame (the retry was counted at start_frame, as Cuebot does)."""
        if frame.resource_id != proc_id:
            return
        frame.runs += 1
        self.touch(frame)

    def clear_launch(self, frame: FrameRecord, host: HostRecord, proc_id: str) -> None:
        """RQD refused the RunFrame (or lost it): back to WAITING with exit status 299
        (FrameDaoJdbc.updateFrameCleared), so the next start spends no retry."""
        host.procs.pop(proc_id, None)
        if frame.resource_id == proc_id:
            frame.resource_id = ""
            frame.state = job_pb2.WAITING
            frame.exit_status = EXIT_STATUS_FRAME_CLEARED
            self.touch(frame)

    def stop_frame(self, frame: FrameRecord, state: int, exit_status: int | None = None) -> None:
        frame.state = state
        frame.resource_id = ""
        frame.stop_time = int(self.clock())
        if exit_status is not None:
            frame.exit_status = exit_status
        self.touch(frame)
        self.update_job_state(self.jobs[frame.job_id])

    def complete_frame(self, host_name: str, proc_id: str, frame_id: str, done: Completion,
                       max_rss: int) -> None:
        """RQD's FrameCompleteReport: free the proc, then settle the frame if it still owns it,
        by Cuebot's rules (completion.determine_frame_state; run time on the double's clock)."""
        with self.lock:
            host = self.hosts.get(host_name)
            if host is not None:
                host.procs.pop(proc_id, None)
            frame = self.frames.get(frame_id)
            self.changed.notify_all()
            if frame is None or frame.resource_id != proc_id:
                return  # superseded run: killed, retried or eaten meanwhile
            job = self.jobs[frame.job_id]
            layer = job.layer(frame.layer_id)
            done = dataclasses.replace(done, run_time_s=max(0, int(self.clock()) - frame.start_time))
            frame.exit_signal = done.exit_signal
            frame.max_rss = max(frame.max_rss, max_rss)
            frame.failures += done.exit_status != 0
            state = determine_frame_state(frame.state, frame.retry_count, job.max_retries, job.auto_eat,
                                          layer.timeout, layer.timeout_llu, done, self.clock(),
                                          no_retry_s=self.rules.frame_time_no_retry_s)
            # (the double never memory-kills a frame itself, so no exit status 33 is stored on a frame)
            if done.exit_status != 0 and is_memory_failure(done):
                raise_layer_memory(layer, frame.reserved_memory)
            self.stop_frame(frame, state, done.exit_status)
            if state == job_pb2.SUCCEEDED:
                self.satisfy_layer_depends(job, frame.layer_id)

    def satisfy_layer_depends(self, job: JobRecord, layer_id: str) -> None:
        """Once `layer_id` is complete (no frame WAITING, RUNNING, DEAD or DEPEND: Cuebot's
        LayerDaoJdbc.IS_LAYER_COMPLETE), drop the LAYER_ON_LAYER depends on it; a layer with none
        left moves its DEPEND frames to WAITING (FrameCompleteHandler.satisfyDependsAndCompleteLayerAndJob,
        called on a SUCCEEDED frame only: depend.satisfy_only_on_frame_success defaults to true)."""
        blocking = (job_pb2.WAITING, job_pb2.RUNNING, job_pb2.DEAD, job_pb2.DEPEND)
        if any(f.layer_id == layer_id and f.state in blocking for f in job.frames):
            return
        for layer in job.layers:
            if layer_id not in layer.depend_on:
                continue
            layer.depend_on.remove(layer_id)
            if not layer.depend_on:
                for f in job.frames:
                    if f.layer_id == layer.id and f.state == job_pb2.DEPEND:
                        f.state = job_pb2.WAITING
                        self.touch(f)

    def sweep_down_hosts(self) -> list[str]:
        """checkHardwareState: hosts not pinged for HOST_DOWN_INTERVAL_S go DOWN and their frames back
        to WAITING with exit status 399 (clearDownProcs -> lostProc). Returns the hosts marked down."""
        down = []
        with self.lock:
            now = self.clock()
            for host in self.hosts.values():
                if host.state != host_pb2.UP or now - host.ping_time <= HOST_DOWN_INTERVAL_S:
                    continue
                host.state = host_pb2.DOWN
                down.append(host.name)
                for proc in list(host.procs.values()):
                    host.procs.pop(proc.id, None)
                    frame = self.frames.get(proc.frame_id)
                    if frame is not None and frame.resource_id == proc.id:
                        self.stop_frame(frame, job_pb2.WAITING, EXIT_STATUS_DOWN_HOST)
            self.changed.notify_all()
        return down

    def backdate_ping(self, host_name: str, seconds: int) -> None:
        """Make ``host_name``'s last ping ``seconds`` older on the double's clock (a host that went silent that
        long ago; the other hosts keep pinging, so only it goes DOWN at the next sweep)."""
        with self.lock:
            self.hosts[host_name].ping_time -= seconds

    def backdate(self, frame_id: str, seconds: int) -> None:
        """Make a running frame look ``seconds`` older on the double's clock (tests of the run-time rules)."""
        with self.lock:
            self.frames[frame_id].start_time -= seconds

    def update_job_state(self, job: JobRecord) -> None:
        """PENDING -> FINISHED once nothing is left to run (JobDaoJdbc.isJobComplete)."""
        if job.state == job_pb2.PENDING and all(f.state in DONE_STATES for f in job.frames):
            self.finish_job(job)

    def finish_job(self, job: JobRecord) -> bool:
        if job.state != job_pb2.PENDING:
            return False
        job.state = job_pb2.FINISHED
        job.stop_time = int(time.time())
        self.changed.notify_all()
        return True

    # -- protobufs ------------------------------------------------------------------------

    def frame_pb(self, frame: FrameRecord) -> job_pb2.Frame:
        layer = self.jobs[frame.job_id].layer(frame.layer_id)
        return job_pb2.Frame(
            id=frame.id, name=frame.name, layer_name=layer.name, number=frame.number,
            state=frame.state, retry_count=frame.retry_count, exit_status=frame.exit_status,
            dispatch_order=frame.dispatch_order, start_time=frame.start_time,
            stop_time=frame.stop_time, max_rss=frame.max_rss, used_memory=frame.used_memory,
            reserved_memory=frame.reserved_memory, last_resource=frame.last_resource,
            llu_time=frame.llu_time, total_core_time=self._core_seconds(frame),
            submission_time=self.jobs[frame.job_id].start_time)

    def updated_frame_pb(self, frame: FrameRecord) -> job_pb2.UpdatedFrame:
        return job_pb2.UpdatedFrame(
            id=frame.id, state=frame.state, retry_count=frame.retry_count,
            exit_status=frame.exit_status, start_time=frame.start_time,
            stop_time=frame.stop_time, max_rss=frame.max_rss, used_memory=frame.used_memory,
            last_resource=frame.last_resource, llu_time=frame.llu_time)

    @staticmethod
    def _core_seconds(frame: FrameRecord) -> int:
        if not frame.start_time:
            return 0
        end = frame.stop_time or int(time.time())  # wall time: core seconds are not a completion rule
        return max(0, end - frame.start_time) * frame.cores // CORE_UNITS

    def _counts(self, frames: list[FrameRecord]) -> dict:
        by_state = {state: 0 for state in job_pb2.FrameState.values()}
        for frame in frames:
            by_state[frame.state] += 1
        succeeded = [f for f in frames if f.state == job_pb2.SUCCEEDED]
        run_secs = [f.stop_time - f.start_time for f in succeeded]
        return dict(
            total_frames=len(frames), waiting_frames=by_state[job_pb2.WAITING],
            running_frames=by_state[job_pb2.RUNNING], dead_frames=by_state[job_pb2.DEAD],
            eaten_frames=by_state[job_pb2.EATEN], depend_frames=by_state[job_pb2.DEPEND],
            succeeded_frames=by_state[job_pb2.SUCCEEDED],
            pending_frames=by_state[job_pb2.WAITING] + by_state[job_pb2.DEPEND],
            rendered_frame_count=len(succeeded),
            failed_frame_count=sum(f.failures for f in frames),
            avg_frame_sec=sum(run_secs) // len(run_secs) if run_secs else 0,
            high_frame_sec=max(run_secs, default=0),
            max_rss=max((f.max_rss for f in frames), default=0),
            reserved_cores=sum(f.cores for f in frames if f.state == job_pb2.RUNNING)
            / CORE_UNITS)

    def layer_pb(self, layer: LayerRecord) -> job_pb2.Layer:
        frames = [f for f in self.jobs[layer.job_id].frames if f.layer_id == layer.id]
        return job_pb2.Layer(
            id=layer.id, name=layer.name, range=layer.range, tags=layer.tags,
            min_cores=layer.min_cores / CORE_UNITS, max_cores=layer.max_cores / CORE_UNITS,
            is_threadable=layer.threadable, min_memory=layer.min_memory,
            min_gpu_memory=layer.min_gpu_memory, chunk_size=layer.chunk_size,
            dispatch_order=layer.dispatch_order, type=layer.type, services=layer.services,
            parent_id=layer.job_id, timeout=layer.timeout, timeout_llu=layer.timeout_llu,
            min_gpus=layer.min_gpus, command=layer.command,
            layer_stats=job_pb2.LayerStats(**self._counts(frames)))

    def job_pb(self, job: JobRecord) -> job_pb2.Job:
        return job_pb2.Job(
            id=job.id, state=job.state, name=job.name, shot=job.shot, show=job.show,
            user=job.user, group=job.show, facility=job.facility, os=job.os, uid=job.uid,
            priority=job.priority, min_cores=1.0, max_cores=200.0, log_dir=job.log_dir,
            is_paused=job.paused, auto_eat=job.auto_eat, start_time=job.start_time,
            stop_time=job.stop_time,
            job_stats=job_pb2.JobStats(total_layers=len(job.layers), **self._counts(job.frames)))

    def host_pb(self, host: HostRecord) -> host_pb2.Host:
        return host_pb2.Host(
            id=host.id, name=host.name, alloc_name="local.general",
            cores=host.total_cores / CORE_UNITS, idle_cores=host.idle_cores / CORE_UNITS,
            memory=host.total_memory, idle_memory=host.free_memory,
            total_memory=host.total_memory, free_memory=host.free_memory,
            boot_time=host.boot_time, ping_time=host.ping_time, tags=host.tags,
            state=host.state, lock_state=host_pb2.OPEN)

"""CuebotDouble: a Python gRPC stand-in for Cuebot, on the real `opencue_proto` messages.

    cuebot = CuebotDouble(frame_uid=1000, frame_gid=1000, frame_user="someone")
    cuebot.start()                     # 127.0.0.1:<free port>, gRPC server + dispatcher
    ...                                # pycue / pyoutline / RQD / CueGUI talk to cuebot.address
    cuebot.wait_job_finished(name, timeout=30)
    cuebot.stop()

Implemented RPCs (every other Cuebot RPC answers UNIMPLEMENTED):
  CueInterface.GetSystemStats
  JobInterface.LaunchSpec, LaunchSpecAndWait, GetJobs, GetJobNames, FindJob, GetJob,
    IsJobPending, GetLayers, GetFrames, GetUpdatedFrames, Kill, KillFrames, RetryFrames,
    EatFrames, Pause, Resume, GetWhatDependsOnThis, GetWhatThisDependsOn, GetDepends
  LayerInterface.GetLayer, FindLayer, GetFrames, KillFrames, RetryFrames, EatFrames
  FrameInterface.GetFrame, FindFrame, GetFrames, Kill, Retry, Eat
  HostInterface.FindHost, GetHost
  RqdReportInterface.ReportRqdStartup, ReportStatus, ReportRunningFrameCompletion
and, as a client of each registered RQD: RqdInterface.LaunchFrame, KillRunningFrame.

Frames run as the frame identity given here, whoever submitted the job: RQD refuses uid 0 and
`su`s to `frame_user`, so the account must exist on the machine with a login shell. Job log
directories go under `log_root` (a temporary directory, removed by stop(), when None); every
directory on the way must be traversable by the frame user. See records.py, jobspec.py,
job_servicers.py and dispatcher.py for the Cuebot rules mirrored and the deliberate gaps.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from concurrent import futures
from pathlib import Path

import grpc
from opencue_proto import job_pb2

from tests.cuebot.dispatcher import Dispatcher, FrameIdentity
from tests.cuebot.farm_servicers import register_servicers
from tests.cuebot.completion import CuebotRules
from tests.cuebot.records import FarmState, JobRecord

GRPC_WORKERS = 8  # pycue, CueGUI's pool and two RQDs call at once


class CuebotDouble:
    def __init__(self, *, frame_uid: int = 1000, frame_gid: int = 1000,
                 frame_user: str = "cuetrain", log_root: str | None = None,
                 max_frames_per_host: int | None = 1, bind_host: str | None = None,
                 rules: CuebotRules | None = None) -> None:
        """`max_frames_per_host=None` packs a host by idle cores, memory and GPUs (dispatcher.fits)
        instead of one run at a time. `bind_host`: an address to serve on as well as 127.0.0.1, same
        port (the multi-host test bed's bridge); then `bridge_address` is "bind_host:port". `rules`: the
        Cuebot version/facility modelled (completion.CuebotRules: no-retry limit, retry cap; default:
        current Cuebot, 12 h and 1 retry)."""
        self.bind_host = bind_host
        self.bridge_address = ""
        self.identity = FrameIdentity(uid=frame_uid, gid=frame_gid, user=frame_user)
        self.max_frames_per_host = max_frames_per_host
        self._own_log_root = log_root is None
        self.log_root = Path(log_root) if log_root else None
        self.state = FarmState(rules=rules)
        self.port = 0
        self.address = ""
        self._server: grpc.Server | None = None
        self._dispatcher: Dispatcher | None = None

    def start(self) -> None:
        if self.log_root is None:
            self.log_root = Path(tempfile.mkdtemp(prefix="cuebot-double-logs-"))
            self.log_root.chmod(0o755)  # the frame user walks through to its job's log dir
        self._dispatcher = Dispatcher(self.state, self.identity, self.max_frames_per_host)
        self._server = grpc.server(futures.ThreadPoolExecutor(
            max_workers=GRPC_WORKERS, thread_name_prefix="cuebot-double"))
        register_servicers(self._server, self.state, self._dispatcher, self.log_root)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        if not self.port:
            raise RuntimeError("CuebotDouble could not bind a port on 127.0.0.1")
        self.address = f"127.0.0.1:{self.port}"
        if self.bind_host:
            if not self._server.add_insecure_port(f"{self.bind_host}:{self.port}"):
                raise RuntimeError(f"CuebotDouble could not bind {self.bind_host}:{self.port}")
            self.bridge_address = f"{self.bind_host}:{self.port}"
        self._server.start()
        self._dispatcher.start()

    def stop(self) -> None:
        """Stop serving and dispatching; frames still running on RQDs are left to their RQDs."""
        if self._dispatcher is not None:
            self._dispatcher.stop()
            self._dispatcher = None
        if self._server is not None:
            self._server.stop(grace=1).wait(5)
            self._server = None
        if self._own_log_root and self.log_root is not None:
            shutil.rmtree(self.log_root, ignore_errors=True)
            self.log_root = None

    def __enter__(self) -> "CuebotDouble":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def jobs(self) -> list[JobRecord]:
        """Copies of the job records (with their layers and frames), in launch order."""
        return self.state.snapshot()

    def hosts(self) -> list[str]:
        """Names of the RQD hosts that reported their startup."""
        with self.state.lock:
            return list(self.state.hosts)

    def frame_memory(self, job_name: str, frame_name: str) -> tuple[int, int]:
        """``(peak RSS, reservation)`` of a job's frame [KB]: the peak is the largest ``max_rss`` RQD reported
        for its latest run (RunningFrameInfo in host reports, then FrameCompleteReport), the reservation is
        the proc's ``memoryReserved`` of that run (CUE_MEMORY). Raises KeyError for an unknown job/frame."""
        with self.state.lock:
            job = next((j for j in self.state.jobs.values() if j.name == job_name), None)
            frame = next((f for f in job.frames if f.name == frame_name), None) if job else None
            if frame is None:
                raise KeyError(f"no frame {frame_name!r} in a job named {job_name!r}")
            return frame.max_rss, frame.reserved_memory

    def wait_job_finished(self, job_name: str, timeout: float) -> None:
        """Block until a job named `job_name` is FINISHED; TimeoutError with the frames if not."""
        deadline = time.monotonic() + timeout
        with self.state.changed:
            while not any(job.name == job_name and job.state == job_pb2.FINISHED
                          for job in self.state.jobs.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{job_name} not FINISHED after {timeout}s: "
                                       + self._describe(job_name))
                self.state.changed.wait(min(left, 0.5))

    def wait_host(self, hostname: str, timeout: float) -> None:
        """Block until RQD `hostname` has reported its startup."""
        deadline = time.monotonic() + timeout
        with self.state.changed:
            while hostname not in self.state.hosts:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"RQD {hostname} did not report its startup in {timeout}s")
                self.state.changed.wait(min(left, 0.5))

    def _describe(self, job_name: str) -> str:
        jobs = [job for job in self.state.jobs.values() if job.name == job_name]
        if not jobs:
            return f"no such job (jobs: {[job.name for job in self.state.jobs.values()]})"
        return "; ".join(
            f"{f.name} {job_pb2.FrameState.Name(f.state)} exit={f.exit_status} "
            f"retries={f.retry_count} host={f.host or '-'}"
            for job in jobs for f in job.frames) + f"; hosts={list(self.state.hosts)}"


def log_file(job: JobRecord, frame_name: str) -> str:
    """Where RQD writes a frame's log: `<log_dir>/<job>.<frame>.rqlog` (rqcore.setup)."""
    return os.path.join(job.log_dir, f"{job.name}.{frame_name}.rqlog")

"""The OpenCue backend of :class:`cue_plugin.submit.spec.Farm`, through pyoutline (spec) and pycue (Cuebot).

pycue reads its configuration (``opencue.yaml``, ``CUEBOT_HOSTS``) when it is imported and keeps
its Cuebot connection in class attributes, so it is imported inside the methods here, never at
module import, and nothing connects before the first call that needs Cuebot. ``dry_run`` needs no
Cuebot at all. Every pycue/gRPC failure leaves this module as a :class:`FarmError` whose message
says what to do.

Run states come from ONE table, :data:`STATES`: (job state, summary of the frame states) ->
:class:`RunState`, ``RunState.UNKNOWN`` for anything else. The frame summary is the first of
``dead, eaten, running, waiting, succeeded`` that any frame is in (``none`` without frames).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
from typing import Any, Iterable, Iterator, Mapping, Sequence

from cue_plugin.submit import builder
from cue_plugin.submit.spec import FarmError, JobHandle, JobStatus, RunState, TrainingJob
from trainer.core.envvars import read_farm_env
from trainer.record import runrecord
from trainer.record.rundir import RunDirError, RunPaths

log = logging.getLogger(__name__)

#: OpenCue frame state -> summary group.
FRAME_GROUPS = {"DEAD": "dead", "EATEN": "eaten", "RUNNING": "running", "SETUP": "running",
                "CHECKPOINT": "running", "WAITING": "waiting", "DEPEND": "waiting", "SUCCEEDED": "succeeded"}
_PRECEDENCE = ("dead", "eaten", "running", "waiting", "succeeded")

#: (OpenCue job state, frame summary) -> run state. A killed job is FINISHED with frames left that
#: never succeeded; a DEAD frame (retries used up) fails the gang even while the job is PENDING.
STATES: dict[tuple[str, str], RunState] = {
    ("PENDING", "waiting"): RunState.PENDING,
    ("PENDING", "running"): RunState.RUNNING,
    ("PENDING", "dead"): RunState.FAILED,
    ("PENDING", "eaten"): RunState.FAILED,
    ("PENDING", "succeeded"): RunState.SUCCEEDED,
    ("STARTUP", "none"): RunState.PENDING,
    ("STARTUP", "waiting"): RunState.PENDING,
    ("FINISHED", "succeeded"): RunState.SUCCEEDED,
    ("FINISHED", "dead"): RunState.FAILED,
    ("FINISHED", "eaten"): RunState.FAILED,
    ("FINISHED", "running"): RunState.CANCELLED,
    ("FINISHED", "waiting"): RunState.CANCELLED,
    ("FINISHED", "none"): RunState.CANCELLED,
    ("SHUTDOWN", "running"): RunState.CANCELLED,
    ("SHUTDOWN", "waiting"): RunState.CANCELLED,
}


def frame_summary(frame_states: Iterable[str]) -> str:
    """``dead``/``eaten``/``running``/``waiting``/``succeeded`` (first present), ``none`` or ``unknown``."""
    groups = {FRAME_GROUPS.get(s, "unknown") for s in frame_states}
    if not groups:
        return "none"
    if "unknown" in groups:
        return "unknown"
    return next(g for g in _PRECEDENCE if g in groups)


def run_state(job_state: str, frame_states: Iterable[str]) -> RunState:
    """The run state of a job from its OpenCue state names (see :data:`STATES`)."""
    return STATES.get((job_state, frame_summary(frame_states)), RunState.UNKNOWN)


class OpenCueFarm:
    """Submit, watch and cancel training jobs on OpenCue.

    Args:
        hosts: Cuebot ``host[:port]`` list; default: pycue's own config (``CUEBOT_HOSTS`` or
            ``opencue.yaml``).
        timeout_s: deadline of each Cuebot call [s]; default: pycue's ``cuebot.timeout``.
        allow_root: submit even as root (tests only: RQD refuses frames that would run as uid 0;
            a Cuebot test double may run them as another user).
        python: interpreter path frames run (default ``sys.executable``).

    pycue keeps one connection per process (class attributes), so ``hosts``/``timeout_s`` apply
    to every pycue user in this process.
    """

    def __init__(self, *, hosts: Sequence[str] | None = None, timeout_s: float | None = None,
                 allow_root: bool = False, python: str | None = None) -> None:
        self.hosts = list(hosts) if hosts else None
        self.timeout_s = timeout_s
        self.allow_root = allow_root
        self.python = python
        self._connected = False

    # -- connection and errors -------------------------------------------------------------------

    def _hosts_text(self) -> str:
        try:
            import opencue

            hosts = list(opencue.Cuebot.Hosts or [])
        except Exception:  # noqa: BLE001 - only for a message
            hosts = []
        hosts = hosts or self.hosts or list(read_farm_env().cuebot_hosts)
        return ", ".join(hosts) if hosts else "(none configured)"

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Translate pycue/gRPC/socket failures into FarmError (message says what to do)."""
        import grpc
        import opencue.exception as cue_exc

        unreachable = (f"cannot {action}: cannot reach Cuebot at {{hosts}}: check CUEBOT_HOSTS / opencue.yaml "
                       "(OPENCUE_CONFIG_FILE) and that Cuebot is running ({detail})")
        try:
            yield
        except (cue_exc.ConnectionException, cue_exc.DeadlineExceededException, ConnectionError) as exc:
            raise FarmError(unreachable.format(hosts=self._hosts_text(), detail=_short(exc))) from exc
        except cue_exc.EntityNotFoundException as exc:
            raise FarmError(f"cannot {action}: Cuebot does not know it ({_short(exc)}); check the job name or id "
                            "(`cuetrain status` takes a run directory too)") from exc
        except cue_exc.CueException as exc:
            raise FarmError(f"cannot {action}: Cuebot answered with an error: {_short(exc)}") from exc
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise FarmError(unreachable.format(hosts=self._hosts_text(), detail=_short(exc))) from exc
            if code == grpc.StatusCode.NOT_FOUND:
                raise FarmError(f"cannot {action}: Cuebot does not know it ({_short(exc)})") from exc
            raise FarmError(f"cannot {action}: Cuebot answered {code}: {_short(exc)}") from exc

    def _connect(self) -> Any:
        """Import pycue and point it at ``hosts`` (first call only). Returns the ``opencue`` module."""
        import opencue

        if not self._connected:
            with self._errors("connect"):
                if self.timeout_s is not None:
                    opencue.Cuebot.setTimeout(self.timeout_s)  # passed to gRPC as the deadline [s]
                if self.hosts:
                    opencue.Cuebot.setHosts(self.hosts)  # connects and checks the connection
                elif opencue.Cuebot.RpcChannel is None:
                    opencue.Cuebot.init()  # CUEBOT_HOSTS or opencue.yaml's facility; connects
            self._connected = True
        return opencue

    # -- Farm protocol ---------------------------------------------------------------------------

    def dry_run(self, job: TrainingJob) -> str:
        """The job spec XML (no Cuebot contacted). Raises FarmError (bad arguments)."""
        return builder.dry_run(job, python=self.python)

    def _check_user(self, job: TrainingJob) -> None:
        if self.allow_root:
            return
        if job.user == "root" or os.geteuid() == 0:
            raise FarmError("OpenCue's RQD refuses to run frames as root (uid 0), and this job would run as root "
                            f"(user {job.user!r}, submitting uid {os.geteuid()}); submit from your own login "
                            "with --user set to it")

    def _prepare(self, job: TrainingJob, hosts: Sequence[str]) -> TrainingJob:
        """Add ``CUEBOT_HOSTS`` to the frames' environment: frames look frame 0 up in Cuebot (``cuebot``
        rendezvous) and frame 0 fails the whole layer through pycue on a gang timeout (any mode)."""
        if "CUEBOT_HOSTS" in job.extra_env:
            return job
        if not hosts and job.rendezvous != "cuebot":
            return job
        if not hosts:
            raise FarmError("the cuebot rendezvous needs CUEBOT_HOSTS on the render nodes, but the Cuebot hosts are "
                            "unknown here; set CUEBOT_HOSTS or extra_env, or use rendezvous 'file'")
        return dataclasses.replace(job, extra_env={**job.extra_env, "CUEBOT_HOSTS": ",".join(hosts)})

    def submit(self, job: TrainingJob) -> JobHandle:
        """Launch ``job``; record ``farm`` (job id, name, submit time) in its ``run.json``.

        Creates the run directory first (frames publish and log there).

        Raises:
            FarmError: root submission, an --init-from the frames cannot use, run directory not writable, a bad
                argument, or Cuebot unreachable / refusing the spec.
        """
        self._check_user(job)
        builder.check_init_from(job)  # before the run directory is made (dry_run below checks it again)
        builder.check_deadline(job)
        paths = RunPaths.of(job.train.run_dir)
        try:
            paths.create()
            attempts = len(runrecord.read_record_or_empty(paths).attempts)
        except RunDirError as exc:
            raise FarmError(str(exc)) from exc
        opencue = self._connect()
        job = self._prepare(job, list(opencue.Cuebot.Hosts or []))
        spec = builder.dry_run(job, python=self.python, token=secrets.token_hex(16))
        with self._errors(f"submit job {job.name}"):
            launched = opencue.api.launchSpecAndWait(spec)
        if not launched:
            raise FarmError("Cuebot accepted the spec but launched no job; check the Cuebot log")
        cue_job = launched[0]
        handle = JobHandle(job_id=cue_job.id(), job_name=cue_job.name(), run_dir=str(job.train.run_dir))
        try:
            runrecord.update_record(paths, farm={"job_id": handle.job_id, "job_name": handle.job_name,
                                         "submitted_at": runrecord.now_iso(), "attempts_at_submit": attempts,
                                         "job": _job_record(job)})
        except RunDirError as exc:
            log.warning("job %s launched, but run.json was not updated: %s", handle.job_name, exc)
        log.info("submitted %s (%s): %d rank(s), run dir %s", handle.job_name, handle.job_id, job.world_size,
                 handle.run_dir)
        return handle

    def launch_spec(self, spec: str, *, user: str) -> JobHandle:
        """Launch a job spec built elsewhere (``cue_plugin.submit.infer``); its handle has no run directory.

        Raises:
            FarmError: root submission, or Cuebot unreachable / refusing the spec.
        """
        if not self.allow_root and (user == "root" or os.geteuid() == 0):
            raise FarmError(f"OpenCue's RQD refuses to run frames as root (user {user!r}, uid {os.geteuid()}); "
                            "submit from your own login with --user set to it")
        opencue = self._connect()
        with self._errors("submit job"):
            launched = opencue.api.launchSpecAndWait(spec)
        if not launched:
            raise FarmError("Cuebot accepted the spec but launched no job; check the Cuebot log")
        log.info("submitted %s (%s)", launched[0].name(), launched[0].id())
        return JobHandle(job_id=launched[0].id(), job_name=launched[0].name(), run_dir="")

    def _find(self, opencue: Any, handle: JobHandle) -> Any:
        if handle.job_id:
            return opencue.api.getJob(handle.job_id)
        return opencue.api.findJob(handle.job_name)

    def describe(self, handle: JobHandle) -> JobStatus:
        """Current status of the job (state from :data:`STATES`; per-frame state, host, retries).

        Raises:
            FarmError: Cuebot unreachable, or the job is unknown to Cuebot.
        """
        opencue = self._connect()
        from opencue_proto import job_pb2

        with self._errors(f"describe job {handle.job_name or handle.job_id}"):
            cue_job = self._find(opencue, handle)
            frames = cue_job.getFrames()
        job_state = job_pb2.JobState.Name(cue_job.data.state)
        states = [job_pb2.FrameState.Name(f.data.state) for f in frames]
        # frames of the training layer are ranks (keyed by number); others (the infer layer) "LAYER/NUMBER"
        training = [f.data.layer_name in ("", builder.LAYER_NAME) for f in frames]
        detail = {(str(f.data.number) if train else f"{f.data.layer_name}/{f.data.number}"):
                  {"state": s, "host": f.data.last_resource.split("/", 1)[0], "retries": f.data.retry_count,
                   "exit_status": f.data.exit_status}
                  for f, s, train in zip(frames, states, training)}
        rank_states = [s for s, train in zip(states, training) if train]
        native = job_state + (" (paused)" if cue_job.data.is_paused else "")
        return JobStatus(state=run_state(job_state, states), ranks_running=rank_states.count("RUNNING"),
                         ranks_total=len(rank_states), native_state=native, frames=detail)

    def cancel(self, handle: JobHandle) -> None:
        """Kill the job; a finished or unknown job is not an error (idempotent).

        Raises:
            FarmError: Cuebot unreachable or refusing the kill.
        """
        opencue = self._connect()
        import opencue.exception as cue_exc
        from opencue_proto import job_pb2

        try:
            with self._errors(f"find job {handle.job_name or handle.job_id}"):
                cue_job = self._find(opencue, handle)
        except FarmError as exc:
            if isinstance(exc.__cause__, cue_exc.EntityNotFoundException):
                log.info("job %s is gone already; nothing to cancel", handle.job_name or handle.job_id)
                return
            raise
        if cue_job.data.state == job_pb2.FINISHED:
            log.info("job %s has finished already; nothing to cancel", cue_job.name())
            return
        with self._errors(f"cancel job {cue_job.name()}"):
            cue_job.kill(reason="cancelled with cuetrain")
        log.info("cancelled job %s", cue_job.name())

    def retry(self, handle: JobHandle) -> int:
        """Retry the job's DEAD frames (each becomes WAITING again). Returns how many were dead.

        Raises:
            FarmError: Cuebot unreachable, or the job is unknown.
        """
        opencue = self._connect()
        from opencue_proto import job_pb2

        with self._errors(f"retry job {handle.job_name or handle.job_id}"):
            cue_job = self._find(opencue, handle)
            dead = cue_job.getFrames(state=[job_pb2.DEAD])
            if dead:
                cue_job.retryFrames(state=[job_pb2.DEAD])
        log.info("retried %d dead frame(s) of %s", len(dead), cue_job.name())
        return len(dead)


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if hasattr(exc, "details") and callable(exc.details):
        text = exc.details() or text
    return " ".join(text.split())[:300]


def _job_record(job: TrainingJob) -> dict[str, Any]:
    """The job's fields other than ``train`` in JSON form (extra_env by name only: values may be secret)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(job):
        value = getattr(job, f.name)
        if f.name == "train":
            continue
        if dataclasses.is_dataclass(value):  # infer: the inference layer
            value = dataclasses.asdict(value)
        elif isinstance(value, Mapping):
            value = sorted(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def handle_from_run_dir(run_dir: str) -> JobHandle:
    """The job handle recorded in ``RUN_DIR/run.json`` at submit (``farm.job_id``/``job_name``).

    Raises:
        FarmError: no run.json, or no farm job recorded in it.
    """
    try:
        farm = runrecord.read_record(RunPaths.of(run_dir)).farm_record
    except RunDirError as exc:
        raise FarmError(str(exc)) from exc
    if not farm.submitted:
        raise FarmError(f"{run_dir}/run.json records no farm job (it was not submitted with cuetrain submit)")
    return JobHandle(job_id=farm.job_id, job_name=farm.job_name, run_dir=run_dir)

"""JobInterface, LayerInterface and FrameInterface of the Cuebot double.

Searches follow Cuebot's JobSearch/FrameSearch: non-empty criteria lists are ANDed, values in one
list ORed; `include_finished=False` keeps PENDING jobs only; frames come in dispatch order and
are paged by `page`/`limit` when a limit is given. Criteria the double cannot evaluate
(memory_range, duration_range) answer UNIMPLEMENTED rather than an unfiltered list.

Kill, retry and eat follow JobManagerSupport: killing a job marks it FINISHED, puts its RUNNING
frames back to WAITING and asks their RQDs to kill them (a late completion report is then
stale and ignored); killing frames only asks RQD, so the completion report retries them like a
failure; retrying stops a running frame to WAITING and sets the job PENDING again; eating marks
frames EATEN, which can finish the job.
"""

from __future__ import annotations

import os
import re
import time

import FileSequence
import grpc
from opencue_proto import depend_pb2, job_pb2, job_pb2_grpc

from tests.cuebot.jobspec import NotSupported, SpecError, parse_spec
from tests.cuebot.records import FarmState, FrameRecord, JobExists, JobRecord

GET_UPDATED_MAX_AGE_S = 60  # Cuebot refuses a last_check more than a minute old


def select_jobs(state: FarmState, r: job_pb2.JobSearchCriteria) -> list[JobRecord]:
    def keep(job: JobRecord) -> bool:
        checks = [
            (r.ids, lambda: job.id in r.ids), (r.jobs, lambda: job.name in r.jobs),
            (r.regex, lambda: any(re.search(rx, job.name) for rx in r.regex)),
            (r.substr, lambda: any(s in job.name for s in r.substr)),
            (r.users, lambda: job.user in r.users), (r.shots, lambda: job.shot in r.shots),
            (r.shows, lambda: job.show in r.shows)]
        if not r.include_finished and job.state != job_pb2.PENDING:
            return False
        return all(test() for values, test in checks if values)

    return [job for job in state.jobs.values() if keep(job)]


def select_frames(job: JobRecord, r: job_pb2.FrameSearchCriteria,
                  layer_id: str | None = None) -> list[FrameRecord]:
    if r.memory_range or r.duration_range:
        raise NotSupported("CuebotDouble does not filter frames by memory or duration")
    layer_names = {layer.id: layer.name for layer in job.layers}
    numbers = set(FileSequence.FrameSet(r.frame_range).getAll()) if r.frame_range else None
    states = set(r.states.frame_states)
    frames = [f for f in job.frames
              if (layer_id is None or f.layer_id == layer_id)
              and (not r.ids or f.id in r.ids) and (not r.frames or f.name in r.frames)
              and (not r.layers or layer_names[f.layer_id] in r.layers)
              and (not states or f.state in states)
              and (numbers is None or f.number in numbers)]
    if r.limit > 0:
        first = (max(r.page, 1) - 1) * r.limit
        frames = frames[first:first + r.limit]
    return frames


class FrameActions:
    """Kill / retry / eat on frames; RQD is called after the state lock is released."""

    def __init__(self, state: FarmState, dispatcher) -> None:
        self.state = state
        self.dispatcher = dispatcher

    def _kill_order(self, frame: FrameRecord, message: str):
        host = self.state.hosts.get(frame.host)
        if frame.state == job_pb2.RUNNING and frame.resource_id and host is not None:
            return host.address, frame.id, message
        return None

    def apply(self, frames: list[FrameRecord], action: str, message: str = "") -> None:
        kills = []
        with self.state.lock:
            for frame in frames:
                order = self._kill_order(frame, message)
                kills += [order] if order else []
                job = self.state.jobs[frame.job_id]
                if action == "retry":
                    if order:
                        self.state.stop_frame(frame, job_pb2.WAITING)
                    frame.state = job_pb2.WAITING
                    self.state.touch(frame)
                    if job.state == job_pb2.FINISHED:
                        job.state, job.stop_time = job_pb2.PENDING, 0
                elif action == "eat":
                    self.state.stop_frame(frame, job_pb2.EATEN)
        self.dispatcher.kill(kills)

    def kill_job(self, job: JobRecord, message: str) -> None:
        kills = []
        with self.state.lock:
            if not self.state.finish_job(job):
                return
            for frame in job.frames:
                order = self._kill_order(frame, message)
                if order:
                    kills.append(order)
                    self.state.stop_frame(frame, job_pb2.WAITING)
        self.dispatcher.kill(kills)


def kill_message(request) -> str:
    return (f"username={request.username}, pid={request.pid}, "
            f"host_kill={request.host_kill}, reason={request.reason}")


class _Base:
    def __init__(self, state: FarmState, actions: FrameActions, log_root) -> None:
        self.state = state
        self.actions = actions
        self.log_root = log_root

    def job_by_id(self, job_id: str, context) -> JobRecord:
        job = self.state.jobs.get(job_id)
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job with id {job_id}")
        return job

    def pending_job(self, name: str, context) -> JobRecord:
        job = self.state.pending_job(name)
        if job is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no pending job named {name}")
        return job

    def layer_by_id(self, layer_id: str, context):
        for job in self.state.jobs.values():
            for layer in job.layers:
                if layer.id == layer_id:
                    return job, layer
        context.abort(grpc.StatusCode.NOT_FOUND, f"no layer with id {layer_id}")

    def frame_by_id(self, frame_id: str, context) -> FrameRecord:
        frame = self.state.frames.get(frame_id)
        if frame is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no frame with id {frame_id}")
        return frame

    def frames_pb(self, frames: list[FrameRecord]) -> job_pb2.FrameSeq:
        return job_pb2.FrameSeq(frames=[self.state.frame_pb(f) for f in frames])

    def search(self, context, job: JobRecord, criteria, layer_id: str | None = None):
        try:
            return select_frames(job, criteria, layer_id)
        except NotSupported as exc:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, str(exc))


class JobServicer(_Base, job_pb2_grpc.JobInterfaceServicer):
    def _launch(self, spec: str, context) -> list[JobRecord]:
        try:
            jobs = parse_spec(spec, log_root=self.log_root, retries_max=self.state.rules.frame_retries_max)
            for job in jobs:
                make_log_dir(job.log_dir)
                self.state.add_job(job)
        except NotSupported as exc:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, str(exc))
        except JobExists as exc:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, str(exc))
        except (SpecError, ValueError) as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return jobs

    def LaunchSpec(self, request, context):
        return job_pb2.JobLaunchSpecResponse(
            names=[job.name for job in self._launch(request.spec, context)])

    def LaunchSpecAndWait(self, request, context):
        jobs = self._launch(request.spec, context)
        with self.state.lock:
            seq = job_pb2.JobSeq(jobs=[self.state.job_pb(job) for job in jobs])
        return job_pb2.JobLaunchSpecAndWaitResponse(jobs=seq)

    def GetJobs(self, request, context):
        with self.state.lock:
            jobs = [self.state.job_pb(job) for job in select_jobs(self.state, request.r)]
        return job_pb2.JobGetJobsResponse(jobs=job_pb2.JobSeq(jobs=jobs))

    def GetJobNames(self, request, context):
        with self.state.lock:
            names = [job.name for job in select_jobs(self.state, request.r)]
        return job_pb2.JobGetJobNamesResponse(names=names)

    def FindJob(self, request, context):
        with self.state.lock:
            return job_pb2.JobFindJobResponse(
                job=self.state.job_pb(self.pending_job(request.name, context)))

    def GetJob(self, request, context):
        with self.state.lock:
            return job_pb2.JobGetJobResponse(
                job=self.state.job_pb(self.job_by_id(request.id, context)))

    def IsJobPending(self, request, context):
        return job_pb2.JobIsJobPendingResponse(
            value=self.state.pending_job(request.name) is not None)

    def GetLayers(self, request, context):
        with self.state.lock:
            job = self.job_by_id(request.job.id, context)
            layers = [self.state.layer_pb(layer) for layer in job.layers]
        return job_pb2.JobGetLayersResponse(layers=job_pb2.LayerSeq(layers=layers))

    def GetFrames(self, request, context):
        with self.state.lock:
            job = self.job_by_id(request.job.id, context)
            frames = self.frames_pb(self.search(context, job, request.req))
        return job_pb2.JobGetFramesResponse(frames=frames)

    def GetUpdatedFrames(self, request, context):
        now = int(time.time())
        if now - request.last_check > GET_UPDATED_MAX_AGE_S:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "the last update timestamp cannot be over a minute off the current "
                          f"time, difference was: {now - request.last_check}")
        with self.state.lock:
            job = self.job_by_id(request.job.id, context)
            layer_ids = {layer.id for layer in request.layer_filter.layers}
            updated = [self.state.updated_frame_pb(f) for f in job.frames
                       if f.updated >= request.last_check - 1
                       and (not layer_ids or f.layer_id in layer_ids)]
            return job_pb2.JobGetUpdatedFramesResponse(
                state=job.state, server_time=now,
                updated_frames=job_pb2.UpdatedFrameSeq(updated_frames=updated))

    def Kill(self, request, context):
        with self.state.lock:
            job = self.job_by_id(request.job.id, context)
        self.actions.kill_job(job, kill_message(request))
        return job_pb2.JobKillResponse()

    def _job_frames(self, request, context, action: str, message: str = ""):
        with self.state.lock:
            job = self.job_by_id(request.job.id, context)
            frames = self.search(context, job, request.req)
        self.actions.apply(frames, action, message)

    def KillFrames(self, request, context):
        self._job_frames(request, context, "kill", kill_message(request))
        return job_pb2.JobKillFramesResponse()

    def RetryFrames(self, request, context):
        self._job_frames(request, context, "retry")
        return job_pb2.JobRetryFramesResponse()

    def EatFrames(self, request, context):
        self._job_frames(request, context, "eat")
        return job_pb2.JobEatFramesResponse()

    def _set_paused(self, request, context, paused: bool) -> None:
        with self.state.lock:
            self.job_by_id(request.job.id, context).paused = paused
            self.state.changed.notify_all()

    def Pause(self, request, context):
        self._set_paused(request, context, True)
        return job_pb2.JobPauseResponse()

    def Resume(self, request, context):
        self._set_paused(request, context, False)
        return job_pb2.JobResumeResponse()

    # The double has no dependencies (specs with <depends> are refused): nothing depends.
    def GetWhatDependsOnThis(self, request, context):
        return job_pb2.JobGetWhatDependsOnThisResponse(depends=depend_pb2.DependSeq())

    def GetWhatThisDependsOn(self, request, context):
        return job_pb2.JobGetWhatThisDependsOnResponse(depends=depend_pb2.DependSeq())

    def GetDepends(self, request, context):
        return job_pb2.JobGetDependsResponse(depends=depend_pb2.DependSeq())


class LayerServicer(_Base, job_pb2_grpc.LayerInterfaceServicer):
    def GetLayer(self, request, context):
        with self.state.lock:
            _, layer = self.layer_by_id(request.id, context)
            return job_pb2.LayerGetLayerResponse(layer=self.state.layer_pb(layer))

    def FindLayer(self, request, context):
        with self.state.lock:
            job = self.pending_job(request.job, context)
            layer = next((la for la in job.layers if la.name == request.layer), None)
            if layer is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"no layer {request.layer}")
            return job_pb2.LayerFindLayerResponse(layer=self.state.layer_pb(layer))

    def GetFrames(self, request, context):
        with self.state.lock:
            job, layer = self.layer_by_id(request.layer.id, context)
            frames = self.frames_pb(self.search(context, job, request.s, layer.id))
        return job_pb2.LayerGetFramesResponse(frames=frames)

    def _layer_frames(self, request, context, action: str, message: str = "") -> None:
        with self.state.lock:
            job, layer = self.layer_by_id(request.layer.id, context)
            frames = [f for f in job.frames if f.layer_id == layer.id]
        self.actions.apply(frames, action, message)

    def KillFrames(self, request, context):
        self._layer_frames(request, context, "kill", kill_message(request))
        return job_pb2.LayerKillFramesResponse()

    def RetryFrames(self, request, context):
        self._layer_frames(request, context, "retry")
        return job_pb2.LayerRetryFramesResponse()

    def EatFrames(self, request, context):
        self._layer_frames(request, context, "eat")
        return job_pb2.LayerEatFramesResponse()


class FrameServicer(_Base, job_pb2_grpc.FrameInterfaceServicer):
    def GetFrame(self, request, context):
        with self.state.lock:
            frame = self.frame_by_id(request.id, context)
            return job_pb2.FrameGetFrameResponse(frame=self.state.frame_pb(frame))

    def FindFrame(self, request, context):
        with self.state.lock:
            job = self.pending_job(request.job, context)
            layer_ids = {la.id for la in job.layers if la.name == request.layer}
            frame = next((f for f in job.frames
                          if f.layer_id in layer_ids and f.number == request.frame), None)
            if frame is None:
                context.abort(grpc.StatusCode.NOT_FOUND,
                              f"no frame {request.frame} in layer {request.layer}")
            return job_pb2.FrameFindFrameResponse(frame=self.state.frame_pb(frame))

    def GetFrames(self, request, context):
        with self.state.lock:
            job = self.pending_job(request.job, context)
            frames = self.frames_pb(self.search(context, job, request.r))
        return job_pb2.FrameGetFramesResponse(frames=frames)

    def _frame(self, request, context, action: str, message: str = "") -> None:
        with self.state.lock:
            frame = self.frame_by_id(request.frame.id, context)
        self.actions.apply([frame], action, message)

    def Kill(self, request, context):
        self._frame(request, context, "kill", kill_message(request))
        return job_pb2.FrameKillResponse()

    def Retry(self, request, context):
        self._frame(request, context, "retry")
        return job_pb2.FrameRetryResponse()

    def Eat(self, request, context):
        self._frame(request, context, "eat")
        return job_pb2.FrameEatResponse()


def make_log_dir(path: str) -> None:
    """Create the job log dir world-writable, as Cuebot's JobLogUtil.createJobLogDirectory."""
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o777)

"""CueInterface, HostInterface and RqdReportInterface of the Cuebot double, and registration.

`register_servicers` serves every Cuebot service of `opencue_proto` (all `*_pb2_grpc` modules but
`rqd`, whose services RQD serves): methods the double implements answer from the farm state,
every other method answers UNIMPLEMENTED with the service and method named in the details.

RQD addresses: a real Cuebot dials every RQD on one configured port. Side-by-side RQDs on one
machine need distinct ports, so an RQD announces its port with a host tag `rqdport_<PORT>`
(RQD_TAGS in its rqd.conf, see rqd_harness.RqdProcess); without one, RQD's default 8444 is
assumed. The double dials 127.0.0.1 (a farm on one machine), or the host's name when that is an
IPv4 address: RQD reports its IP as its name by default (rqconstants.RQD_USE_IP_AS_HOSTNAME, the
address of RQD_NETWORK_INTERFACE), and Cuebot dials the host by name; the multi-host test bed
(tests/multihost) relies on it.
"""

from __future__ import annotations

import importlib
import ipaddress
import pkgutil

import grpc
import opencue_proto
from opencue_proto import cue_pb2, cue_pb2_grpc, host_pb2, host_pb2_grpc, report_pb2
from opencue_proto import report_pb2_grpc

from tests.cuebot.completion import Completion
from tests.cuebot.job_servicers import FrameActions, FrameServicer, JobServicer, LayerServicer
from tests.cuebot.records import FarmState, HostRecord

RQD_PORT_TAG = "rqdport_"
RQD_DEFAULT_PORT = 8444


def rqd_address(tags, name: str = "") -> str:
    """Where RqdInterface of a host is dialled: its name if that is an IPv4 address, else 127.0.0.1."""
    ports = [tag[len(RQD_PORT_TAG):] for tag in tags if tag.startswith(RQD_PORT_TAG)]
    try:
        host = str(ipaddress.IPv4Address(name))
    except ValueError:
        host = "127.0.0.1"
    return f"{host}:{ports[0] if ports else RQD_DEFAULT_PORT}"


class CueServicer(cue_pb2_grpc.CueInterfaceServicer):
    def __init__(self, state: FarmState) -> None:
        self.state = state

    def GetSystemStats(self, request, context):
        """pycue's connection check. Counters the double keeps; the other fields stay 0."""
        with self.state.lock:
            counters = dict(self.state.counters)
            booked = sum(len(host.procs) for host in self.state.hosts.values())
        return cue_pb2.CueGetSystemStatsResponse(stats=cue_pb2.SystemStats(
            dispatch_threads=1, dispatch_executed=counters["dispatched"],
            dispatch_rejected=counters["launch_errors"], report_executed=counters["reports"],
            booked_procs=booked))


class HostServicer(host_pb2_grpc.HostInterfaceServicer):
    def __init__(self, state: FarmState) -> None:
        self.state = state

    def FindHost(self, request, context):
        with self.state.lock:
            host = self.state.hosts.get(request.name)
            if host is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"no host named {request.name}")
            return host_pb2.HostFindHostResponse(host=self.state.host_pb(host))

    def GetHost(self, request, context):
        with self.state.lock:
            host = next((h for h in self.state.hosts.values() if h.id == request.id), None)
            if host is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"no host with id {request.id}")
            return host_pb2.HostGetHostResponse(host=self.state.host_pb(host))


class RqdReportServicer(report_pb2_grpc.RqdReportInterfaceServicer):
    """What RQD sends: its boot report, periodic host reports and frame completions."""

    def __init__(self, state: FarmState) -> None:
        self.state = state

    def _count(self) -> None:
        self.state.counters["reports"] += 1

    def ReportRqdStartup(self, request, context):
        render_host, cores = request.boot_report.host, request.boot_report.core_info
        with self.state.lock:
            self._count()
            old = self.state.hosts.get(render_host.name)
            host = HostRecord(
                name=render_host.name, address=rqd_address(render_host.tags, render_host.name),
                total_cores=cores.total_cores, total_memory=render_host.total_mem,
                free_memory=render_host.free_mem, tags=list(render_host.tags),
                boot_time=render_host.boot_time, ping_time=int(self.state.clock()),
                state=render_host.state, total_gpus=render_host.num_gpus,
                total_gpu_memory=render_host.total_gpu_mem)
            if old is not None:  # a restarted RQD: its runs died with it (Cuebot: lost procs)
                host.id = old.id
                for proc in list(old.procs.values()):
                    frame = self.state.frames.get(proc.frame_id)
                    if frame is not None:
                        self.state.clear_launch(frame, old, proc.id)
            self.state.hosts[host.name] = host
            self.state.changed.notify_all()
        return report_pb2.RqdReportRqdStartupResponse()

    def ReportStatus(self, request, context):
        report = request.host_report
        with self.state.lock:
            self._count()
            host = self.state.hosts.get(report.host.name)
            if host is not None:
                host.ping_time = int(self.state.clock())
                host.free_memory = report.host.free_mem
                host.state = report.host.state
            for info in report.frames:
                frame = self.state.frames.get(info.frame_id)
                if frame is not None and frame.resource_id == info.resource_id:
                    frame.used_memory = info.rss
                    frame.max_rss = max(frame.max_rss, info.max_rss)
                    frame.llu_time = int(info.llu_time)
                    self.state.touch(frame)
        self.state.sweep_down_hosts()  # Cuebot's checkHardwareState runs on a timer; a report is the double's tick
        return report_pb2.RqdReportStatusResponse()

    def ReportRunningFrameCompletion(self, request, context):
        report = request.frame_complete_report
        with self.state.lock:
            self._count()
            done = Completion(report.exit_status, report.exit_signal, report.run_time,
                              int(report.frame.llu_time), report.host.nimby_locked)
            self.state.complete_frame(report.host.name, report.frame.resource_id, report.frame.frame_id,
                                      done, report.frame.max_rss)
        return report_pb2.RqdReportRunningFrameCompletionResponse()


def _unimplemented(service: str, method: str):
    def handler(request, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED,
                      f"CuebotDouble does not implement {service}/{method}")
    return handler


def register_servicers(server: grpc.Server, state: FarmState, dispatcher, log_root) -> None:
    actions = FrameActions(state, dispatcher)
    implemented = {
        "CueInterface": CueServicer(state), "HostInterface": HostServicer(state),
        "RqdReportInterface": RqdReportServicer(state),
        "JobInterface": JobServicer(state, actions, log_root),
        "LayerInterface": LayerServicer(state, actions, log_root),
        "FrameInterface": FrameServicer(state, actions, log_root)}
    for info in pkgutil.iter_modules(opencue_proto.__path__):
        if not info.name.endswith("_pb2") or info.name == "rqd_pb2":
            continue
        messages = importlib.import_module(f"opencue_proto.{info.name}")
        stubs = importlib.import_module(f"opencue_proto.{info.name}_grpc")
        for service in messages.DESCRIPTOR.services_by_name.values():
            base = getattr(stubs, f"{service.name}Servicer")
            servicer = implemented.get(service.name) or base()
            for method in service.methods_by_name:
                if getattr(type(servicer), method) is getattr(base, method):
                    setattr(servicer, method, _unimplemented(service.full_name, method))
            getattr(stubs, f"add_{service.name}Servicer_to_server")(servicer, server)

"""What Cuebot does with a RUNNING frame's memory report, for the double (RQD's RunningFrameInfo in a HostReport).

Read in AcademySoftwareFoundation/OpenCue, cuebot/src/main/java/com/imageworks/spcue/dispatcher/
HostReportHandler.java (``handleMemoryUsage``, ``isFrameOverboard``, ``isOverboard``,
``handleMemoryReservations``, ``updateLayerMemoryUsage``) and cuebot/src/main/resources/opencue.properties:

1. Host under OOM pressure (used physical memory above ``dispatcher.oom_max_safe_used_physical_memory_threshold``
   = 0.9 of the host, or swap above ``..._swap_memory_threshold`` = 0.05): Cuebot kills the worst offender
   (``killWorstMemoryOffender``, ``KillCause.HostUnderOom``) until enough memory is free. The kill goes through
   ``DispatchRqdKillFrameMemory``, which stores exit status 33 on the frame (``updateFrameMemoryError``), so the
   frame's completion is a memory failure: retried whatever its retries, layer minimum raised (records.py,
   ``raise_layer_memory``). The double's hosts are real machines shared by tests, so this rule is not applied
   to live reports (a test calls :func:`decide` to check it).
2. Otherwise, for each frame: when ``OOM_FRAME_OVERBOARD_ALLOWED_THRESHOLD > 0 && isFrameOverboard(frame)`` the
   frame is killed (``KillCause.FrameOverboard``, same exit status 33 path). ``isFrameOverboard``:
   ``rss / reserved >= 1 + threshold``, or ``maxRss / reserved >= 1 + 2 * threshold`` and
   ``rss / reserved >= 1 - 0.1``. The property ``dispatcher.oom_frame_overboard_allowed_threshold`` ships as
   ``-1.0`` ("-1.0 makes the feature inactive"), so by default a frame over its reservation is NOT killed.
3. Else ``handleMemoryReservations``: ``dispatchSupport.increaseReservedMemory(proc, frame.getRss())`` raises
   the proc's reservation to the frame's RSS when the host has that much idle memory
   (``proc.memoryReserved = frame.getRss()``); a frame within its reservation changes nothing.
4. ``updateLayerMemoryUsage``: ``layerDao.increaseLayerMinMemory(layer, maxRss)`` -- the layer's minimum
   becomes at least the largest max RSS of its running frames, so the next frame of the layer books that.

RQD reports each running frame's ``rss`` and ``max_rss`` (RunningFrameInfo, KB) in its host report; the
double keeps the peak per frame (:meth:`tests.cuebot.double.CuebotDouble.frame_memory`). A frame the
kernel's OOM killer kills exits 137, which Cuebot treats as a memory failure
(``DOCKER_EXIT_STATUS_MEMORY_FAILURE``). Not read for this module: any memory kill of RQD's own.
Units: KB throughout, as RQD reports them.
"""

from __future__ import annotations

import dataclasses
import enum

OOM_FRAME_OVERBOARD_ALLOWED_THRESHOLD_DEFAULT = -1.0  # opencue.properties: "-1.0 makes the feature inactive"
OOM_MAX_SAFE_USED_PHYSICAL_MEMORY_THRESHOLD = 0.9  # opencue.properties
RSS_AVAILABLE_FOR_MAX_RSS_TRIGGER = 0.1  # HostReportHandler.isFrameOverboard


class MemoryAction(enum.Enum):
    """Cuebot's answer to one running frame's memory report."""

    NONE = "none"  # within its reservation (or over it with no idle memory to grow into)
    RESERVATION_RAISED = "reservation_raised"  # handleMemoryReservations: proc.memoryReserved = rss
    KILL_MEMORY_FAILURE = "kill_memory_failure"  # killed with exit status 33: retried with raised memory


@dataclasses.dataclass(frozen=True)
class MemoryDecision:
    """What :func:`decide` chose. ``reserved_kb``: the proc's reservation afterwards [KB];
    ``layer_min_kb``: the layer's minimum memory afterwards [KB] (updateLayerMemoryUsage)."""

    action: MemoryAction
    reserved_kb: int
    layer_min_kb: int


def is_overboard(value: float, total: float, threshold: float) -> bool:
    """HostReportHandler.isOverboard: ``value / total >= (1 + threshold)``."""
    return value / total >= 1 + threshold


def is_frame_overboard(rss_kb: int, max_rss_kb: int, reserved_kb: int, threshold: float) -> bool:
    """HostReportHandler.isFrameOverboard (threshold < 0: never)."""
    if threshold < 0:
        return False
    if is_overboard(rss_kb, reserved_kb, threshold):
        return True
    return (is_overboard(max_rss_kb, reserved_kb, threshold * 2)
            and is_overboard(rss_kb, reserved_kb, -RSS_AVAILABLE_FOR_MAX_RSS_TRIGGER))


def decide(rss_kb: int, max_rss_kb: int, reserved_kb: int, host_idle_kb: int, layer_min_kb: int, *,
           host_used_fraction: float = 0.0,
           overboard_threshold: float = OOM_FRAME_OVERBOARD_ALLOWED_THRESHOLD_DEFAULT) -> MemoryDecision:
    """Rules 1-4 of the module doc for one frame of a host report.

    Args:
        rss_kb, max_rss_kb: the frame's RSS now and its peak, as RQD measured them [KB].
        reserved_kb: the proc's reservation (``proc.memoryReserved``) [KB].
        host_idle_kb: the host's memory no proc has reserved [KB] (what increaseReservedMemory may take).
        layer_min_kb: the layer's minimum memory [KB].
        host_used_fraction: the host's used physical memory / total (rule 1 above 0.9, with this frame
            taken as the worst offender).
        overboard_threshold: ``dispatcher.oom_frame_overboard_allowed_threshold`` (default -1.0: off).
    """
    layer_min = max(layer_min_kb, max_rss_kb)  # updateLayerMemoryUsage -> increaseLayerMinMemory(layer, maxRss)
    if host_used_fraction > OOM_MAX_SAFE_USED_PHYSICAL_MEMORY_THRESHOLD:
        return MemoryDecision(MemoryAction.KILL_MEMORY_FAILURE, reserved_kb, layer_min)
    if overboard_threshold > 0 and is_frame_overboard(rss_kb, max_rss_kb, reserved_kb, overboard_threshold):
        return MemoryDecision(MemoryAction.KILL_MEMORY_FAILURE, reserved_kb, layer_min)
    if rss_kb > reserved_kb and rss_kb - reserved_kb <= host_idle_kb:
        return MemoryDecision(MemoryAction.RESERVATION_RAISED, rss_kb, layer_min)
    return MemoryDecision(MemoryAction.NONE, reserved_kb, layer_min)

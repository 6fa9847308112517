"""Cuebot's frame-completion rules, for the double: what state a frame goes to when RQD reports it done.

Mirrors ``FrameCompleteHandler.determineFrameState`` of AcademySoftwareFoundation/OpenCue (cuebot/src/
main/java/com/imageworks/spcue/dispatcher/FrameCompleteHandler.java, master of 2026-08-12, commit
1cea9a8d), rule by rule and in its order:

1. a frame already WAITING or EATEN (retried or eaten while it ran) keeps that state;
2. a frame already DEAD goes to EATEN with auto-eat, else DEPEND;
3. exit status 0: SUCCEEDED;
4. exit status ``SKIP_RETRY`` (286), or exit signal 119 when the job has retries: WAITING;
5. ``FAILED_LAUNCH`` (256) status or signal while retries are left: WAITING;
6. the host is NIMBY-locked and the exit signal is 15: WAITING, past the retry limit;
7. auto-eat: EATEN;
8. (``dispatcher.layer_delay.rules``: off by default, not modelled);
9. last-log-update timeout: ``timeout_llu`` minutes without a log line: DEAD;
10. layer timeout: run time above ``timeout`` minutes: DEAD;
11. run time above ``Dispatcher.FRAME_TIME_NO_RETRY``: DEAD, whatever the retries. The constant was
    ``3600 * 8`` (8 h) until OpenCue PR #2169 ("increase NO_RETRY_LIMIT", merged 2026-02) and is
    ``3600 * 12`` (12 h) from it on; studios run both, so it is a parameter (:class:`CuebotRules`);
12. out of retries and not a memory failure: DEAD;
13. else WAITING.

A memory failure (exit status 33 ``EXIT_STATUS_MEMORY_FAILURE`` or 137
``DOCKER_EXIT_STATUS_MEMORY_FAILURE``, exit signal 33, or 33 stored on the frame by a Cuebot memory
kill) skips rule 12, so the frame is retried whatever ``max_retries`` says, and
``retryFrameWithRaisedMemory`` raises the layer's minimum memory to the proc's reservation + 2 GB
(``getMemoryIncrease``'s default when no service override exists).

The retry limit a job spec can ask for is bounded in ``JobSpec`` (``FRAME_RETRIES_MAX = 1``,
``FRAME_RETRIES_MIN = 0``, cuebot/src/main/java/com/imageworks/spcue/service/JobSpec.java); the
double's jobspec.py applies it. OpenCue issue #2477 asks for that cap to be a per-facility setting,
so it is a parameter of the double too (:class:`CuebotRules`).

Retry count: ``FrameDaoJdbc.updateFrameStarted`` (cuebot/src/main/java/com/imageworks/spcue/dao/
postgres/FrameDaoJdbc.java) runs, right after it sets the frame RUNNING,
``UPDATE frame SET int_retries = int_retries + 1 WHERE pk_frame = ? AND int_exit_status NOT IN
(?,?,?,?,?,?,?)`` bound to ``-1, FrameExitStatus.SKIP_RETRY_VALUE, FrameExitStatus.FAILED_LAUNCH_VALUE,
Dispatcher.EXIT_STATUS_FRAME_CLEARED, Dispatcher.EXIT_STATUS_FRAME_ORPHAN,
Dispatcher.EXIT_STATUS_FAILED_KILL, Dispatcher.EXIT_STATUS_DOWN_HOST``, under the comment "Frames
that were killed via nimby or hardware errors not attributed to the software do not increment the
retry counter. Like failed launch, orphaned frame, failed kill or down host." (:func:`counts_a_retry`).

Down hosts: ``MaintenanceManagerSupport.checkHardwareState`` marks a host DOWN when its last ping is
older than ``HOST_DOWN_INTERVAL`` = 300 s (MaintenanceDaoJdbc) and ``clearDownProcs`` stops each of
its frames through ``DispatchSupportService.lostProc`` with exit status
``EXIT_STATUS_DOWN_HOST`` = 399: the host is confirmed dead, so the frame goes back to WAITING.

Run time: RQD reports one (``FrameCompleteReport.run_time``); the double measures it on its
injectable :class:`Clock` instead, so tests can age a frame without waiting 12 hours.
"""

from __future__ import annotations

import dataclasses
import time

from opencue_proto import job_pb2

FRAME_TIME_NO_RETRY_S_BEFORE_2169 = 3600 * 8  # Dispatcher.FRAME_TIME_NO_RETRY before OpenCue PR #2169
FRAME_TIME_NO_RETRY_S_SINCE_2169 = 3600 * 12  # Dispatcher.FRAME_TIME_NO_RETRY from OpenCue PR #2169 on
FRAME_TIME_NO_RETRY_S = FRAME_TIME_NO_RETRY_S_SINCE_2169  # the double's default: current Cuebot
FRAME_RETRIES_MAX_JOBSPEC = 1  # JobSpec.FRAME_RETRIES_MAX (a facility setting if OpenCue #2477 lands)
EXIT_STATUS_MEMORY_FAILURE = 33  # Dispatcher.EXIT_STATUS_MEMORY_FAILURE
DOCKER_EXIT_STATUS_MEMORY_FAILURE = 137  # Dispatcher.DOCKER_EXIT_STATUS_MEMORY_FAILURE
EXIT_STATUS_DOWN_HOST = 399  # Dispatcher.EXIT_STATUS_DOWN_HOST
MEMORY_INCREASE_KB = 2 * 1024 * 1024  # CueUtil.GB2, getMemoryIncrease's default [KB]
HOST_DOWN_INTERVAL_S = 300  # MaintenanceDaoJdbc.HOST_DOWN_INTERVAL
NIMBY_KILL_SIGNAL = 15  # determineFrameState: getNimbyLocked() && getExitSignal() == 15
SKIP_RETRY = job_pb2.FrameExitStatus.Value("SKIP_RETRY")  # 286
FAILED_LAUNCH = job_pb2.FrameExitStatus.Value("FAILED_LAUNCH")  # 256
EXIT_STATUS_FRAME_CLEARED = 299  # Dispatcher.EXIT_STATUS_FRAME_CLEARED (updateFrameCleared)
EXIT_STATUS_FRAME_ORPHAN = 301  # Dispatcher.EXIT_STATUS_FRAME_ORPHAN
EXIT_STATUS_FAILED_KILL = 302  # Dispatcher.EXIT_STATUS_FAILED_KILL
# FrameDaoJdbc.updateFrameStarted's UPDATE_FRAME_RETRIES: "int_exit_status NOT IN (?,?,?,?,?,?,?)"
NO_RETRY_EXIT_STATUSES = frozenset({-1, SKIP_RETRY, FAILED_LAUNCH, EXIT_STATUS_FRAME_CLEARED,
                                    EXIT_STATUS_FRAME_ORPHAN, EXIT_STATUS_FAILED_KILL, EXIT_STATUS_DOWN_HOST})


@dataclasses.dataclass(frozen=True)
class CuebotRules:
    """The Cuebot settings that differ between versions and facilities.

    Attributes:
        frame_time_no_retry_s: a failed frame that ran longer than this is DEAD whatever its retries
            [s]; ``FRAME_TIME_NO_RETRY_S_BEFORE_2169`` (8 h) or ``FRAME_TIME_NO_RETRY_S_SINCE_2169`` (12 h).
        frame_retries_max: the cap on a job's ``maxretries`` (``JobSpec.FRAME_RETRIES_MAX`` = 1;
            OpenCue #2477 makes it per facility) [retries].
    """

    frame_time_no_retry_s: int = FRAME_TIME_NO_RETRY_S_SINCE_2169
    frame_retries_max: int = FRAME_RETRIES_MAX_JOBSPEC


CUEBOT_BEFORE_2169 = CuebotRules(frame_time_no_retry_s=FRAME_TIME_NO_RETRY_S_BEFORE_2169)
CUEBOT_SINCE_2169 = CuebotRules()


def counts_a_retry(stored_exit_status: int) -> bool:
    """Whether starting a frame whose last exit status is ``stored_exit_status`` adds one to its retry
    count (FrameDaoJdbc.updateFrameStarted, UPDATE_FRAME_RETRIES: NOT IN NO_RETRY_EXIT_STATUSES)."""
    return stored_exit_status not in NO_RETRY_EXIT_STATUSES


class Clock:
    """The double's wall clock [s since the epoch]: ``time.time()`` plus an offset tests advance."""

    def __init__(self) -> None:
        self.offset_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset_s

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        self.offset_s += seconds


@dataclasses.dataclass(frozen=True)
class Completion:
    """What RQD's FrameCompleteReport says, plus the run time measured on the double's clock.

    Attributes:
        exit_status: the frame's exit status (RQD: 1 when killed by a signal).
        exit_signal: the signal that killed it (0 when it exited).
        run_time_s: how long the run took [s].
        llu_time: last log update, seconds since the epoch (0: unknown).
        nimby_locked: the host was NIMBY-locked when the frame ended.
    """

    exit_status: int
    exit_signal: int = 0
    run_time_s: float = 0.0
    llu_time: int = 0
    nimby_locked: bool = False


def is_memory_failure(done: Completion, stored_exit_status: int = -1) -> bool:
    """FrameCompleteHandler.isMemoryFailure(report, frameDetail)."""
    return (done.exit_status in (EXIT_STATUS_MEMORY_FAILURE, DOCKER_EXIT_STATUS_MEMORY_FAILURE)
            or done.exit_signal == EXIT_STATUS_MEMORY_FAILURE
            or stored_exit_status == EXIT_STATUS_MEMORY_FAILURE)


def determine_frame_state(state: int, retries: int, max_retries: int, auto_eat: bool, timeout_min: int,
                          timeout_llu_min: int, done: Completion, now: float, stored_exit_status: int = -1,
                          no_retry_s: int = FRAME_TIME_NO_RETRY_S) -> int:
    """The frame's next state (a ``job_pb2.FrameState``), rules 1-13 of the module doc.

    Args:
        state: the frame's state when the report arrives.
        retries: the frame's retry count; max_retries: the job's (already bounded) limit.
        timeout_min, timeout_llu_min: the layer's timeouts [minutes] (0: none).
        now: the double's clock [s since the epoch].
        no_retry_s: Dispatcher.FRAME_TIME_NO_RETRY of the Cuebot modelled [s] (:class:`CuebotRules`).
    """
    if state in (job_pb2.WAITING, job_pb2.EATEN):
        return state
    if state == job_pb2.DEAD:
        return job_pb2.EATEN if auto_eat else job_pb2.DEPEND
    if done.exit_status == 0:
        return job_pb2.SUCCEEDED
    if done.exit_status == SKIP_RETRY or (max_retries != 0 and done.exit_signal == 119):
        return job_pb2.WAITING
    if FAILED_LAUNCH in (done.exit_status, done.exit_signal) and retries < max_retries:
        return job_pb2.WAITING
    if done.nimby_locked and done.exit_signal == NIMBY_KILL_SIGNAL:
        return job_pb2.WAITING
    if auto_eat:
        return job_pb2.EATEN
    minutes_since_llu = (int(now) - done.llu_time) // 60
    if timeout_llu_min and done.llu_time and minutes_since_llu > timeout_llu_min - 1:
        return job_pb2.DEAD
    if timeout_min and done.run_time_s > timeout_min * 60:
        return job_pb2.DEAD
    if done.run_time_s > no_retry_s:
        return job_pb2.DEAD
    if retries >= max_retries and not is_memory_failure(done, stored_exit_status):
        return job_pb2.DEAD
    return job_pb2.WAITING

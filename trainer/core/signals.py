"""The signal policy: what each cuetrain process does on each signal, and the exit code that follows.

One table, :data:`POLICY`, beside the timeout table (:mod:`trainer.core.timeouts`: how long a process has
between SIGTERM and SIGKILL). Every process installs its handlers through :func:`install`, which takes the
signals from this table, and ends through :func:`exit_rank` / :func:`die_by`.

==========  ========  ===========  ==============================================================================
process     signal    action       what follows
==========  ========  ===========  ==============================================================================
rank        SIGTERM   stop         the gang agrees on a step, rank 0 writes its checkpoint: exit 75 (``STOPPED``);
                                   past the grace (``--stop-grace-s``) the watchdog exits 76 (``STOP_TIMEOUT``)
rank        SIGINT    stop         as SIGTERM (Ctrl-C on ``cuetrain train``)
rank        SIGUSR1   regroup      stop at the next periodic checkpoint: exit 79 (``REGROUP``); no grace
supervisor  SIGTERM   pass on      SIGTERM to every rank, SIGKILL after ``GRACE.kill_after_s()`` (timeouts);
                                   the exit code is the ranks' (75 when they checkpointed)
supervisor  SIGINT    interrupt    Python's ``KeyboardInterrupt``: the ranks are stopped as for SIGTERM, then the
                                   process ends by SIGINT (exit 130 to a shell)
rank        SIGKILL   (none)       sent by the kernel when its supervisor dies (:func:`die_with_supervisor`)
==========  ========  ===========  ==============================================================================

A rank is ``python -m trainer`` (:class:`trainer.gang.stopvote.StopSignal`); a supervisor is ``cuetrain local``
or a farm frame's node agent (:func:`trainer.agent.supervise.run_ranks`). SIGKILL cannot be caught: RQD kills
frames with ``os.killpg(pid, 9)`` (AcademySoftwareFoundation/OpenCue rqd/rqd/rqnetwork.py
``RunningFrame.kill``), so a killed frame resumes from its latest periodic checkpoint
(docs/failure_handling.md). A supervisor killed alone (``kill -9`` of ``cuetrain local``, of a frame's agent)
takes its ranks with it: each rank asks the kernel for SIGKILL when its parent dies (:func:`die_with_supervisor`),
so no orphaned gang trains on, and writes the run directory, beside the gang a restarted supervisor starts.
Stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Mapping, NoReturn

from trainer.core.exitcodes import ExitCode

Handler = Callable[[int, Any], None]
log = logging.getLogger(__name__)

#: the variable a supervisor sets to its pid for each rank it starts (read by trainer.core.envvars.read_agent_pid_env)
SUPERVISOR_PID_VAR = "CUETRAIN_AGENT_PID"
#: ``prctl(2)`` option: the signal this process gets when its parent thread dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


class Process(Enum):
    """Which kind of cuetrain process a rule is for."""

    RANK = "rank"  # python -m trainer: one rank of a gang
    SUPERVISOR = "supervisor"  # cuetrain local, a farm frame's node agent


class Action(Enum):
    """What a process does on a signal."""

    STOP = "stop"  # agree on a step, checkpoint, exit
    REGROUP = "regroup"  # stop at the next periodic checkpoint
    PASS_ON = "pass on"  # signal every rank, SIGKILL after the grace table's margin
    INTERRUPT = "interrupt"  # KeyboardInterrupt (Python's default SIGINT handler)


@dataclass(frozen=True)
class Rule:
    """One row of the policy.

    Attributes:
        process: the kind of process.
        signum: the signal.
        action: what the process does.
        exit_code: the exit status that follows, or None where it is the ranks' own (a supervisor passing on).
        timeout_exit_code: the exit status when the action does not finish within its grace, else None.
    """

    process: Process
    signum: signal.Signals
    action: Action
    exit_code: int | None
    timeout_exit_code: int | None = None


#: The one signal table (module docstring).
POLICY: tuple[Rule, ...] = (
    Rule(Process.RANK, signal.SIGTERM, Action.STOP, int(ExitCode.STOPPED), int(ExitCode.STOP_TIMEOUT)),
    Rule(Process.RANK, signal.SIGINT, Action.STOP, int(ExitCode.STOPPED), int(ExitCode.STOP_TIMEOUT)),
    Rule(Process.RANK, signal.SIGUSR1, Action.REGROUP, int(ExitCode.REGROUP)),
    Rule(Process.SUPERVISOR, signal.SIGTERM, Action.PASS_ON, None),
    Rule(Process.SUPERVISOR, signal.SIGINT, Action.INTERRUPT, 128 + signal.SIGINT),
)


def signals_for(process: Process, action: Action) -> tuple[signal.Signals, ...]:
    """The signals on which ``process`` takes ``action``, in table order (e.g. RANK, STOP -> SIGTERM, SIGINT)."""
    return tuple(rule.signum for rule in POLICY if rule.process is process and rule.action is action)


def rule_for(process: Process, signum: int) -> Rule:
    """The table's row for ``signum`` in ``process``; raises KeyError for a signal the policy does not handle."""
    for rule in POLICY:
        if rule.process is process and rule.signum == signum:
            return rule
    raise KeyError(f"no signal rule for {process.value} and signal {signum}")


def rank_exit_code(signum: int, *, timeout: bool = False) -> int:
    """The exit code a rank ends with after ``signum`` (``timeout``: when the action overran its grace).

    Raises:
        KeyError: the policy gives a rank no such code for ``signum``.
    """
    rule = rule_for(Process.RANK, signum)
    code = rule.timeout_exit_code if timeout else rule.exit_code
    if code is None:
        raise KeyError(f"no {'timeout ' if timeout else ''}exit code for a rank and signal {signum}")
    return code


def install(process: Process, handlers: Mapping[Action, Handler]) -> dict[int, Any]:
    """Install ``handlers`` (by action) on every signal the policy gives ``process`` for that action.

    An action without a handler keeps the process's current one (:data:`Action.INTERRUPT` is Python's own
    ``KeyboardInterrupt``, which the supervisors catch). Returns the previous handlers for :func:`restore`;
    from a thread other than the main thread (where Python delivers signals) it installs nothing and
    returns ``{}``.

    Raises:
        ValueError: ``handlers`` names an action the policy does not give ``process``.
    """
    if threading.current_thread() is not threading.main_thread():
        return {}
    actions = {rule.action for rule in POLICY if rule.process is process}
    unknown = set(handlers) - actions
    if unknown:
        raise ValueError(f"{process.value} has no signal rule for {sorted(a.value for a in unknown)}")
    previous: dict[int, Any] = {}
    for rule in POLICY:
        if rule.process is process and rule.action in handlers:
            previous[int(rule.signum)] = signal.signal(rule.signum, handlers[rule.action])
    return previous


def restore(previous: Mapping[int, Any]) -> None:
    """Put back the handlers :func:`install` replaced."""
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def die_by(signum: int) -> NoReturn:
    """End this process by ``signum`` with its default action (a shell then sees 128 + signum)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # not reached for a signal whose default action ends the process


def exit_rank(entry: Callable[[], int]) -> NoReturn:
    """Run ``entry`` and end the process with its exit code, skipping interpreter finalization.

    Why: a rank that has left its process group still holds torch's C++ threads and objects (gloo's, the
    TCPStore's); when Python finalizes the interpreter their destructors can race it and abort the process
    ("terminate called without an active exception", SIGABRT: exit 134), which a farm frame reads as a failed
    rank (a crash of the same kind is described in pytorch/pytorch#179291). Every file a rank owns (run.json,
    checkpoints, model files, the failure record) is written atomically before ``entry`` returns, so nothing
    is lost by ending with ``os._exit`` after flushing the logs and streams.

    Exit codes are those Python itself would give: ``entry``'s return value or ``SystemExit`` code (a message
    instead of a code is printed and gives 1); an uncaught exception prints its traceback and gives 1; an
    uncaught ``KeyboardInterrupt`` ends the process by SIGINT, as Python does (:func:`die_by`).
    """
    interrupted = False
    try:
        code = entry()
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        interrupted, code = True, 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - what Python prints and exits 1 for, without finalization after it
        traceback.print_exc()
        code = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if interrupted:
        die_by(signal.SIGINT)
    os._exit(int(code))


def die_with_supervisor(supervisor_pid: int | None) -> bool:
    """Make this rank die by SIGKILL when its supervisor (``supervisor_pid``) dies; end it now if it is already gone.

    ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux, prctl(2)): the kernel sends the signal when the thread that started
    this process exits, which is the supervisor's main thread (:func:`trainer.agent.supervise.run_ranks` runs there:
    it installs signal handlers). The setting survives ``execve``, and is checked against a supervisor that died
    before the call: when the parent is no longer ``supervisor_pid`` and that process is gone, the rank kills itself
    at once. A parent that is not the supervisor while the supervisor lives (a wrapper command between them) is
    left as it is: the rank then dies with the wrapper. Call it first thing in the rank, before any import of torch.

    Args:
        supervisor_pid: the supervisor's pid (``CUETRAIN_AGENT_PID``), None when no supervisor started this process
            (``cuetrain train`` run by hand): then nothing is done.

    Returns:
        True when the death signal is set; False without a supervisor or off Linux (logged at debug).
    """
    if supervisor_pid is None:
        return False
    if not sys.platform.startswith("linux"):
        log.debug("no parent-death signal on %s: a rank outlives a killed supervisor here", sys.platform)
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_PDEATHSIG) failed (errno %d): this rank would outlive a killed supervisor",
                    ctypes.get_errno())
        return False
    if os.getppid() != supervisor_pid and not pid_alive(supervisor_pid):
        os.kill(os.getpid(), signal.SIGKILL)  # the supervisor died before the call: as if a moment later
    return True


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (``kill(pid, 0)``, kill(2); another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that pid: alive
        return True
    return True

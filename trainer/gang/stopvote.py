"""Stopping on SIGTERM/SIGINT (exit 75) and regrouping on SIGUSR1 (exit 79 at the next periodic checkpoint).

Who sends SIGTERM, and how long before SIGKILL (the grace a checkpoint must fit in):

- OpenCue itself never does: RQD kills a frame (a Cuebot kill, a NIMBY lock, RQD's shutdown) with
  ``os.killpg(pid, KILL_SIGNAL)``, ``KILL_SIGNAL = 9`` (AcademySoftwareFoundation/OpenCue
  rqd/rqd/rqnetwork.py ``RunningFrame.kill``, rqd/rqd/rqconstants.py; ``RqCore.killAllFrame`` in
  rqd/rqd/rqcore.py calls it for NIMBY and shutdown), and Cuebot only asks RQD for that kill
  (``RqdClient.killFrame``): 0 s, nothing can be saved, the frame resumes from the latest periodic
  checkpoint.
- The machine around it does: systemd stops services and user sessions with SIGTERM and sends
  SIGKILL after ``DefaultTimeoutStopSec`` = 90 s (systemd-system.conf(5)); Kubernetes waits
  ``terminationGracePeriodSeconds`` = 30 s (Pod lifecycle docs); ``docker stop`` 10 s unless
  ``--time``/``stop_grace_period`` is set (docker CLI reference); a wrangler's ``kill PID``.
- cuetrain's own supervisors (``cuetrain local`` on Ctrl-C, a frame passing on its SIGTERM) wait
  :data:`SUPERVISOR_GRACE_S`, more than the default grace, before SIGKILL.

So the default grace is :data:`DEFAULT_GRACE_S` = 20 s (``--stop-grace-s``): under Kubernetes' 30 s
and systemd's 90 s; containers run with ``docker stop --time 30`` or more.

Agreement (:class:`GangStop`): at the end of every step each rank starts an asynchronous MAX
all-reduce of its vote :class:`Vote` (0 none, 1 regroup, 2 stop now: one int32) on a gloo (CPU)
group and waits for the one it started a step before. All ranks see the same sums in the same order, so they agree on the step without
a GPU sync and without waiting on the network (the reduce runs behind a whole step's compute).
The stop happens at the first optimizer-update step after the vote (no gradients pending), so a
SIGTERM to ANY rank stops the whole gang at the same step, 1 to ``sync_interval`` steps later.

Regroup (SIGUSR1, :data:`REGROUP_SIGNAL`): the node agent of an elastic gang asks its trainers to
stop so the gang can be re-formed at another world size. It is not a stop: there is no grace and
no watchdog, training goes on to the step at which the next periodic checkpoint is due (the same
``--checkpoint-interval`` rule on every rank), rank 0 writes that checkpoint, and every rank exits
79 (:class:`Regroup`, :data:`trainer.core.exitcodes.ExitCode.REGROUP`). The vote keeps running after the
gang agreed on 1, so a SIGTERM before that checkpoint still escalates to 2 (stop at once, exit 75).

Grace (:class:`StopSignal`): CPython runs Python signal handlers only between bytecodes of the main
thread, which may sit in a hung collective. So the handler's C part also writes the signal number
to a pipe (``signal.set_wakeup_fd``), and a watchdog thread reading that pipe ends the process with
exit code 76 (:data:`trainer.core.exitcodes.ExitCode.STOP_TIMEOUT`) if the checkpoint is not written
within the grace period.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import sys
import threading
import time
from enum import IntEnum
from typing import Any, Callable

from trainer.record import runrecord
from trainer.core import signals
from trainer.core.timeouts import GRACE
from trainer.record.rundir import RunPaths

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = GRACE.checkpoint_s  # seconds from SIGTERM/SIGINT to exit (checkpoint included)
SUPERVISOR_GRACE_S = GRACE.kill_after_s()  # seconds cuetrain's supervisors wait before SIGKILL (trainer.core.timeouts)
SIGNALS = signals.signals_for(signals.Process.RANK, signals.Action.STOP)  # stop now (vote 2), under the watchdog
REGROUP_SIGNAL = signals.signals_for(signals.Process.RANK, signals.Action.REGROUP)[0]  # vote 1; no watchdog


class Vote(IntEnum):
    """One rank's (and, after the MAX all-reduce, the gang's) stop level; higher wins."""

    NONE = 0
    REGROUP = 1  # SIGUSR1 seen: stop at the next periodic checkpoint, exit 79
    STOP = 2  # SIGTERM/SIGINT seen: stop at the next update step, exit 75


class StopTraining(Exception):
    """The gang stopped at ``step`` after SIGTERM/SIGINT (rank 0 wrote the checkpoint); exit code 75."""

    exit_code = signals.rank_exit_code(SIGNALS[0])  # the policy's table (trainer.core.signals)
    timeout_code = signals.rank_exit_code(SIGNALS[0], timeout=True)  # the watchdog's, when the grace runs out

    def __init__(self, step: int, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name if signum else 'a peer'} at step {step}; "
                         "the checkpoint of that step is written: --resume (or the farm's retry) continues there")
        self.step, self.signum = step, signum


class Regroup(StopTraining):
    """The gang stopped at the periodic checkpoint of ``step`` after SIGUSR1 (rank 0 wrote it); exit code 79.

    ``--resume`` continues from that checkpoint at any world size (crops are drawn from (seed, step)
    and split across ranks, see :mod:`trainer.data.crops`).
    """

    exit_code = signals.rank_exit_code(REGROUP_SIGNAL)

    def __init__(self, step: int) -> None:
        Exception.__init__(self, f"regrouping at step {step} (SIGUSR1: the node agent re-forms the gang); the "
                                 "checkpoint of that step is written: --resume at any world size continues there")
        self.step, self.signum = step, int(REGROUP_SIGNAL)


class StopSignal:
    """Traps SIGTERM and SIGINT for this process; :attr:`signum` is the first one received (0: none).

    Also traps SIGUSR1 (:data:`REGROUP_SIGNAL`): :attr:`regroup_requested` turns True; no grace applies.

    Args:
        grace_s: seconds from the signal to a forced exit [s].
        on_timeout: called by the watchdog before the forced exit (e.g. record it in run.json).

    Use as a context manager from the main thread; leaving restores the previous handlers.
    """

    def __init__(self, grace_s: float = DEFAULT_GRACE_S, on_timeout: Callable[[], None] | None = None) -> None:
        self.grace_s = grace_s
        self.on_timeout = on_timeout
        self.signum = 0
        self.regroup_requested = False  # SIGUSR1 received
        self.received_at = 0.0  # time.monotonic() of the first signal
        self._done = threading.Event()
        self._previous: dict[int, Any] = {}
        self._old_fd = -1
        self._pipe: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "StopSignal":
        if threading.current_thread() is not threading.main_thread():
            return self  # signals are delivered to the main thread only; nothing to trap here
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._previous = signals.install(signals.Process.RANK, {signals.Action.STOP: self._handler,
                                                                signals.Action.REGROUP: self._regroup_handler})
        self._old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="stop-watchdog", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        """Restore the handlers and stop the watchdog (idempotent)."""
        self._done.set()
        if self._pipe is None:
            return
        signal.set_wakeup_fd(self._old_fd)
        signals.restore(self._previous)
        os.write(self._pipe[1], b"\0")  # wake the watchdog so it sees _done
        if self._thread is not None:
            self._thread.join(timeout=5)
        for fd in self._pipe:
            os.close(fd)
        self._pipe = None

    @property
    def vote(self) -> Vote:
        """This process's own level: STOP after SIGTERM/SIGINT, else REGROUP after SIGUSR1, else NONE."""
        if self.signum:
            return Vote.STOP
        return Vote.REGROUP if self.regroup_requested else Vote.NONE

    def _handler(self, signum: int, frame: Any) -> None:
        if not self.signum:
            self.signum = signum

    def _regroup_handler(self, signum: int, frame: Any) -> None:
        self.regroup_requested = True

    def _watch(self) -> None:
        assert self._pipe is not None  # set before the thread starts
        r = self._pipe[0]
        deadline = None
        while not self._done.is_set():
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([r], [], [], wait)
            if ready:
                data = os.read(r, 64)
                if int(REGROUP_SIGNAL) in data:
                    log.warning("SIGUSR1 received: the gang regroups at the next periodic checkpoint")
                if deadline is None and any(b in (int(s) for s in SIGNALS) for b in data):
                    self.received_at = time.monotonic()
                    deadline = self.received_at + self.grace_s
                    log.warning("signal received: stopping at the next step the gang agrees on "
                                "(checkpoint within %.0f s)", self.grace_s)
            elif deadline is not None and time.monotonic() >= deadline and not self._done.is_set():
                self._force_exit()

    def _force_exit(self) -> None:
        log.error("no checkpoint within the %.0f s stop grace period (a hung collective or a slow disk?); exiting "
                  "with code %d, resume continues from the previous checkpoint", self.grace_s, StopTraining.timeout_code)
        try:
            if self.on_timeout is not None:
                self.on_timeout()
        except Exception as exc:  # noqa: BLE001 - best effort before a forced exit
            log.error("could not record the stop timeout: %s", exc)
        finally:
            logging.shutdown()
            sys.stdout.flush()
            os._exit(StopTraining.timeout_code)

    def finished(self) -> None:
        """The stop completed (checkpoint written): the watchdog will not force an exit."""
        self._done.set()


class GangStop:
    """The gang's vote on stopping (module doc): call :meth:`poll` once per step on every rank.

    Args:
        signal_: this process's :class:`StopSignal`.
        distributed: False for a single process (the local flags decide at once).
        group_factory: makes the gloo process group for the vote (``torch.distributed.new_group``);
            called on every rank, in the same order, when ``distributed``.

    Attributes:
        level: the highest :class:`Vote` the gang agreed on so far (never decreases).
    """

    def __init__(self, signal_: StopSignal, distributed: bool, group_factory: Callable[[], Any] | None = None) -> None:
        self.signal = signal_
        self.level = Vote.NONE
        self._group = group_factory() if distributed and group_factory is not None else None
        self._flag: Any = None
        self._work: Any = None

    @property
    def agreed(self) -> bool:
        """True once the gang agreed to stop now (:attr:`Vote.STOP`)."""
        return self.level == Vote.STOP

    def poll(self) -> Vote:
        """The gang's agreed level (the same on every rank at the same step; 1 step late when distributed).

        One asynchronous int32 MAX all-reduce per call until the gang agrees on STOP; after an agreed
        REGROUP the vote goes on, so a later SIGTERM/SIGINT still escalates to STOP.

        Raises:
            RuntimeError: the vote's collective failed (a rank died): the caller's failure path handles it.
        """
        if self.level == Vote.STOP:
            return self.level
        if self._group is None:
            self.level = max(self.level, self.signal.vote)
            return self.level
        import torch
        import torch.distributed as dist

        if self._work is not None:
            self._work.wait()
            self.level = max(self.level, Vote(int(self._flag.item())))
            if self.level == Vote.STOP:
                self._work = None
                return self.level
        self._flag = torch.tensor([int(self.signal.vote)], dtype=torch.int32)
        self._work = dist.all_reduce(self._flag, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        return self.level

    def close(self) -> None:
        """Wait for the vote still in flight (every rank started the same number), so teardown is clean."""
        work, self._work = self._work, None
        if work is not None:
            try:
                work.wait()
            except Exception as exc:  # noqa: BLE001 - the run is over; a dead peer does not matter now
                log.debug("last stop vote failed: %s", exc)


def record_stop_timeout(paths: RunPaths) -> Callable[[], None]:
    """An ``on_timeout`` for rank 0's :class:`StopSignal`: records ``failure_kind: stop_timeout`` and exit 76."""
    def record() -> None:
        runrecord.update_record(paths, state="failed", failure_kind=runrecord.FailureKind.STOP_TIMEOUT.value,
                                error="no checkpoint within the stop grace period after SIGTERM/SIGINT",
                                exit_code=StopTraining.timeout_code, finished_at=runrecord.now_iso())
    return record

"""The node agent: ONE loop that forms a gang generation, runs its ranks, and decides what comes next.

Every supervisor that can restart a gang is this loop with a different :class:`GangRole`:

* ``cuetrain local`` (:class:`trainer.agent.launch.LocalGang`): every rank on this machine, a reserved port;
* frame 0 of a farm training layer (``cue_plugin`` frame, ``HostGang``): publishes each generation's
  main address, keeps the job's generation count and restart budget in ``run.json`` ``gang``;
* every other frame (``cue_plugin`` frame member, ``MemberGang``): waits for frame 0's publication and
  joins; a gang that failed or went stale is left for frame 0's next generation, never exited.

After torchelastic's ``SimpleElasticAgent._invoke_run`` (``torch.distributed.elastic.agent.server.api``):
a worker group runs until it SUCCEEDED, FAILED (restart it while the budget lasts) or must stop, over one
worker-state enum (:class:`WorkerState`). What is the same for every role is here: the exit-code table
(:func:`classify`), the state machine and the restart budget check. What differs (how a generation forms,
who counts restarts, how long to back off, what to tell the other frames) is the role's.

Imports nothing heavy (no torch, no opencue).
"""

from __future__ import annotations

import enum
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from trainer.record import runrecord
from trainer.core.exitcodes import ExitCode, describe
from trainer.record.rundir import RunPaths
from trainer.agent.supervise import GangExit

log = logging.getLogger(__name__)


class WorkerState(enum.Enum):
    """The state of a node agent's gang (torchelastic's ``WorkerState``, plus REGROUP and STALE)."""

    INIT = "init"  # no generation has run yet
    HEALTHY = "healthy"  # a generation's ranks are running
    SUCCEEDED = "succeeded"  # every rank exited 0: training is over, the agent exits 0
    REGROUP = "regroup"  # the gang stopped at a checkpoint to change size: next generation, no restart counted
    FAILED = "failed"  # the gang failed: next generation with --resume, one restart counted
    STALE = "stale"  # (frames > 0) this frame's gang is gone or refused it: join the next one, nothing counted
    STOPPED = "stopped"  # a restart cannot help, or the agent itself was stopped: exit with the code


#: Exit codes after which a restart cannot help (trainer.core.exitcodes). GANG (3: the gang could not
#: form: incomplete, unreachable, port in use, network) keeps its own handling: frame 0 fails the
#: layer on an incomplete gang, and a bad address is no better on the next try.
NO_RESTART = frozenset({ExitCode.USAGE, ExitCode.GANG, ExitCode.PORT_UNAVAILABLE, ExitCode.DIVERGED,
                        ExitCode.NO_TRAINER})


def classify(code: int, *, terminated: bool) -> WorkerState:
    """The one exit-code table: the gang's state after it exited with ``code`` (the first failed rank's;
    0 = every rank succeeded).

    ``terminated``: the agent itself got SIGTERM (it passed it on; the trainer checkpointed and exited
    75/76): it stops, and Cuebot's retry, the wrangler or the user decides what comes next.
    """
    if code == ExitCode.OK:
        return WorkerState.SUCCEEDED
    if terminated or code in NO_RESTART:
        return WorkerState.STOPPED
    if code == ExitCode.REGROUP:
        return WorkerState.REGROUP
    return WorkerState.FAILED  # RANK_LOST, REJECTED, a peer's STOPPED/STOP_TIMEOUT, a crash (1), a signal (128+n)


def completed_step(paths: RunPaths, since: float) -> int | None:
    """The last step when ``run.json`` records the run as succeeded at its configured last step, at or after
    ``since`` (epoch seconds), else None.

    Rank 0 records that only after its last checkpoint and the model export (trainer.learn.train), so a rank that
    fails after it (killed or aborted while leaving the process group) leaves nothing to train again. A success
    recorded before ``since`` is an earlier job's (a finished run resumed with more ``--steps``): it does not count.
    """
    record = runrecord.read_record_or_empty(paths)
    done = record.state == "succeeded" and record.final_step == record.config.get("steps") and \
        bool(record.finished_at) and datetime.fromisoformat(record.finished_at).timestamp() >= int(since)
    return record.final_step if done and record.final_step is not None else None


def judge_exit(generation: Generation, result: GangExit, paths: RunPaths) -> tuple[WorkerState, int]:
    """:func:`classify` for a gang that trains the run in ``paths``, and its exit code; a gang that FAILED after
    it recorded the run as complete (:func:`completed_step` since the generation formed) SUCCEEDED, code 0: a
    restart would find nothing to train, and frames that had already exited 0 would leave its gang incomplete
    (seen once: rank 0 aborted in interpreter finalization after training, before trainer.core.signals.exit_rank).
    """
    state = classify(result.code, terminated=result.terminated)
    if state is WorkerState.FAILED and (step := completed_step(paths, generation.formed_at)) is not None:
        log.warning("rank %s exited %d (%s) after run.json recorded the run as succeeded at step %d: the run is "
                    "complete, nothing to restart", result.rank, result.code, describe(result.code), step)
        return WorkerState.SUCCEEDED, 0
    return state, result.code


@dataclass(frozen=True)
class Generation:
    """One formed gang, ready to start.

    Attributes:
        number: the generation (1 = the first gang of the run or job) [count].
        resume: the ranks start with ``--resume`` (continue from the latest checkpoint).
        restarts: restarts counted so far, this generation's included [count]; the agent compares it with
            the budget when the generation FAILED.
        detail: the role's own data (frame 0's and members' publication; None for a local gang).
        formed_at: when the role formed it [s since the epoch].
    """

    number: int
    resume: bool
    restarts: int = 0
    detail: Any = None
    formed_at: float = field(default_factory=time.time, compare=False)


@dataclass(frozen=True)
class Ended:
    """How a generation ended: its ranks' result, the state it left, and the agent's exit code should it stop."""

    generation: Generation
    result: GangExit
    state: WorkerState
    code: int


class GangRole(Protocol):
    """What differs between the node agents (local gang, frame 0, other frames)."""

    counts_restarts: bool  # this agent spends the restart budget (frames > 0 leave it to frame 0)

    def form(self, previous: Ended | None) -> Generation | int:
        """The next generation (``previous``: how the last one ended; None at the start), or an exit code."""

    def run(self, generation: Generation) -> GangExit:
        """Start the generation's ranks and wait until they end."""

    def judge(self, generation: Generation, result: GangExit) -> tuple[WorkerState, int]:
        """The state the generation left and the agent's exit code should it stop (usually :func:`classify`)."""

    def stopped(self, ended: Ended) -> int:
        """The agent stops (STOPPED): tell whoever must know; returns the exit code."""

    def budget_spent(self, ended: Ended, max_restarts: int) -> int:
        """The gang FAILED with the restart budget spent: tell whoever must know; returns the exit code."""

    def pause(self, ended: Ended) -> float:
        """Before the next generation: log why there is one; returns the seconds to wait (backoff) [s]."""


class NodeAgent:
    """Runs gang generations through a :class:`GangRole` until training succeeds or must stop.

    Args:
        role: how this agent's generations form, run and end.
        max_restarts: generations started because the previous one FAILED, allowed per run or job [count]
            (regroups and stale gangs are not counted); checked only when ``role.counts_restarts``.

    Attributes:
        state: the current :class:`WorkerState` (for logs and tests).
    """

    def __init__(self, role: GangRole, max_restarts: int) -> None:
        self.role = role
        self.max_restarts = max_restarts
        self.state = WorkerState.INIT

    def run(self) -> int:
        """Loop: form, run, judge; returns the agent's exit code (0 when training finished)."""
        previous: Ended | None = None
        while True:
            generation = self.role.form(previous)
            if isinstance(generation, int):
                return generation
            self.state = WorkerState.HEALTHY
            result = self.role.run(generation)
            state, code = self.role.judge(generation, result)
            ended = Ended(generation, result, state, code)
            self.state = state
            if state is WorkerState.SUCCEEDED:
                return 0
            if state is WorkerState.STOPPED:
                return self.role.stopped(ended)
            if state is WorkerState.FAILED and self.role.counts_restarts and \
                    generation.restarts >= self.max_restarts:
                return self.role.budget_spent(ended, self.max_restarts)
            delay = self.role.pause(ended)
            if delay > 0:
                time.sleep(delay)
            previous = ended

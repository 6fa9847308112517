"""What a node agent does when its ranks exit: the one exit-code -> action table.

Read by every supervisor that can restart a gang: a farm frame's node agent (``cue_plugin.node.frame``,
``cue_plugin.node.frame_member``) and ``cuetrain local`` (:mod:`trainer.launch`), so a local run and a farm
frame follow the same rules (after torchelastic's ``SimpleElasticAgent._invoke_run``: a failed worker
group restarts, a stopped one does not). Exit codes are those of :mod:`trainer.exitcodes`.

Imports nothing heavy (no torch, no opencue).
"""

from __future__ import annotations

import enum

from trainer.exitcodes import ExitCode


class Action(enum.Enum):
    """What a node agent does after its trainers exited."""

    FINISH = "finish"  # training is over (exit 0): the agent exits 0
    REGROUP = "regroup"  # the gang stopped at a checkpoint to change size: next generation, no restart counted
    RESTART = "restart"  # the gang failed: next generation with --resume, one restart counted
    EXIT = "exit"  # a restart cannot help (bad settings, the agent itself was stopped): exit with the code


#: Exit codes after which a restart cannot help (trainer.exitcodes). GANG (3: the gang could not
#: form: incomplete, unreachable, port in use, network) keeps its own handling: frame 0 fails the
#: layer on an incomplete gang, and a bad address is no better on the next try.
NO_RESTART = frozenset({ExitCode.USAGE, ExitCode.GANG, ExitCode.PORT_UNAVAILABLE, ExitCode.NO_TRAINER})


def classify(code: int, *, terminated: bool) -> Action:
    """The agent's action for a gang exit ``code`` (the first failed rank's; 0 = all succeeded).

    ``terminated``: the agent itself got SIGTERM (it passed it on; the trainer checkpointed and exited
    75/76): the agent exits, and Cuebot's retry, the wrangler or the user decides what comes next.
    """
    if code == ExitCode.OK:
        return Action.FINISH
    if terminated or code in NO_RESTART:
        return Action.EXIT
    if code == ExitCode.REGROUP:
        return Action.REGROUP
    return Action.RESTART  # RANK_LOST, REJECTED, a peer's STOPPED/STOP_TIMEOUT, a crash (1), a signal (128+n)

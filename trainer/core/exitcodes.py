"""Every exit code of ``cuetrain train``, ``cuetrain local`` and a farm frame, in one table.

Imports nothing heavy (no torch, no Qt, no opencue): the trainer, the frame entry point, the farm
backend and the GUI read the same table.

Why these numbers. A farm frame's exit status goes to Cuebot, whose
``FrameCompleteHandler.determineFrameState`` (AcademySoftwareFoundation/OpenCue,
cuebot/src/main/java/com/imageworks/spcue/dispatcher/FrameCompleteHandler.java) treats some
statuses specially:

- 33 (``Dispatcher.EXIT_STATUS_MEMORY_FAILURE``) and 137 (``DOCKER_EXIT_STATUS_MEMORY_FAILURE``,
  128 + SIGKILL) are memory failures: the frame is retried whatever the retry limit says and the
  layer's memory reservation is raised (by 2 GB or the service's ``min_memory_increase``);
- RQD reports 256 for a failed launch and 286 for a NIMBY kill (rqd/rqd/rqconstants.py).

So cuetrain never chooses 33 or 137 itself: a rank stopped by SIGTERM/SIGINT after writing its
checkpoint exits :data:`STOPPED` = 75 (``EX_TEMPFAIL`` of BSD ``sysexits.h``: "a temporary failure;
the user is invited to retry"). A frame still exits 128 + N when its trainer was killed by signal N
(a trainer SIGKILLed by the kernel's OOM killer really is a memory failure; see
docs/failure_handling.md).

:data:`REGROUP` = 79 (a gang stopped at a periodic checkpoint because the node agent sent SIGUSR1 to
re-form it at another world size) must not be mistaken for any of those: not 33 or 137 (Cuebot would
raise the layer's memory), not 128 + N (that reads as "killed by signal N"; 128 + SIGUSR1 = 138 would
say the trainer died of SIGUSR1), and not 64-78, the range BSD ``sysexits.h`` assigns (``EX_USAGE`` 64
to ``EX_CONFIG`` 78), so no tool reads a sysexits meaning into it. 79 is the first free code above
that range, next to our own 75/76. :data:`DATA_CHANGED` = 80 and :data:`DIVERGED` = 81 follow it for the same
reasons.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes (process exit status, 0-255)."""

    OK = 0
    #: bad input, bad arguments or an unreachable service (one ``cuetrain: error:`` line names the fix)
    USAGE = 2
    #: the gang could not form: gang incomplete, main address unreachable, rank 0's port in use,
    #: or the frame's rendezvous timed out / frame 0 failed the gang
    GANG = 3
    #: a rank died or hung during training (trainer.gang.formation.RankLost): restart the gang from the checkpoint
    RANK_LOST = 4
    #: this process may not join: its rank is claimed already or its job token is wrong
    REJECTED = 5
    #: frame 0 could not reserve a port for the main address
    PORT_UNAVAILABLE = 6
    #: stopped by SIGTERM/SIGINT: the gang agreed on a step, rank 0 wrote a checkpoint at it; resume continues there
    STOPPED = 75
    #: stopped by SIGTERM/SIGINT, but the checkpoint was not written within the grace period
    #: (``--stop-grace-s``): resume continues from the previous checkpoint
    STOP_TIMEOUT = 76
    #: stopped at a periodic checkpoint because the node agent asked the gang to change size (SIGUSR1);
    #: --resume continues there (at any world size)
    REGROUP = 79
    #: a file of the training shot was deleted, truncated or rewritten on the file server after the run listed
    #: it (trainer.data.shot.ShotChanged): the node agent restarts the gang from its checkpoint, which reads the shot
    #: again; when the file stays missing the restart budget runs out and the layer fails with the message
    DATA_CHANGED = 80
    #: the loss blew up far above the untrained network's (trainer.learn.divergence): no model.pt; a restart diverges
    #: again, so the agent stops; train again with a lower --lr
    DIVERGED = 81
    #: the frame could not start its trainer (the shell's "command not found")
    NO_TRAINER = 127


#: Exit statuses Cuebot treats as memory failures (retried regardless, layer memory raised); cuetrain
#: never picks them (Dispatcher.EXIT_STATUS_MEMORY_FAILURE, DOCKER_EXIT_STATUS_MEMORY_FAILURE).
CUEBOT_MEMORY_FAILURE = (33, 137)

#: One line per code, for docs, logs and the GUI.
MEANING: dict[int, str] = {
    ExitCode.OK: "succeeded",
    ExitCode.USAGE: "bad input or arguments",
    ExitCode.GANG: "gang could not form (incomplete, unreachable, port in use, rendezvous timeout)",
    ExitCode.RANK_LOST: "lost a rank during training",
    ExitCode.REJECTED: "rank already claimed or wrong job token",
    ExitCode.PORT_UNAVAILABLE: "no port for the main address",
    ExitCode.STOPPED: "stopped by a signal; checkpoint written at the agreed step",
    ExitCode.STOP_TIMEOUT: "stopped by a signal; no checkpoint within the grace period",
    ExitCode.REGROUP: "stopped at a periodic checkpoint because the node agent asked the gang to change size "
                      "(SIGUSR1); --resume continues there",
    ExitCode.DATA_CHANGED: "a file of the training shot changed or vanished on the file server; the gang restarts "
                           "from its checkpoint when it is back",
    ExitCode.DIVERGED: "training diverged (the loss blew up); train again with a lower --lr",
    ExitCode.NO_TRAINER: "trainer could not be started",
}


def describe(code: int) -> str:
    """A short text for an exit status: the table's meaning, ``killed by signal N`` above 128, else ``exit N``."""
    if code in MEANING:
        return MEANING[code]
    if code > 128:
        return f"killed by signal {code - 128}"
    return f"exit {code}"

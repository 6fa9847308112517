"""The grace table: how long each process waits between SIGTERM and SIGKILL, in one place.

Order: a supervisor's SIGKILL comes strictly after the trainer's checkpoint grace (docs/failure_handling.md,
"SIGTERM and SIGINT").

- the trainer (:class:`trainer.gang.stopvote.StopSignal`) has ``checkpoint_s`` seconds (``--stop-grace-s``) from
  SIGTERM/SIGINT to agree on a step, write rank 0's checkpoint and exit 75; past it, its watchdog exits 76;
- every cuetrain supervisor (``cuetrain local``, a farm frame's node agent, :func:`trainer.agent.supervise.run_ranks`)
  passes SIGTERM on and sends SIGKILL only :meth:`Grace.kill_after_s` = the trainer's grace + ``margin_s``
  later, so the watchdog's own exit (and the relay of its last lines) lands first.

Why 20 s and 10 s (sources in :mod:`trainer.gang.stopvote`): under Kubernetes' default 30 s
``terminationGracePeriodSeconds`` and systemd's 90 s ``DefaultTimeoutStopSec``; the margin covers the
watchdog's wake-up and process exit on a loaded host. RQD itself kills with SIGKILL (no grace at all).

Imports nothing: the trainer's config, the supervisors and the farm frame all read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Grace:
    """Seconds between SIGTERM and the forced end of each process.

    Attributes:
        checkpoint_s: the trainer's stop grace (default of ``--stop-grace-s``) [s].
        margin_s: how much longer a supervisor waits before SIGKILL than the trainer's grace [s], > 0.
    """

    checkpoint_s: float = 20.0
    margin_s: float = 10.0

    def kill_after_s(self, checkpoint_s: float | None = None) -> float:
        """Seconds a supervisor waits after SIGTERM before SIGKILL, for a trainer grace of ``checkpoint_s``
        (default: :attr:`checkpoint_s`) [s]; always strictly more than that grace."""
        return (self.checkpoint_s if checkpoint_s is None else checkpoint_s) + self.margin_s

    def kill_after_for(self, train_argv: Sequence[str]) -> float:
        """:meth:`kill_after_s` for the ``--stop-grace-s`` given in ``train_argv`` (the trainer's own
        arguments; ``--stop-grace-s S`` or ``--stop-grace-s=S``), else for the default grace [s].

        A value that is not a number is left to the trainer's own argument check (it exits 2).
        """
        value: str | None = None
        for i, arg in enumerate(train_argv):
            if arg == "--stop-grace-s" and i + 1 < len(train_argv):
                value = train_argv[i + 1]
            elif arg.startswith("--stop-grace-s="):
                value = arg.split("=", 1)[1]
        try:
            return self.kill_after_s(max(self.checkpoint_s, float(value)) if value is not None else None)
        except ValueError:
            return self.kill_after_s()


#: The one grace table every supervisor and the trainer read.
GRACE = Grace()

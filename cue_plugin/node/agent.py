"""The frame's node agent policy: the job's restart budget, backoff and elastic window, and its gang record.

The loop itself and the exit-code table are :mod:`trainer.agent.nodeagent` (shared with ``cuetrain local``);
frame 0's role is ``cue_plugin.node.frame_host.HostGang``, the other frames' ``cue_plugin.node.frame_member.MemberGang``.

Every frame of a training layer is a node agent (``cue_plugin.node.frame``), like torchrun's elastic
agent (``torch.distributed.elastic.agent.server.SimpleElasticAgent``: a worker group that failed is
stopped, the rendezvous runs again and the group restarts, up to ``max_restarts``). When its trainer
exits because the GANG failed (a lost rank, a peer that stopped, a stale gang), the frame does not
exit: it re-rendezvouses and starts the trainer again with ``--resume``. So Cuebot's retry rules
(no retry after 12 h, the JobSpec retry cap of 1; tests/cuebot/completion.py) decide nothing while
the frame's host lives; only a frame whose host or process is gone needs Cuebot's retry.

One gang = one *generation*, hosted by frame 0: generation 1 is the first gang of the job; every
re-formed gang is the next one. Frame 0 keeps the job's count in ``run.json`` ``gang``
(:class:`GangRecord`), so a Cuebot retry of frame 0 continues the count.

Restart budget (``--max-restarts``, per job): a generation started because the previous one FAILED
is a restart; a regroup (the elastic gang changes size at a checkpoint, exit 79) is not. When the
budget is spent, frame 0 ends with its trainer's exit code and a failure notice, so the other frames
stop at once instead of waiting out the rendezvous timeout. Backoff before restart n:
``min(backoff_s * 2**(n-1), backoff_max_s)`` seconds (exponential, as torchelastic's rendezvous
retries; a crash loop does not hammer shared storage or Cuebot).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from cue_plugin.names import DEFAULT_ELASTIC_WINDOW_S, DEFAULT_MAX_RESTARTS
from trainer.record import runrecord
from trainer.record.sections import GangRecord
from trainer.record.rundir import RunDirError, RunPaths

log = logging.getLogger("cue_plugin.agent")

DEFAULT_BACKOFF_S = 2.0  # seconds before the first restart, doubled for each further one
BACKOFF_MAX_S = 30.0  # seconds, the longest backoff


@dataclass(frozen=True)
class AgentPolicy:
    """How a frame's node agent restarts its gang.

    Attributes:
        max_restarts: gang restarts allowed per job (regroups not counted) [count]; 0 = exit on the first failure.
        backoff_s: seconds before the first restart, doubled for each further one [s].
        backoff_max_s: the longest backoff [s].
        min_world_size: the smallest gang that may train [ranks]; equal to the full world size (the default)
            means not elastic: every restart waits for every frame.
        elastic_window_s: how long frame 0 waits for every frame to come back before the gang shrinks to the
            frames it has (elastic only) [s].
    """

    max_restarts: int = DEFAULT_MAX_RESTARTS
    backoff_s: float = DEFAULT_BACKOFF_S
    backoff_max_s: float = BACKOFF_MAX_S
    min_world_size: int = 0
    elastic_window_s: float = DEFAULT_ELASTIC_WINDOW_S

    def check(self, world_size: int, ranks_per_frame: int) -> None:
        """Raise ValueError (naming the argument and the fix) for values the agent cannot use."""
        if self.max_restarts < 0:
            raise ValueError(f"--max-restarts {self.max_restarts} must be >= 0")
        if self.backoff_s < 0 or self.elastic_window_s < 0:
            raise ValueError("--restart-backoff-s and --elastic-window-s must be >= 0 seconds")
        if self.min_world_size and not ranks_per_frame <= self.min_world_size <= world_size:
            raise ValueError(f"--min-world-size {self.min_world_size} must be between the ranks of one frame "
                             f"({ranks_per_frame}) and --world-size {world_size}")
        if self.min_world_size % ranks_per_frame:
            raise ValueError(f"--min-world-size {self.min_world_size} is not a multiple of --ranks-per-frame "
                             f"{ranks_per_frame}: a gang shrinks by whole frames")

    def elastic(self, world_size: int) -> bool:
        """True when the gang may train with fewer than ``world_size`` ranks."""
        return 0 < self.min_world_size < world_size

    def backoff(self, restart: int) -> float:
        """Seconds to wait before restart number ``restart`` (1-based) [s]."""
        return min(self.backoff_s * 2 ** max(0, restart - 1), self.backoff_max_s)


def record_gang(paths: RunPaths, record: GangRecord) -> None:
    """Write ``record`` as ``run.json`` ``gang`` (:func:`trainer.record.runrecord.write_gang`); an error is logged,
    not raised: the record is for people, training goes on."""
    try:
        runrecord.write_gang(paths, record)
    except RunDirError as exc:
        log.error("cannot record the gang generation in run.json: %s", exc)

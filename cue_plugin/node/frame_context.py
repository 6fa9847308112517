"""What one frame process knows, built once at its entry point (``cue_plugin.node.frame.main``).

:class:`FrameContext` is made once, after the arguments and the environment are read and checked, and every
function of the frame and of its node agent takes it, instead of the same values one by one or a fresh read of
the environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cue_plugin.node.agent import AgentPolicy
from trainer.core.envvars import CueFrameEnv, DistEnv, FarmEnv
from trainer.record.rundir import RunPaths

if TYPE_CHECKING:  # the frame's log; None in unit tests of the agent loops, which start no trainer
    from cue_plugin.node.supervise import RankLog


@dataclass(frozen=True)
class FrameContext:
    """One frame's settings, read once.

    Attributes:
        frame: this frame's number (Cuebot's ``#IFRAME#`` or ``CUE_IFRAME``), ``0 .. frames - 1``.
        world_size: ranks of the whole gang [ranks] (``--world-size``).
        paths: the run directory's layout.
        ranks_per_frame: trainer processes this frame runs, L [ranks] (``--ranks-per-frame``).
        rendezvous: how ranks find frame 0: ``"file"`` or ``"cuebot"`` (``--rendezvous``).
        rendezvous_timeout_s: the longest wait for frame 0's publication [s] (``--rendezvous-timeout``).
        policy: the node agent's restart and elastic policy (``--max-restarts`` ...).
        train_args: the trainer's arguments (after ``--``).
        trainer_command: the command before ``train_args`` (``trainer.agent.supervise.TRAINER_COMMAND``; tests a stub).
        cue: what RQD told the frame (``CUE_*``).
        farm: the farm-side variables (``CUE_JOB_ID``, ``CUETRAIN_MAIN_HOST``, ``CUEBOT_HOSTS`` ...).
        dist: the distributed variables the trainers inherit (sync interval, local address, gang token).
        out: the frame's log (stdout and ``RUN_DIR/logs/rank_N.log``); ``None`` where no trainer starts.
    """

    frame: int
    world_size: int
    paths: RunPaths
    ranks_per_frame: int = 1
    rendezvous: str = "file"
    rendezvous_timeout_s: float = 600.0
    policy: AgentPolicy = field(default_factory=AgentPolicy)
    train_args: tuple[str, ...] = ()
    trainer_command: tuple[str, ...] = ()
    cue: CueFrameEnv = field(default_factory=lambda: CueFrameEnv(frame=None))
    farm: FarmEnv = field(default_factory=FarmEnv)
    dist: DistEnv = field(default_factory=lambda: DistEnv(distributed=False))
    out: RankLog | None = field(default=None, compare=False, repr=False)

    @property
    def rank(self) -> int:
        """This frame's first rank in the full gang: ``frame * ranks_per_frame``."""
        return self.frame * self.ranks_per_frame

    @property
    def frames(self) -> int:
        """Frames in the layer: ``world_size // ranks_per_frame`` (checked by ``cue_plugin.node.frame.frames_of``)."""
        return self.world_size // self.ranks_per_frame

    @property
    def token(self) -> str | None:
        """The job's gang token (``CUETRAIN_GANG_TOKEN``), or None."""
        return self.dist.token

    @property
    def elastic(self) -> bool:
        """True when the gang may train with fewer ranks than ``world_size`` (``--min-world-size``)."""
        return self.policy.elastic(self.world_size)

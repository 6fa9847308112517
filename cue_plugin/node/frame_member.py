"""The node agent of a frame other than frame 0 (see ``cue_plugin.node.frame`` and ``cue_plugin.node.agent``).

It waits for frame 0's publication of a gang generation that invites it, runs its trainers, and when
the gang fails or regroups waits for the next generation instead of exiting. It exits 0 when the run
succeeded, also while it waited (e.g. a duplicate of this frame that Cuebot started after a host was
marked down while the original still trained).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Callable

from cue_plugin.node import membership, rendezvous
from cue_plugin.node.publication import Publication
from cue_plugin.node.frame_context import FrameContext
from cue_plugin.node.rendezvous import GangFinished
from trainer.record import runrecord
from trainer.core.exitcodes import ExitCode, describe
from trainer.agent.nodeagent import Ended, Generation, NodeAgent, WorkerState, classify
from trainer.record.rundir import RunPaths
from trainer.agent.supervise import GangExit

log = logging.getLogger("cue_plugin.frame")  # the frame's records (its RankLog handler is on "cue_plugin")

NOTICE_WAIT_S = 2.0  # seconds a rank whose trainer failed looks for frame 0's failure notice
EXIT_GANG = ExitCode.GANG
EXIT_REJECTED = ExitCode.REJECTED
#: runs this frame's trainers for a publication: (publication, resume, watch) -> how they ended
Start = Callable[[Publication, bool, "Callable[[], str | int | None] | None"], GangExit]


def finished_without_me(paths: RunPaths, job_id: str, ran: bool) -> str:
    """A reason when the run already succeeded for this job (a frame that waits has nothing left to do), else "".

    Only a record of this job counts (``farm.job_id``), or any success once this frame has trained in the run."""
    record = runrecord.read_record_or_empty(paths)
    if record.state != "succeeded" or not ((job_id and record.farm_record.job_id == job_id) or ran):
        return ""
    return f"the gang finished training (step {record.final_step}) while this frame waited"


def _member_vet(frame: int, paths: RunPaths, job_id: str, ran: Callable[[], bool]) -> \
        Callable[[Publication | None], tuple[str, str] | None]:
    def vet(pub: Publication | None) -> tuple[str, str] | None:
        done = finished_without_me(paths, job_id, ran())
        if done:
            raise GangFinished(done)
        if pub is not None and not pub.failed and not pub.invites(frame):
            return (f"out {pub.attempt}", f"generation {pub.generation} (frames {list(pub.members)}) trains without "
                    f"frame {frame}; waiting to join at its next checkpoint")
        return None
    return vet


class MemberGang:
    """The :class:`~trainer.agent.nodeagent.GangRole` of frames > 0: wait for frame 0's generation, run this frame's
    trainers (``start``); when the gang fails, regroups or went stale (see ``cue_plugin.node.frame``) wait for frame
    0's next generation instead of exiting. Frame 0 spends the job's restart budget, so this role counts none.

    The agent exits 0 when training finished (with or without this frame), else with the code of a failure a
    restart cannot help (trainer.core.exitcodes; 3 when frame 0 failed the gang).

    Raises (from ``form``):
        RendezvousError: no usable publication within the rendezvous timeout (exit code 3).
    """

    counts_restarts = False

    def __init__(self, ctx: FrameContext, source: rendezvous.Source, notice: rendezvous.FileSource,
                 start: Start) -> None:
        self.ctx, self.source, self.notice, self.start = ctx, source, notice, start
        self.stale: set[str] = set()
        self.last_generation, self.ran = 0, False
        self.reuse = getattr(source, "restarts_reuse_attempt", False)  # cuebot mode: one attempt per Cuebot retry
        self.vet = _member_vet(ctx.frame, ctx.paths, ctx.farm.job_id, lambda: self.ran)
        self.why = ""

    def form(self, previous: Ended | None) -> Generation | int:
        """Wait for a publication that invites this frame; 0 when the run finished meanwhile."""
        ctx = self.ctx
        present = membership.present(ctx.paths, ctx.frame, self.last_generation) if ctx.elastic \
            else contextlib.nullcontext()
        try:
            with present:
                pub = rendezvous.wait_for_main(self.source, rank=ctx.rank, token=ctx.token, stale=self.stale,
                                               notice=self.notice, timeout_s=ctx.rendezvous_timeout_s, vet=self.vet)
        except GangFinished as done:
            log.info("frame %d exits 0: %s", ctx.frame, done)
            return 0
        return Generation(pub.generation, resume=self.ran or pub.generation > 1, detail=pub)

    def run(self, generation: Generation) -> GangExit:
        pub = generation.detail

        def newer() -> str | None:
            other = rendezvous.superseded(self.source, pub, self.ctx.token)
            return f"frame 0 started again (attempt {other.attempt}); the gang of attempt {pub.attempt} is gone" \
                if other is not None else None

        result = self.start(pub, generation.resume, newer)
        self.ran, self.last_generation = True, max(self.last_generation, pub.generation)
        return result

    def judge(self, generation: Generation, result: GangExit) -> tuple[WorkerState, int]:
        """STALE when the gang refused this rank or was stopped for a newer one; STOPPED with 3 when frame 0
        failed the gang (its failure notice); else the exit-code table."""
        pub = generation.detail
        if EXIT_REJECTED in result.codes.values() or result.stopped:
            self.why = result.stopped or "its gang refused this rank (rank already claimed: a stale gang of an old " \
                                         "frame 0)"
            return WorkerState.STALE, result.code
        state = classify(result.code, terminated=result.terminated)
        if state is WorkerState.SUCCEEDED:
            return state, 0
        failed = await_notice(self.notice, self.ctx.token, pub)
        if failed is not None:
            log.error("rank %d stops: frame 0 (attempt %s) failed the gang: %s", self.ctx.rank, failed.attempt,
                      failed.failed)
            return WorkerState.STOPPED, EXIT_GANG
        self.why = ("the gang stopped at a checkpoint to change size" if state is WorkerState.REGROUP else
                    f"the gang failed (rank {result.rank}: exit {result.code}, {describe(result.code)})")
        return state, result.code

    def stopped(self, ended: Ended) -> int:
        return ended.code

    def budget_spent(self, ended: Ended, max_restarts: int) -> int:  # not reached: counts_restarts is False
        return ended.code

    def pause(self, ended: Ended) -> float:
        pub, rank = ended.generation.detail, self.ctx.rank
        if self.reuse:
            log.warning("rank %d: %s; waiting for frame 0 to host attempt %s again", rank, self.why, pub.attempt)
            return self.ctx.policy.backoff_s
        self.stale.add(pub.attempt)
        log.warning("rank %d: frame 0 attempt %s is stale: %s; waiting for frame 0's next generation (node "
                    "agent: this frame does not exit)", rank, pub.attempt, self.why)
        return 0.0


def run_member(ctx: FrameContext, source: rendezvous.Source, notice: rendezvous.FileSource, start: Start) -> int:
    """Frames > 0: :class:`MemberGang` in the node agent (frame 0 keeps the restart budget); returns the frame's
    exit code (see :class:`MemberGang`)."""
    return NodeAgent(MemberGang(ctx, source, notice, start), ctx.policy.max_restarts).run()


def await_notice(notice: rendezvous.FileSource, token: str | None,
                  pub: Publication) -> Publication | None:
    """Frame 0's failure notice for attempt ``pub.attempt``, looked for up to :data:`NOTICE_WAIT_S` seconds."""
    deadline = time.monotonic() + NOTICE_WAIT_S
    while True:
        failed = rendezvous.failure_notice(notice, token)
        if failed is not None and failed.attempt == pub.attempt:
            return failed
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)

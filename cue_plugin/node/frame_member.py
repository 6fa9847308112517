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
from cue_plugin.node.agent import Action, classify
from cue_plugin.node.frame_context import FrameContext
from cue_plugin.node.rendezvous import GangFinished
from trainer import runrecord
from trainer.exitcodes import ExitCode, describe
from trainer.rundir import RunPaths
from trainer.supervise import GangExit

log = logging.getLogger("cue_plugin.frame")  # the frame's records (its RankLog handler is on "cue_plugin")

NOTICE_WAIT_S = 2.0  # seconds a rank whose trainer failed looks for frame 0's failure notice
EXIT_GANG = ExitCode.GANG
EXIT_REJECTED = ExitCode.REJECTED
#: runs this frame's trainers for a publication: (publication, resume, watch) -> how they ended
Start = Callable[[rendezvous.Publication, bool, Callable[[], "str | int | None"]], GangExit]


def finished_without_me(paths: RunPaths, job_id: str, ran: bool) -> str:
    """A reason when the run already succeeded for this job (a frame that waits has nothing left to do), else "".

    Only a record of this job counts (``farm.job_id``), or any success once this frame has trained in the run."""
    record = runrecord.read_record_or_empty(paths)
    if record.state != "succeeded" or not ((job_id and record.farm_record.job_id == job_id) or ran):
        return ""
    return f"the gang finished training (step {record.final_step}) while this frame waited"


def _member_vet(frame: int, paths: RunPaths, job_id: str, ran: Callable[[], bool]) -> \
        Callable[[rendezvous.Publication | None], tuple[str, str] | None]:
    def vet(pub: rendezvous.Publication | None) -> tuple[str, str] | None:
        done = finished_without_me(paths, job_id, ran())
        if done:
            raise GangFinished(done)
        if pub is not None and not pub.failed and not pub.invites(frame):
            return (f"out {pub.attempt}", f"generation {pub.generation} (frames {list(pub.members)}) trains without "
                    f"frame {frame}; waiting to join at its next checkpoint")
        return None
    return vet


def run_member(ctx: FrameContext, source: rendezvous.Source, notice: rendezvous.FileSource, start: Start) -> int:
    """Frames > 0, node agents: wait for frame 0's generation, run the trainers (``start``); when the gang fails
    or regroups (or was stale, see ``cue_plugin.node.frame``) wait for frame 0's next generation instead of exiting.

    Returns the frame's exit code: 0 when training finished (with or without this frame), else the code of
    a failure a restart cannot help (trainer.exitcodes; 3 when frame 0 failed the gang).

    Raises:
        RendezvousError: no usable publication within the rendezvous timeout (exit code 3).
    """
    frame, rank, paths, token = ctx.frame, ctx.rank, ctx.paths, ctx.token
    job_id = ctx.farm.job_id
    stale: set[str] = set()
    last_generation, ran = 0, [False]
    reuse = getattr(source, "restarts_reuse_attempt", False)  # cuebot mode: one attempt per Cuebot retry
    vet = _member_vet(frame, paths, job_id, lambda: ran[0])
    while True:
        present = membership.present(paths, frame, last_generation) if ctx.elastic \
            else contextlib.nullcontext()
        try:
            with present:
                pub = rendezvous.wait_for_main(source, rank=rank, token=token, stale=stale, notice=notice,
                                               timeout_s=ctx.rendezvous_timeout_s, vet=vet)
        except GangFinished as done:
            log.info("frame %d exits 0: %s", frame, done)
            return 0

        def newer(current: rendezvous.Publication = pub) -> str | None:
            other = rendezvous.superseded(source, current, token)
            return f"frame 0 started again (attempt {other.attempt}); the gang of attempt {current.attempt} is gone" \
                if other is not None else None

        result = start(pub, ran[0] or pub.generation > 1, newer)
        ran[0], last_generation = True, max(last_generation, pub.generation)
        if EXIT_REJECTED in result.codes.values() or result.stopped:
            why = result.stopped or "its gang refused this rank (rank already claimed: a stale gang of an old frame 0)"
        else:
            action = classify(result.code, terminated=result.terminated)
            if action is Action.FINISH:
                return 0
            failed = await_notice(notice, token, pub)
            if failed is not None:
                log.error("rank %d stops: frame 0 (attempt %s) failed the gang: %s", rank, failed.attempt,
                          failed.failed)
                return EXIT_GANG
            if action is Action.EXIT:
                return result.code
            why = ("the gang stopped at a checkpoint to change size" if action is Action.REGROUP else
                   f"the gang failed (rank {result.rank}: exit {result.code}, {describe(result.code)})")
        if reuse:
            log.warning("rank %d: %s; waiting for frame 0 to host attempt %s again", rank, why, pub.attempt)
            time.sleep(ctx.policy.backoff_s)
        else:
            stale.add(pub.attempt)
            log.warning("rank %d: frame 0 attempt %s is stale: %s; waiting for frame 0's next generation (node "
                        "agent: this frame does not exit)", rank, pub.attempt, why)


def await_notice(notice: rendezvous.FileSource, token: str | None,
                  pub: rendezvous.Publication) -> rendezvous.Publication | None:
    """Frame 0's failure notice for attempt ``pub.attempt``, looked for up to :data:`NOTICE_WAIT_S` seconds."""
    deadline = time.monotonic() + NOTICE_WAIT_S
    while True:
        failed = rendezvous.failure_notice(notice, token)
        if failed is not None and failed.attempt == pub.attempt:
            return failed
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)

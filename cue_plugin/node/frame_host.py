"""Frame 0's node agent role: it hosts every gang generation of the job (see ``cue_plugin.node.frame`` and
``cue_plugin.node.agent``).

:class:`HostGang` is the :class:`trainer.agent.nodeagent.GangRole` that :class:`~trainer.agent.nodeagent.NodeAgent`
runs in frame 0: each generation it gathers the frames (an elastic gang: those that came back), records the
generation in ``run.json`` ``gang`` (the job's count, so a Cuebot retry of frame 0 continues it), reserves
rank 0's port and publishes the main address, runs rank 0's trainers and retracts the publication. On a
gang failure the agent hosts the next generation after a backoff while the job's restart budget lasts;
an incomplete gang fails the layer; bad settings are told to the waiting frames at once.
"""

from __future__ import annotations

import logging
import signal
from typing import Callable

from cue_plugin.node import membership, rendezvous
from cue_plugin.node.agent import record_gang
from cue_plugin.node.frame_context import FrameContext
from cue_plugin.node.frame_member import Start
from cue_plugin.node.layer_failure import fail_layer, gang_incomplete
from trainer.record import runrecord
from trainer.core.exitcodes import ExitCode, describe
from trainer.agent.nodeagent import Ended, Generation, WorkerState, judge_exit
from trainer.agent.supervise import GangExit

log = logging.getLogger("cue_plugin.frame")  # the frame's records (its RankLog handler is on "cue_plugin")

EXIT_USAGE = ExitCode.USAGE
EXIT_GANG = ExitCode.GANG


def _members(ctx: FrameContext, regroup: bool) -> tuple[int, ...]:
    """Frames of frame 0's next generation: every frame (empty tuple), or after a failure or a regroup of an
    elastic gang those that came back (``cue_plugin.node.membership.gather``).

    Raises:
        TimeoutError: an elastic gang has too few frames after the rendezvous timeout.
    """
    policy, frames = ctx.policy, ctx.frames
    if not regroup or not ctx.elastic:
        return ()
    members = membership.gather(ctx.paths, frames, policy.min_world_size // ctx.ranks_per_frame,
                                policy.elastic_window_s, ctx.rendezvous_timeout_s)
    if len(members) < frames:
        log.warning("elastic gang: continuing with frames %s (%d of %d ranks, --min-world-size %d); frames %s did "
                    "not come back within %.0f s", list(members), len(members) * ctx.ranks_per_frame, ctx.world_size,
                    policy.min_world_size, sorted(set(range(frames)) - set(members)), policy.elastic_window_s)
    return () if len(members) == frames else members


def _grow_watch(ctx: FrameContext, members: tuple[int, ...]) -> Callable[[], int | None] | None:
    """While a shrunk generation trains: SIGUSR1 to frame 0's trainers (once) when a missing frame is back."""
    if not members:
        return None
    asked: list[int] = []

    def watch() -> int | None:
        back = membership.returned(ctx.paths, ctx.frames, members)
        if not back or asked:
            return None
        asked.extend(back)
        log.info("frames %s are back: the gang grows at its next checkpoint (regroup)", back)
        return int(signal.SIGUSR1)

    return watch


class HostGang:
    """Frame 0's :class:`~trainer.agent.nodeagent.GangRole`: host, run rank 0, retract; spends the job's budget.

    Args:
        ctx: the frame's context.
        source: where frame 0 publishes (the run directory, or Cuebot in ``--rendezvous cuebot``).
        notice: frame 0's failure notice file (both modes).
        start: runs this frame's trainers for a publication (``cue_plugin.node.frame._start_trainer``).
    """

    counts_restarts = True

    def __init__(self, ctx: FrameContext, source: rendezvous.Source, notice: rendezvous.FileSource,
                 start: Start) -> None:
        self.ctx, self.source, self.notice, self.start = ctx, source, notice, start
        if ctx.rendezvous == "cuebot":
            notice.clear()  # a failure notice of an earlier attempt
        self.host = rendezvous.main_address(ctx.farm.main_host, ctx.farm.cuebot_hosts)  # an IP, never the host name
        self.record = runrecord.read_gang(ctx.paths, ctx.farm.job_id)
        self.reason = "frame 0 started again (farm retry)" if self.record.generation > 0 else "first gang of the job"
        self.failure = ""  # the last generation's gang-incomplete reason (layer_failure.gang_incomplete)

    def form(self, previous: Ended | None) -> Generation | int:
        """Gather the frames, record the generation in ``run.json``, reserve the port and publish."""
        again = previous is not None or self.record.generation > 0  # a Cuebot retry of frame 0: a restart
        counted = previous.state is WorkerState.FAILED if previous is not None else again
        try:
            members = _members(self.ctx, again)
        except TimeoutError as exc:
            log.error("%s", exc)
            return EXIT_GANG
        world = len(members) * self.ctx.ranks_per_frame if members else self.ctx.world_size
        self.record = self.record.next(self.reason, members, world, restart=counted)
        record_gang(self.ctx.paths, self.record)
        generation = self.record.generation
        reservation, pub = self.source.host(self.host, self.ctx.token, generation, members)
        log.info("frame 0 (attempt %s) hosts the main address %s for generation %d: %d rank(s)%s", pub.attempt,
                 pub.address, generation, pub.world_size(self.ctx.world_size, self.ctx.ranks_per_frame),
                 f" (frames {list(members)})" if members else "")
        return Generation(generation, resume=generation > 1, restarts=self.record.restarts,
                          detail=(reservation, pub, members))

    def run(self, generation: Generation) -> GangExit:
        """Run rank 0's trainers; retract the publication unless the gang was incomplete."""
        reservation, pub, members = generation.detail
        self.failure = ""
        try:
            result = self.start(pub, generation.resume, _grow_watch(self.ctx, members))
            incomplete = EXIT_GANG in (result.code, result.codes.get(0))
            self.failure = gang_incomplete(self.ctx.paths) if incomplete else ""
        finally:
            reservation.close()
            if not self.failure:
                self.source.retract(pub)
        return result

    def judge(self, generation: Generation, result: GangExit) -> tuple[WorkerState, int]:
        return judge_exit(generation, result, self.ctx.paths)

    def stopped(self, ended: Ended) -> int:
        """Fail the layer on an incomplete gang; tell waiting ranks about bad settings (the failed rank's
        failure record)."""
        pub, result = ended.generation.detail[1], ended.result
        if self.failure:
            fail_layer(self.ctx.paths, pub, self.failure, self.ctx.cue, self.ctx.token, self.notice)
        elif ended.code == EXIT_USAGE:  # bad settings: a retry cannot help, so the waiting ranks stop now
            rendezvous.notify_bad_setting(self.notice, pub, result.failure.message if result.failure else "",
                                          self.ctx.token)
        return ended.code

    def budget_spent(self, ended: Ended, max_restarts: int) -> int:
        result, code = ended.result, ended.code
        why = (f"the gang failed (rank {result.rank}: exit {code}, {describe(code)}) and the job's restart budget "
               f"is spent ({self.record.restarts} of --max-restarts {max_restarts})")
        log.error("%s; frame 0 stops and tells the other frames", why)
        try:
            self.notice.fail(ended.generation.detail[1], why, self.ctx.token)
        except rendezvous.RendezvousError as exc:
            log.error("%s; waiting ranks will wait out the rendezvous timeout", exc)
        return code

    def pause(self, ended: Ended) -> float:
        if ended.state is not WorkerState.FAILED:
            self.reason = "regroup: the gang stopped at a checkpoint to change size"
            return 0.0
        restarts, result = self.record.restarts, ended.result
        delay = self.ctx.policy.backoff(restarts + 1)
        self.reason = f"restart {restarts + 1}: rank {result.rank} exited {ended.code} ({describe(ended.code)})"
        log.warning("%s; frame 0 hosts the next generation in %.0f s (restart %d of %d)", self.reason, delay,
                    restarts + 1, self.ctx.policy.max_restarts)
        return delay

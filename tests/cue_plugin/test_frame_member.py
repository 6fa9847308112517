"""The node agent of frames > 0 (cue_plugin.node.frame_member.run_member), with a fake trainer start: it waits
for frame 0's next generation after a gang failure instead of exiting, in both rendezvous modes."""

from __future__ import annotations

import json
import socket
import time

import pytest

from cue_plugin.node import rendezvous
from cue_plugin.node.publication import Publication, proof
from cue_plugin.node.agent import AgentPolicy
from cue_plugin.node.frame_context import FrameContext
from cue_plugin.node.frame_member import run_member
from trainer.core.envvars import DistEnv, FarmEnv
from trainer.record.rundir import RunPaths
from trainer.record.runrecord import update_record
from trainer.agent.supervise import GangExit

TOKEN = "0a1b2c3d" * 4


def ctx(frame: int, paths: RunPaths, token: str | None, policy: AgentPolicy, timeout: float = 5.0,
        job_id: str = "") -> FrameContext:
    """Frame ``frame`` of a two-rank gang, one rank per frame, as ``cue_plugin.node.frame.main`` builds it."""
    return FrameContext(frame=frame, world_size=2, paths=paths, rendezvous_timeout_s=timeout, policy=policy,
                        farm=FarmEnv(job_id=job_id), dist=DistEnv(distributed=False, token=token))


@pytest.fixture
def listening():
    """Two ports that accept connections, as rank 0's stores do."""
    socks = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        socks.append(s)
    yield [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()


def publish(source: rendezvous.FileSource, port: int, attempt: str, generation: int,
            members: tuple[int, ...] = ()) -> None:
    pub = Publication("127.0.0.1", port, attempt,
                                 proof(TOKEN, "127.0.0.1", port, attempt, "", generation, members),
                                 time.time(), 1, "", generation, members)
    source.path.parent.mkdir(parents=True, exist_ok=True)
    source.path.write_text(json.dumps(pub.to_json()))


def test_file_mode_a_failed_gang_waits_for_the_next_generation_and_resumes(tmp_path, listening):
    paths = RunPaths.of(tmp_path)
    source = rendezvous.FileSource(paths.rendezvous)
    publish(source, listening[0], "h:1:a", 1)
    calls = []

    def start(pub, resume, watch):
        calls.append((pub.attempt, pub.generation, resume))
        if len(calls) == 1:  # the gang fails; frame 0 hosts generation 2 meanwhile
            publish(source, listening[1], "h:1:b", 2)
            return GangExit(4, 0, {1: 4})
        return GangExit(0, None, {1: 0})

    assert run_member(ctx(1, paths, TOKEN, AgentPolicy(backoff_s=0.0)), source, source, start) == 0
    assert calls == [("h:1:a", 1, False), ("h:1:b", 2, True)]


def test_cuebot_mode_retries_the_same_attempt_after_a_failure(tmp_path, listening):
    """Cuebot's frame state carries no generation: frame 0 re-hosts retry-N on the same port."""

    class SameAttempt:
        restarts_reuse_attempt = True

        def describe(self) -> str:
            return "fake Cuebot"

        def read(self):
            return Publication("127.0.0.1", listening[0], "retry-0")

    paths = RunPaths.of(tmp_path)
    codes = [4, 5, 0]  # lost a rank; then refused by the old gang still alive; then trained
    calls = []

    def start(pub, resume, watch):
        calls.append(resume)
        code = codes.pop(0)
        return GangExit(code, None if code == 0 else 1, {1: code})

    notice = rendezvous.FileSource(paths.rendezvous)
    assert run_member(ctx(1, paths, None, AgentPolicy(backoff_s=0.0)), SameAttempt(), notice, start) == 0
    assert calls == [False, True, True]


def test_a_frame_left_out_of_a_smaller_generation_waits_and_a_finished_run_lets_it_exit_0(tmp_path, listening):
    paths = RunPaths.of(tmp_path)
    source = rendezvous.FileSource(paths.rendezvous)
    publish(source, listening[0], "h:1:a", 2, members=(0, 1))  # an elastic gang of frames 0 and 1

    def never(pub, resume, watch):
        pytest.fail("frame 2 is not a member of generation 2")

    update_record(paths, state="running", farm={"job_id": "job-1"})
    with pytest.raises(rendezvous.RendezvousTimeout, match="trains without frame 2"):
        run_member(ctx(2, paths, TOKEN, AgentPolicy(), timeout=1.5, job_id="job-1"), source, source, never)
    update_record(paths, state="succeeded", final_step=100)
    assert run_member(ctx(2, paths, TOKEN, AgentPolicy(), job_id="job-1"), source, source, never) == 0


def test_frame_0s_failure_notice_stops_a_member_whose_gang_failed(tmp_path, listening):
    paths = RunPaths.of(tmp_path)
    source = rendezvous.FileSource(paths.rendezvous)
    publish(source, listening[0], "h:1:a", 1)

    def start(pub, resume, watch):  # frame 0 spent the restart budget and said so
        source.fail(pub, "the job's restart budget is spent", TOKEN)
        return GangExit(4, 0, {1: 4})

    assert run_member(ctx(1, paths, TOKEN, AgentPolicy()), source, source, start) == 3

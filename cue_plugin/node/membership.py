"""Who is there: the presence records of an elastic gang's frames (``--min-world-size``).

A frame whose node agent waits to join the next gang generation says so in
``RUN_DIR/rendezvous/frames/frame_F.json`` (:class:`Presence`, version 1, written atomically and
refreshed every :data:`REFRESH_S` seconds while it waits; removed when it joins). Frame 0 reads them:

- forming a generation after a failure (:func:`gather`), it waits up to the elastic window for
  every frame; then it goes on with the frames that are there when they hold at least
  ``min_world_size`` ranks, else it keeps waiting (the rendezvous timeout bounds it);
- while a shrunk generation trains, a frame that is back (a fresh record of a frame outside the
  generation, :func:`returned`) makes frame 0 ask its trainer to regroup: the gang stops at its
  next periodic checkpoint (SIGUSR1, exit 79) and the next generation has every frame again.

A record is *fresh* when written less than :data:`FRESH_S` seconds ago by the writer's clock. That
compares two hosts' clocks: farms run NTP, and :data:`FRESH_S` leaves seconds of skew; a record of a
dead agent goes stale after it. The run directory is on shared storage; over NFS a new file may
be seen up to the client's ``acdirmax`` later, which only delays a regroup.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from trainer.record.rundir import RunDirError, RunPaths, atomic_write_json

log = logging.getLogger("cue_plugin.membership")

PRESENCE_VERSION = 1
REFRESH_S = 2.0  # seconds between refreshes of a waiting frame's record
FRESH_S = 15.0  # a record older than this [s] belongs to an agent that is gone
GATHER_POLL_S = 0.5  # seconds between frame 0's looks while it gathers a generation


@dataclass(frozen=True)
class Presence:
    """One waiting frame's record.

    Attributes:
        frame: the frame number.
        agent: ``host:pid`` of the node agent.
        after_generation: the generation the frame waits to follow (it joins any later one) [generation].
        at: when it was written, Unix time [s].
        version: record version (:data:`PRESENCE_VERSION`).
    """

    frame: int
    agent: str
    after_generation: int
    at: float
    version: int = PRESENCE_VERSION

    @classmethod
    def read(cls, path: os.PathLike[str] | str) -> "Presence | None":
        """The record in ``path``; None when missing or not a record."""
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            return cls(int(data["frame"]), str(data["agent"]), int(data["after_generation"]), float(data["at"]),
                       int(data.get("version", PRESENCE_VERSION)))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def fresh(self, now: float | None = None) -> bool:
        """True when written less than :data:`FRESH_S` seconds before ``now`` (default: this host's clock)."""
        return (time.time() if now is None else now) - self.at < FRESH_S


def waiting(paths: RunPaths, frames: int, now: float | None = None) -> dict[int, Presence]:
    """Fresh presence records of frames ``1 .. frames-1``, by frame number."""
    out: dict[int, Presence] = {}
    for frame in range(1, frames):
        record = Presence.read(paths.presence(frame))
        if record is not None and record.frame == frame and record.fresh(now):
            out[frame] = record
    return out


@contextlib.contextmanager
def present(paths: RunPaths, frame: int, after_generation: int) -> Iterator[None]:
    """Keep frame ``frame``'s presence record fresh while the block runs (the agent waits); remove it after.

    Write errors are logged, not raised: without the record this frame is only seen later."""
    stop = threading.Event()
    agent = f"{socket.gethostname()}:{os.getpid()}"

    def refresh() -> None:
        while True:
            try:
                paths.presence(frame).parent.mkdir(mode=0o750, parents=True, exist_ok=True)
                atomic_write_json(paths.presence(frame), {"version": PRESENCE_VERSION, "frame": frame, "agent": agent,
                                                          "after_generation": after_generation, "at": time.time()})
            except (OSError, RunDirError) as exc:
                log.warning("frame %d cannot write its presence record: %s", frame, exc)
            if stop.wait(REFRESH_S):
                return

    thread = threading.Thread(target=refresh, name=f"presence-{frame}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        with contextlib.suppress(OSError):
            paths.presence(frame).unlink()


def gather(paths: RunPaths, frames: int, min_frames: int, window_s: float, timeout_s: float,
           clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> tuple[int, ...]:
    """Frame 0 forming an elastic generation after a failure: the frames to run it with, in rank order.

    Waits until every frame ``1 .. frames-1`` has a fresh record (returns all), or ``window_s`` seconds
    have passed with at least ``min_frames`` frames (frame 0 included) present (returns those).

    Raises:
        TimeoutError: fewer than ``min_frames`` frames after ``timeout_s`` seconds (names who is missing).
    """
    start = clock()
    last_logged: tuple[int, ...] = ()
    while True:
        members = (0, *sorted(waiting(paths, frames)))
        elapsed = clock() - start
        if len(members) == frames or (elapsed >= window_s and len(members) >= min_frames):
            return members
        missing = sorted(set(range(frames)) - set(members))
        if elapsed >= timeout_s:
            raise TimeoutError(f"only frames {list(members)} came back within {timeout_s:.0f} s, the gang needs at "
                               f"least {min_frames} frames (--min-world-size); missing: {missing}")
        if members != last_logged:
            log.info("frame 0 gathers the next generation: frames %s here, waiting for %s (%.0f of %.0f s window)",
                     list(members), missing, elapsed, window_s)
            last_logged = members
        sleep(GATHER_POLL_S)


def returned(paths: RunPaths, frames: int, members: tuple[int, ...]) -> list[int]:
    """Frames outside the generation ``members`` that wait to join (fresh records), sorted (none when
    ``members`` is empty: every frame is in)."""
    return sorted(f for f in waiting(paths, frames) if f not in members) if members else []

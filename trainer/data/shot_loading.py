"""The data phase of an attempt: list the shot, decode it once per host, agree across the gang, record it.

:func:`open_data` runs on every rank before the model is built:

1. Rank 0 lists and signs the shot (``trainer.data.shot.list_shot``; with ``--resume`` cut to the frames the run
   recorded in ``run.json`` ``data.shot``; the Ground Truth ``--scale`` times the Input) and publishes the listing
   on the gang's store; every rank trains on rank 0's listing and checks that its own host sees the same files.
2. Every rank opens the host's decoded copy on local scratch (``trainer.data.hostcache``) and decodes its share of
   the frames no rank of the host has decoded yet; so a host reads the shot once, whatever its ranks.
3. The ranks exchange their results on the store (waiting as long as every rank's heartbeat moves, so a slow
   host is not a timeout): when any rank failed, every rank raises that rank's error, which names the file
   and the rank, so the gang fails as one with one message and nobody hangs in a collective.
4. Rank 0 records ``run.json`` ``data`` (``trainer.record.runrecord``): the shot (with the channels read from
   each side, ``--input-channels`` / ``--target-channels``), the channel plan, the cache, and per host the bytes
   its ranks read during the phase (``/proc/self/io``, ``trainer.core.procstat``) and the bytes of shot files they
   decoded.

While training, :class:`ShotWatch` signs the shot's files again every ``--shot-check-s`` seconds on a
background thread, and every ``--log-interval`` steps the gang agrees (a MAX all-reduce on a gloo group of its
own) whether a rank saw a file deleted, truncated or rewritten: then every rank raises
:class:`~trainer.data.shot.ShotChanged` (exit 80) with the message of the lowest such rank, the node agent
restarts the gang from its checkpoint, and the next attempt's data phase reads the shot again (step 1 fails
with the same exit code while a recorded frame is still missing, until the restart budget is spent).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from trainer.core import procstat
from trainer.record import runrecord
from trainer.data.colour import ColourSpec
from trainer.core.config import TrainConfig
from trainer.gang.distributed import Runtime, side_group
from trainer.core.envvars import read_scratch
from trainer.core.exitcodes import ExitCode
from trainer.gang.formation import RankLost
from trainer.data.hostcache import HostCache
from trainer.data.tiles import TILE
from trainer.data.images import DataError
from trainer.record.rundir import RunPaths
from trainer.data.shot import Shot, ShotChanged, list_shot

log = logging.getLogger(__name__)

WAIT_LOG_S = 30.0  # seconds between "waiting for ranks to finish the data phase" lines
STALE_S = 30.0  # a rank whose heartbeat did not move for this long is gone [s]


@dataclass
class Data:
    """What :func:`open_data` returns: the crop source and the watch to pass to ``CropSampler(check=...)``."""

    source: HostCache
    watch: "ShotWatch"

    def close(self) -> None:
        """Stop the watch and close the host copy's files."""
        self.watch.close()
        self.source.close()


def _who(rt: Runtime) -> str:
    return f"rank {rt.env.rank} (host {socket.gethostname()})"


def _wait(rt: Runtime, keys: list[str], what: str) -> None:
    """Wait for ``keys`` on the store while the ranks that owe them are alive (heartbeats)."""
    t0, told = time.monotonic(), 0.0
    while True:
        try:
            missing = [k for k in keys if not rt.store.check([k])]
        except Exception as exc:  # noqa: BLE001 - c10d errors: rank 0's store is gone
            raise RankLost(f"{_who(rt)} lost rank 0 during the data phase ({str(exc)[:200]}); exiting so the farm "
                           "restarts the gang") from None
        if not missing:
            return
        gone = [r for r in (rt.heartbeat.stale(STALE_S) if rt.heartbeat else []) if f"{what}/{r}" in missing]
        if gone:
            raise RankLost(f"{_who(rt)} lost rank {', '.join(map(str, gone))} during the data phase (no heartbeat for "
                           f"{STALE_S:.0f} s); exiting so the farm restarts the gang")
        if time.monotonic() - t0 - told >= WAIT_LOG_S:
            told = time.monotonic() - t0
            log.info("waiting for %s to finish reading the shot (%.0f s)", ", ".join(missing), told)
        try:
            rt.store.wait(missing, timedelta(seconds=2))
        except Exception:  # noqa: BLE001 - c10d raises on a wait timeout; loop to look again
            pass


def _exchange(rt: Runtime, what: str, value: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's ``value``, in rank order (through the gang's store; just ``[value]`` alone)."""
    if rt.backend == "none":
        return [value]
    rt.store.set(f"{what}/{rt.env.rank}", json.dumps(value))
    keys = [f"{what}/{r}" for r in range(rt.env.world_size)]
    _wait(rt, keys, what)
    return [json.loads(rt.store.get(k)) for k in keys]


def _agreed_shot(cfg: TrainConfig, rt: Runtime, paths: RunPaths) -> Shot:
    """Rank 0's listing (module doc, step 1), checked against what this rank sees."""
    if rt.env.is_main:
        try:
            recorded = runrecord.read_record_or_empty(paths).data.get("shot") if cfg.resume else None
            # checks GT = scale x Input, and that the first pair has the named channels
            shot = list_shot(cfg.input_dir, cfg.target_dir, recorded, scale=cfg.scale, channels=cfg.channels)
            published = {"shot": shot.to_json()}
        except DataError as exc:
            published = {"error": f"{_who(rt)}: {exc}", "changed": isinstance(exc, ShotChanged)}
        if rt.backend != "none":
            rt.store.set("shot/0", json.dumps(published))
    else:
        _wait(rt, ["shot/0"], "shot")
        published = json.loads(rt.store.get("shot/0"))
    if "error" in published:
        err = (ShotChanged if published["changed"] else DataError)(published["error"])
        err.named = True  # rank 0's message names rank 0 already
        raise err
    shot = Shot.from_json(published["shot"])
    problem = shot.changes()  # this host's view of the file server
    if problem:
        raise ShotChanged(f"{problem} (compared with rank 0's listing)")
    return shot


def _phase(cfg: TrainConfig, rt: Runtime, colour: ColourSpec, paths: RunPaths) -> tuple[HostCache, dict[str, Any]]:
    t0, io0 = time.monotonic(), procstat.io_counters()
    shot = _agreed_shot(cfg, rt, paths)
    cache = HostCache(read_scratch(), shot, colour, cfg.data_cache_mb)
    try:
        frames = cache.build(start=rt.env.rank * cache.count // rt.env.world_size)
        io1 = procstat.io_counters()  # the shot's files are read; what follows reads the local copy
        resident = cache.load_resident()
    except BaseException:
        cache.close()
        raise
    return cache, {"rank": rt.env.rank, "host": socket.gethostname(), "frames": frames, "resident": resident,
                   "decoded_bytes": cache.decoded_bytes, "seconds": round(time.monotonic() - t0, 3),
                   **{k: io1.get(k, 0) - io0.get(k, 0) for k in ("rchar", "read_bytes")}}


def open_data(cfg: TrainConfig, rt: Runtime, colour: ColourSpec, paths: RunPaths) -> Data:
    """The data phase (module doc) of this rank. Returns the crop source and the shot watch.

    Raises:
        DataError: bad input on any rank (the message names the rank and the file; exit code 2).
        ShotChanged: a file changed under the run, on any rank (exit code 80).
        ScratchError: local scratch cannot hold the decoded shot.
        RankLost: a rank died during the phase.
    """
    colour.check()  # the same on every rank: raises before anybody waits
    cache, mine, error = None, {}, None
    try:
        cache, mine = _phase(cfg, rt, colour, paths)
    except (DataError, OSError) as exc:
        error = exc
        mine = {"rank": rt.env.rank, "changed": isinstance(exc, ShotChanged),
                "error": str(exc) if getattr(exc, "named", False) else f"{_who(rt)}: {exc}"}
    results = _exchange(rt, "data", mine)
    failed = next((r for r in results if "error" in r), None)
    if failed is not None:  # every rank fails with the lowest failed rank's message
        if cache is not None:
            cache.close()
        if rt.env.is_main:
            _record_failure(paths, failed)
        own = error is not None and failed["rank"] == rt.env.rank
        kind = ShotChanged if failed["changed"] else type(error) if own else DataError
        raise kind(failed["error"]) from error
    if rt.env.is_main:
        runrecord.update_record(paths, data=_record(cfg, cache, results))
    hosts = _hosts(results, cache.shot.bytes)
    reads = "; ".join(f"host {h}: ranks {v['ranks']} read the shot {v['shot_reads']:.2f} time(s)"
                      for h, v in hosts.items())
    plan = cache.shot.channels
    log.info("data phase: %d pairs of %dx%d (Ground Truth %dx%d, --scale %d; channels %s -> %s, %s), %.2f GiB of "
             "files; %s", cache.count, cache.shot.width, cache.shot.height, *cache.shot.target_size, cache.scale,
             ",".join(plan.inputs), ",".join(plan.targets), plan.task, cache.shot.bytes / 2**30, reads)
    return Data(cache, ShotWatch(cache.shot, _who(rt), rt, cfg.log_interval, cfg.shot_check_s))


def _hosts(results: list[dict[str, Any]], shot_bytes: int) -> dict[str, dict[str, Any]]:
    """Per host: ranks, frames decoded, bytes decoded, /proc/self/io rchar and read_bytes summed, shot reads."""
    hosts: dict[str, dict[str, Any]] = {}
    for r in results:
        h = hosts.setdefault(r["host"], {"ranks": [], "frames": 0, "decoded_bytes": 0, "rchar": 0, "read_bytes": 0})
        h["ranks"].append(r["rank"])
        for k in ("frames", "decoded_bytes", "rchar", "read_bytes"):
            h[k] += r[k]
    for h in hosts.values():
        h["shot_reads"] = round(h["decoded_bytes"] / shot_bytes, 3) if shot_bytes else 0.0
    return hosts


def _record(cfg: TrainConfig, cache: HostCache, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"shot": cache.shot.record(), "scale": cache.scale, "channels": cache.shot.channels.to_dict(),
            "hosts": _hosts(results, cache.shot.bytes),
            "cache": {"source": "host copy on local scratch", "data_cache_mb": cfg.data_cache_mb,
                      "folder": str(cache.folder), "bytes": cache.bytes, "tile": TILE},
            "seconds": max(r["seconds"] for r in results)}


def _record_failure(paths: RunPaths, failed: dict[str, Any]) -> None:
    """Rank 0 records the data phase's failure in ``run.json`` (the trainer's writer has not started yet) when the
    run has a record (a restart or resume: the node agent and the Runs panel read it); bad data on a fresh run
    writes nothing, as every bad input before the first attempt (the error names the file)."""
    if not paths.run_json.exists():
        return
    kind = runrecord.FailureKind.DATA_CHANGED if failed["changed"] else runrecord.FailureKind.ERROR
    code = ShotChanged.exit_code if failed["changed"] else int(ExitCode.USAGE)
    runrecord.update_record(paths, state="failed", error=failed["error"], failure_kind=kind.value, exit_code=code,
                            failed_rank=failed["rank"], failed_at=runrecord.now_iso())


class ShotWatch:
    """Watches the shot's files during training (module doc); call it with the step before each batch.

    Args:
        shot: the shot as listed.
        who: this rank, for messages ("rank 3 (host node7)").
        rt: the runtime (its store carries the messages; a gloo group of its own carries the vote).
        every: steps between the gang's votes [steps].
        interval_s: seconds between looks at the files [s].
    """

    def __init__(self, shot: Shot, who: str, rt: Runtime, every: int, interval_s: float) -> None:
        self.shot, self.who, self.rt, self.every = shot, who, rt, every
        self.problem = ""
        self._stop = threading.Event()
        self._group = side_group(rt) if rt.backend != "none" else None
        self._thread = threading.Thread(target=self._look, args=(interval_s,), name="shot-watch", daemon=True)
        self._thread.start()

    def _look(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s) and not self.problem:
            change = self.shot.changes()
            if change:
                self.problem = f"{self.who}: {change} after training started"
                log.error("%s", self.problem)

    def __call__(self, step: int) -> None:
        """Raise :class:`ShotChanged` on every rank at ``step`` when any rank saw a change (a vote every ``every``
        steps).

        Raises:
            ShotChanged: the message of the lowest rank that saw a change.
        """
        if step % self.every:
            return
        problem = self.problem
        if self._group is None:
            if problem:
                raise ShotChanged(problem)
            return
        if problem:
            self.rt.store.set(f"shotwatch/{step}/{self.rt.env.rank}", problem)
        flag = torch.tensor([1 if problem else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        if int(flag.item()):
            keys = [f"shotwatch/{step}/{r}" for r in range(self.rt.env.world_size)]
            first = next(k for k in keys if self.rt.store.check([k]))
            raise ShotChanged(self.rt.store.get(first).decode())

    def close(self) -> None:
        """Stop looking (idempotent)."""
        self._stop.set()

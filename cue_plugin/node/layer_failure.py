"""Frame 0 failing the whole training layer when its gang cannot form (see ``cue_plugin.node.frame``'s
"Gang timeout"): failure notice, ``run.json`` ``gang_failure``, and the layer's frames eaten through
pycue so that none holds a host or is retried into another wait.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Callable

from cue_plugin.names import TRAIN_LAYER as LAYER_NAME
from cue_plugin.node import rendezvous
from cue_plugin.node.publication import Publication
from trainer.record import runrecord
from trainer.core.envvars import CueFrameEnv
from trainer.record.rundir import RunDirError, RunPaths

log = logging.getLogger("cue_plugin.frame")  # the frame's records: its RankLog handler is on "cue_plugin"

NOTICE_GRACE_S = 3.0  # seconds frame 0 leaves waiting ranks to read its failure notice before eating the layer
CUEBOT_TIMEOUT_S = 10.0  # deadline of frame 0's pycue calls [s] (pycue's default is hours)


def gang_incomplete(paths: RunPaths) -> str:
    """Rank 0's ``run.json`` error when its trainer failed with ``failure_kind`` gang_incomplete, else "".

    (Exit code 3 on rank 0 is also "cannot listen on the port"; only an incomplete gang fails the layer.)
    """
    record = runrecord.read_record_or_empty(paths)
    incomplete = record.state == "failed" and record.kind is runrecord.FailureKind.GANG_INCOMPLETE
    return (record.error or "gang incomplete") if incomplete else ""


def eat_layer(job: str, layer: str, timeout_s: float = CUEBOT_TIMEOUT_S) -> None:
    """Eat every frame of ``job``/``layer`` through pycue (Cuebot kills the running ones).

    Raises:
        ImportError: pycue is not installed for this interpreter.
        Exception: pycue/gRPC errors (Cuebot unreachable, job not found).
    """
    import opencue

    opencue.Cuebot.setTimeout(timeout_s)  # gRPC deadline [s]
    opencue.api.findLayer(job, layer).eat()


def fail_layer(paths: RunPaths, pub: Publication, reason: str, cue: CueFrameEnv, token: str | None,
               notice: rendezvous.FileSource, eat: Callable[[str, str], None] | None = None) -> None:
    """Frame 0 after a gang timeout: failure notice, ``run.json`` ``gang_failure``, eat the layer (module doc)."""
    layer = cue.layer or LAYER_NAME
    log.error("%s", reason)
    log.error("frame 0 fails the whole layer %r of job %r: the gang cannot form, so no frame of it should hold a "
              "host or be retried into another wait", layer, cue.job or "?")
    try:
        notice.fail(pub, reason, token)
    except rendezvous.RendezvousError as exc:
        log.error("%s; waiting ranks will not learn why they stop", exc)
    record = {"reason": reason, "at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "attempt": pub.attempt,
              "layer": layer, "job": cue.job}
    if not cue.job:
        _record_failure(paths, {**record, "cuebot": "not failed in Cuebot: CUE_JOB is not set (not run by RQD)"})
        log.error("CUE_JOB is not set (not run by RQD): no layer to fail in Cuebot")
        return
    time.sleep(NOTICE_GRACE_S)  # waiting ranks read the notice and log why they stop
    action = f"eating the frames of {cue.job}/{layer} through Cuebot (pycue)"
    _record_failure(paths, {**record, "cuebot": action})
    log.error("%s; this frame is stopped by it too", action)
    try:
        (eat or eat_layer)(cue.job, layer)
    except Exception as exc:  # noqa: BLE001 - ImportError, CueException, grpc.RpcError: all mean "could not"
        action = (f"could not fail the layer through pycue ({type(exc).__name__}: {' '.join(str(exc).split())[:300]}); "
                  "check CUEBOT_HOSTS / opencue.yaml on the render node. Frames still waiting will start, read "
                  "frame 0's failure notice and stop; kill the job with `cuetrain cancel RUN_DIR` or in CueGUI")
        log.error("%s", action)
        _record_failure(paths, {**record, "cuebot": action})
        return
    log.error("layer %s of job %s eaten: frames stopped and not retried", layer, cue.job)
    _record_failure(paths, {**record, "cuebot": f"ate the frames of {cue.job}/{layer}"})


def _record_failure(paths: RunPaths, record: dict[str, str]) -> None:
    try:
        runrecord.update_record(paths, gang_failure=record)
    except RunDirError as exc:
        log.error("cannot record the gang failure in run.json: %s", exc)

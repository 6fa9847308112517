"""The JSON the farm commands print with ``--json`` and the GUI reads back (one codec, both sides).

The GUI runs ``cuetrain submit|status|cancel|retry --json`` in the cuetrain environment
(:mod:`gui.farm_process`) and never imports pycue, grpc or torch; these functions turn jobs, handles and
statuses into plain JSON and back. Pure Python: imports only :mod:`cue_plugin.submit.spec` and
:mod:`trainer.core.config`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from cue_plugin.submit.spec import FarmError, InferenceLayer, JobHandle, JobStatus, RunState, TrainingJob
from trainer.core.config import TrainConfig


def emit(obj: Mapping[str, Any]) -> int:
    """Print ``obj`` as one JSON line on stdout; returns 0 (the exit code of a command that succeeded)."""
    print(json.dumps(obj, sort_keys=True), flush=True)
    return 0


def job_to_json(job: TrainingJob) -> str:
    """``job`` as JSON: ``{"train": {TrainConfig fields}, <TrainingJob fields>}``."""
    return json.dumps(dataclasses.asdict(job), sort_keys=True)


def job_from_json(text: str) -> TrainingJob:
    """The job :func:`job_to_json` wrote (with its ``infer`` layer, when it has one).

    Raises:
        FarmError: not JSON, or fields that :class:`TrainingJob`/:class:`TrainConfig` do not have
            (the message names them).
    """
    try:
        data = json.loads(text)
        train = TrainConfig(**data.pop("train"))
        if "tags" in data:
            data["tags"] = tuple(data["tags"])
        if data.get("infer") is not None:  # the optional inference layer (cue_plugin.submit.infer)
            infer = dict(data["infer"])
            infer["frames"] = tuple(infer.get("frames", ()))
            data["infer"] = InferenceLayer(**infer)
        return TrainingJob(train=train, **data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise FarmError(f"--job-json is not a cuetrain job ({type(exc).__name__}: {exc}); "
                        "write it with cue_plugin.submit.jsonout.job_to_json") from exc


def handle_dict(handle: JobHandle) -> dict[str, str]:
    """``{"job_id", "job_name", "run_dir"}``."""
    return dataclasses.asdict(handle)


def handle_from(data: Mapping[str, Any]) -> JobHandle:
    """The handle :func:`handle_dict` wrote."""
    return JobHandle(str(data.get("job_id", "")), str(data.get("job_name", "")), str(data.get("run_dir", "")))


def status_dict(status: JobStatus) -> dict[str, Any]:
    """``{"state": RunState value, "ranks_running", "ranks_total", "native_state", "frames"}``."""
    return {"state": status.state.value, "ranks_running": status.ranks_running, "ranks_total": status.ranks_total,
            "native_state": status.native_state, "frames": {k: dict(v) for k, v in status.frames.items()}}


def status_from(data: Mapping[str, Any]) -> JobStatus:
    """The status :func:`status_dict` wrote (an unknown state becomes :attr:`RunState.UNKNOWN`)."""
    try:
        state = RunState(data.get("state"))
    except ValueError:
        state = RunState.UNKNOWN
    return JobStatus(state=state, ranks_running=int(data.get("ranks_running", 0)),
                     ranks_total=int(data.get("ranks_total", 0)), native_state=str(data.get("native_state", "")),
                     frames=dict(data.get("frames") or {}))

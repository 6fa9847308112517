"""Job spec XML (the cjsl DTD that pyoutline serializes) -> job records, as Cuebot's JobSpec does.

Mirrored from Cuebot (service/JobSpec.java, util/CueUtil.java):
- job name `show-shot-user_name`, lower case, `-` in the name part turned into `_`;
- shot and layer names conformed to `[\\w.]{3,}` (lower case, `-` -> `_`);
- `maxretries` clamped to [FRAME_RETRIES_MIN, FRAME_RETRIES_MAX] = [0, 1];
- `cores` as "1.0" (cores) or "100" (core units); memory "4g" / "512m" / "4" (GB) -> KB;
- frames: the layer range as a FrameSet, every `chunk`-th frame, named `%04d-layer`;
- the frame dispatch order interleaves layers: frame index first, then layer order.

Differences, on purpose:
- every service resolves to Cuebot's seeded "default" service values (1 core, 3.2 GB,
  tag "general", not threadable); the service names are kept on the layer;
- the spec uid is kept for display only; the double runs frames as its configured frame user
  (a root test process would otherwise submit uid 0, which Cuebot rejects);
- POST layers, `<localbook>` and `<depends>` entries other than a LAYER_ON_LAYER between two layers
  of one job are refused with `NotSupported`.

Layer-on-layer depends (JobSpec.handleDependTag; DependManagerService.createDepend(LayerOnLayer)
raises the depend count of every frame of the depending layer, so they start in DEPEND; the
depend is satisfied when a frame of the layer it is on SUCCEEDS and that layer is then complete:
no frame WAITING, RUNNING, DEAD or DEPEND (FrameCompleteHandler.satisfyDependsAndCompleteLayerAndJob,
LayerDaoJdbc.IS_LAYER_COMPLETE); see records.FarmState.satisfy_layer_depends.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from xml.etree import ElementTree

import FileSequence
from opencue_proto import job_pb2

from tests.cuebot.records import FrameRecord, JobRecord, LayerRecord, new_id

NAME_PATTERN = re.compile(r"^[\w.]{3,}$")
FRAME_RETRIES_MIN, FRAME_RETRIES_MAX = 0, 1
CORE_POINTS_RESERVED_MIN, CORE_POINTS_RESERVED_DEFAULT = 10, 100
MEM_RESERVED_MIN, MEM_RESERVED_DEFAULT = 262144, 3355443  # KB
GB = 1048576  # KB
DEFAULT_SERVICE = dict(min_cores=100, max_cores=0, min_memory=MEM_RESERVED_DEFAULT,
                       threadable=False, tags=["general"])


class SpecError(ValueError):
    """The spec is invalid; Cuebot answers such specs with an error too."""


class NotSupported(SpecError):
    """Valid for Cuebot, but a feature the double does not model."""


def conform_name(kind: str, name: str) -> str:
    conformed = name.replace("-", "_").lower()
    if len(name) < 3 or not NAME_PATTERN.match(conformed):
        raise SpecError(f"The {kind.lower()} name: {name!r} is not in the proper format")
    return conformed


def conform_job_name(name: str, show: str, shot: str, user: str) -> str:
    prefix = f"{show}-{shot}-{user}_"
    suffix = name[len(prefix) - 1:] if name.startswith(prefix) else name
    suffix = re.sub("_{2,}", "_", suffix.lower()).replace("-", "_")
    if not NAME_PATTERN.match(suffix):
        raise SpecError(f"The job name suffix: {suffix} must be composed of alpha numeric "
                        "characters, periods, and underscores and be at least 3 characters long")
    return f"{prefix.rstrip('_')}_{suffix.lstrip('_')}".lower()


def to_bool(text: str | None) -> bool:
    return (text or "").strip().lower() in ("true", "1", "yes", "on")


def memory_kb(text: str) -> int:
    text = text.strip().lower()
    if "m" in text:
        kb = int(float(text[:text.rindex("m")]) * 1024)
    elif "g" in text:
        kb = int(text[:text.rindex("g")]) * GB
    else:
        kb = int(text) * GB
    return max(kb, MEM_RESERVED_MIN)


def core_units(text: str) -> int:
    points = int(float(text) * 100 + .5) if "." in text else int(text)
    return CORE_POINTS_RESERVED_DEFAULT if points < CORE_POINTS_RESERVED_MIN else points


def frame_numbers(frame_range: str, chunk: int) -> list[int]:
    """Frames that get a record: every `chunk`-th of the range (CueUtil.normalizeFrameRange)."""
    try:
        frames = list(dict.fromkeys(FileSequence.FrameSet(frame_range).getAll()))
    except Exception as exc:
        raise SpecError(f"error, the range {frame_range} is invalid") from exc
    return frames[::max(chunk, 1)]


def env_of(element: ElementTree.Element | None) -> dict[str, str]:
    if element is None:
        return {}
    return {key.get("name"): (key.text or "").strip()
            for key in element.findall("key") if key.get("name") is not None}


def text(element: ElementTree.Element, tag: str, default: str | None = None) -> str | None:
    child = element.find(tag)
    if child is None or child.text is None:
        return default
    return child.text.strip()


def parse_spec(spec: str, *, log_root: Path, retries_max: int = FRAME_RETRIES_MAX) -> list[JobRecord]:
    """Parse a job spec into job records (state PENDING, frames WAITING); `maxretries` is clamped to
    [FRAME_RETRIES_MIN, retries_max] (JobSpec.FRAME_RETRIES_MAX = 1 unless a facility sets it, #2477)."""
    try:
        root = ElementTree.fromstring(spec.encode())
    except ElementTree.ParseError as exc:
        raise SpecError(f"Failed to parse job spec XML, {exc}") from exc
    show, user = text(root, "show", ""), text(root, "user", "")
    shot = conform_name("Shot", text(root, "shot", ""))
    jobs = [_parse_job(tag, show, shot, user, root, log_root, retries_max) for tag in root.findall("job")]
    if not jobs:
        raise SpecError("The spec has no jobs")
    for depend in root.findall("depends/depend"):
        _layer_on_layer(depend, jobs, show, shot, user)
    return jobs


def _layer_on_layer(tag, jobs: list[JobRecord], show, shot, user) -> None:
    """Apply one <depend>: only LAYER_ON_LAYER inside one job (its frames start in DEPEND)."""
    kind = (tag.get("type") or "").upper()
    names = {key: text(tag, key, "") for key in ("depjob", "deplayer", "onjob", "onlayer")}
    if kind != "LAYER_ON_LAYER" or to_bool(tag.get("anyframe")) or names["depjob"] != names["onjob"]:
        raise NotSupported(f"CuebotDouble models only LAYER_ON_LAYER depends within one job, not {kind} {names}")
    job_name = conform_job_name(names["depjob"], show, shot, user)
    job = next((j for j in jobs if j.name == job_name), None)
    layers = {layer.name: layer for layer in job.layers} if job else {}
    er, on = (layers.get(conform_name("Layer", names[k])) for k in ("deplayer", "onlayer"))
    if er is None or on is None:
        raise SpecError(f"error, the depend {names} names an unknown job or layer")
    if er is on:
        raise SpecError(f"error, the layer {er.name} cannot depend on itself")
    er.depend_on.append(on.id)
    for frame in job.frames:
        if frame.layer_id == er.id:
            frame.state = job_pb2.DEPEND


def _parse_job(tag, show, shot, user, root, log_root: Path, retries_max: int) -> JobRecord:
    name = conform_job_name(tag.get("name") or "", show, shot, user)
    if tag.find("localbook") is not None:
        raise NotSupported("CuebotDouble does not model local booking (<localbook>)")
    retries = int(text(tag, "maxretries", str(retries_max)))
    job_id = new_id()
    job = JobRecord(
        id=job_id, name=name, show=show, shot=shot, user=user,
        uid=int(text(root, "uid", "0")), facility=(text(root, "facility", "") or "").lower(),
        os=text(tag, "os", ""), priority=int(text(tag, "priority", "1")),
        paused=to_bool(text(tag, "paused")), auto_eat=to_bool(text(tag, "autoeat")),
        max_retries=min(max(retries, FRAME_RETRIES_MIN), retries_max),
        log_dir=os.path.join(log_root, show, shot, "logs", f"{name}--{job_id}"),
        env=env_of(tag.find("env")), layers=[], frames=[])
    layers_tag = tag.find("layers")
    for order, layer_tag in enumerate([] if layers_tag is None else layers_tag, start=1):
        layer = _parse_layer(layer_tag, job, order)
        if any(other.name == layer.name for other in job.layers):
            raise SpecError(f"error, the layer {layer.name} was already defined in job {name}")
        job.layers.append(layer)
        job.frames.extend(
            FrameRecord(id=new_id(), job_id=job.id, layer_id=layer.id,
                        name="%04d-%s" % (number, layer.name), number=number,
                        dispatch_order=index, reserved_memory=layer.min_memory)
            for index, number in enumerate(frame_numbers(layer.range, layer.chunk_size)))
    if not job.layers:
        raise SpecError(f"The job {name} has no layers")
    layer_order = {layer.id: layer.dispatch_order for layer in job.layers}
    job.frames.sort(key=lambda f: (f.dispatch_order, layer_order[f.layer_id]))
    return job


def _parse_layer(tag, job: JobRecord, order: int) -> LayerRecord:
    layer_type = (tag.get("type") or "").upper()
    if layer_type not in job_pb2.LayerType.keys():
        raise SpecError(f"error, the layer {tag.get('name')} has an invalid type: {layer_type}")
    if layer_type == "POST":
        raise NotSupported("CuebotDouble does not model post jobs (POST layers)")
    services = list(dict.fromkeys(
        s.text.strip() for s in tag.findall("services/service") if s.text and s.text.strip()))
    if "default" not in services:
        services.append("default")  # no service is known to the double: default applies
    min_cores = DEFAULT_SERVICE["min_cores"]
    if text(tag, "cores") is not None:
        min_cores = core_units(text(tag, "cores"))
    threadable = DEFAULT_SERVICE["threadable"]
    if min_cores < 100:
        threadable = False
    elif text(tag, "threadable") is not None:
        threadable = to_bool(text(tag, "threadable"))
    tags = DEFAULT_SERVICE["tags"]
    if text(tag, "tags"):
        tags = list(dict.fromkeys(text(tag, "tags").replace(" ", "").split("|")))
        if not all(NAME_PATTERN.match(t) for t in tags):
            raise SpecError(f"error, invalid tags {tags}")
    return LayerRecord(
        id=new_id(), job_id=job.id, name=conform_name("Layer", tag.get("name") or ""),
        type=job_pb2.LayerType.Value(layer_type), command=text(tag, "cmd", ""),
        range=text(tag, "range", ""), chunk_size=int(text(tag, "chunk", "1")),
        dispatch_order=order, min_cores=min_cores, max_cores=DEFAULT_SERVICE["max_cores"],
        min_memory=memory_kb(text(tag, "memory")) if text(tag, "memory")
        else DEFAULT_SERVICE["min_memory"],
        min_gpus=int(text(tag, "gpus", "0")),
        min_gpu_memory=memory_kb(text(tag, "gpu_memory")) if text(tag, "gpu_memory") else 0,
        threadable=threadable, tags=tags, services=services, env=env_of(tag.find("env")),
        timeout=int(text(tag, "timeout", "0")), timeout_llu=int(text(tag, "timeout_llu", "0")))

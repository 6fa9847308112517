"""Farm resource templates: named TOML files of TrainingJob defaults (``farm_templates/*.toml``).

A template fixes what a kind of render node offers (service, tags, cores, memory, GPUs) and the
run's farm settings (retries, priority, default world size, rendezvous). A job is made from three
layers, later wins: the :class:`~cue_plugin.submit.spec.TrainingJob` defaults < the template < explicit
values (CLI flags, GUI fields). Example ``farm_templates/gpu-small.toml``::

    description = "2 ranks x 1 GPU (12 GiB), 4 cores, 24 GiB RAM"
    service = "cuetrain-gpu"
    tags = ["gpu"]
    cores = 4.0
    memory_mb = 24576
    gpus = 1
    gpu_memory_mb = 12288
    world_size = 2

``cores``, ``memory_mb``, ``gpus`` and ``gpu_memory_mb`` are per rank; so is ``data_cache_mb``, the trainer's
``--data-cache-mb`` on this kind of node (decoded frames a rank keeps in memory), which the job builder checks
against ``memory_mb`` (``cue_plugin.submit.builder.check_rank_memory``). ``ranks_per_frame = L`` (default
1) puts L ranks on each frame (one multi-GPU or many-core node): the layer then has ``world_size / L``
frames, each reserving L x the per-rank resources (``farm_templates/gpu-node-4x.toml``).

Templates are searched in ``CUETRAIN_TEMPLATE_PATH`` folders first (studio overrides), then in the
``farm_templates/`` folder of this checkout. Unknown keys fail loudly and list the valid ones.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from cue_plugin.submit.spec import FarmError, TrainingJob
from trainer.core.config import DEFAULT_DATA_CACHE_MB, PRECISIONS, TrainConfig
from trainer.core.envvars import read_farm_env

#: The built-in templates (next to this package in the checkout).
BUILTIN_FOLDER = Path(__file__).resolve().parents[2] / "farm_templates"

#: Template key -> accepted Python type(s) after TOML parsing. ``world_size`` is the default size.
TEMPLATE_KEYS: dict[str, tuple[type, ...]] = {
    "service": (str,),
    "tags": (list, tuple),
    "cores": (int, float),
    "memory_mb": (int,),
    "gpus": (int,),
    "gpu_memory_mb": (int,),
    "max_retries": (int,),
    "priority": (int,),
    "world_size": (int,),
    "ranks_per_frame": (int,),
    "sync_interval": (int,),
    "rendezvous": (str,),
    "rendezvous_timeout_s": (int, float),
    "max_restarts": (int,),
    "min_world_size": (int,),
    "elastic_window_s": (int, float),
    "precision": (str,),  # the trainer's --precision for this kind of node; applied to the TrainConfig
    "data_cache_mb": (int,),  # the trainer's --data-cache-mb for this kind of node [MiB]; applied to the TrainConfig
}
#: Keys that describe the template itself (not job values).
META_KEYS = ("description",)
#: Job fields a caller may give explicitly besides ``train`` (every TrainingJob field).
JOB_KEYS = tuple(f.name for f in dataclasses.fields(TrainingJob) if f.name != "train")
_NON_NEGATIVE = ("cores", "memory_mb", "gpus", "gpu_memory_mb", "max_retries", "priority", "max_restarts",
                 "min_world_size", "elastic_window_s", "data_cache_mb")
_POSITIVE = ("world_size", "ranks_per_frame", "sync_interval")


@dataclass(frozen=True)
class Template:
    """One loaded template.

    Attributes:
        name: file name without ``.toml``.
        path: the file it came from.
        description: one line for menus ("" when the file has none).
        values: validated job values (keys of :data:`TEMPLATE_KEYS`; ``tags`` as a tuple).
    """

    name: str
    path: Path
    description: str
    values: Mapping[str, Any]


def template_folders(extra: Iterable[str | Path] = ()) -> list[Path]:
    """Folders searched for templates, first match wins: ``extra``, ``CUETRAIN_TEMPLATE_PATH``, built-in."""
    return [Path(p) for p in extra] + [Path(p) for p in read_farm_env().template_path] + [BUILTIN_FOLDER]


def list_templates(folders: Iterable[str | Path] | None = None) -> list[str]:
    """Names of every template found (sorted, duplicates shadowed by earlier folders listed once)."""
    names: set[str] = set()
    for folder in template_folders() if folders is None else [Path(f) for f in folders]:
        if folder.is_dir():
            names.update(p.stem for p in folder.glob("*.toml") if p.is_file())
    return sorted(names)


def _find(name: str, folders: list[Path]) -> Path:
    if name.endswith(".toml") or "/" in name:
        path = Path(name).expanduser()
        if path.is_file():
            return path
        raise FarmError(f"template file {path} does not exist")
    for folder in folders:
        path = folder / f"{name}.toml"
        if path.is_file():
            return path
    known = list_templates(folders)
    raise FarmError(f"unknown farm template {name!r}; available: {', '.join(known) or 'none'} "
                    f"(searched {', '.join(str(f) for f in folders)})")


def load_template(name: str, folders: Iterable[str | Path] | None = None) -> Template:
    """Load a template by name (searched in :func:`template_folders`) or by ``.toml`` path.

    Raises:
        FarmError: no such template, unreadable TOML, unknown keys (valid keys listed) or bad values.
    """
    search = template_folders() if folders is None else [Path(f) for f in folders]
    path = _find(name, search)
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise FarmError(f"cannot read farm template {path}: {exc}") from None
    description = data.pop("description", "")
    if not isinstance(description, str):
        raise FarmError(f"{path}: description must be a string")
    return Template(name=path.stem, path=path, description=description, values=validate_values(data, str(path)))


def validate_values(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Check template values: known keys, types, ranges. Returns them with ``tags`` as a tuple.

    Raises:
        FarmError: names ``source``, the key and what is expected; unknown keys list the valid ones.
    """
    unknown = sorted(set(data) - set(TEMPLATE_KEYS))
    if unknown:
        raise FarmError(f"{source}: unknown template key(s) {unknown}; valid keys are "
                        f"{sorted([*TEMPLATE_KEYS, *META_KEYS])}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        types = TEMPLATE_KEYS[key]
        if isinstance(value, bool) or not isinstance(value, types):
            raise FarmError(f"{source}: {key}={value!r} must be of type {' or '.join(t.__name__ for t in types)}")
        if key == "precision" and value not in PRECISIONS:
            raise FarmError(f"{source}: precision={value!r} is not one of {', '.join(PRECISIONS)}")
        if key in _NON_NEGATIVE and value < 0:
            raise FarmError(f"{source}: {key}={value!r} must be >= 0")
        if key in _POSITIVE and value < 1:
            raise FarmError(f"{source}: {key}={value!r} must be >= 1")
        if key == "tags":
            value = tuple(value)
            bad = [t for t in value if not isinstance(t, str) or not t.isalnum()]
            if bad:
                raise FarmError(f"{source}: tags {bad!r} are not valid OpenCue tags (letters and digits only)")
        out[key] = value
    return out


def default_name(run_dir: str) -> str:
    """``cuetrain_<run dir name>``: Cuebot refuses a second live job of the same name, so runs get their own."""
    base = re.sub(r"[^A-Za-z0-9_.]+", "_", Path(run_dir).name).strip("_.") or "run"
    return f"cuetrain_{base}"[:60]


def _template_data_cache(train: TrainConfig, data_cache_mb: int | None) -> TrainConfig:
    """``train`` with the template's ``data_cache_mb`` unless the config chose its own (not the default)."""
    if data_cache_mb is None or train.data_cache_mb != DEFAULT_DATA_CACHE_MB:
        return train
    return dataclasses.replace(train, data_cache_mb=data_cache_mb)


def make_job(train: TrainConfig, *, template: str | Template | None = None,
             folders: Iterable[str | Path] | None = None, **explicit: Any) -> TrainingJob:
    """A TrainingJob from TrainingJob defaults < ``template`` < ``explicit`` (``None`` values are ignored).

    Args:
        train: the trainer configuration.
        template: a template name, ``.toml`` path or loaded :class:`Template` (None: no template).
        folders: where to look for a named template (default :func:`template_folders`).
        **explicit: TrainingJob fields (``world_size``, ``show``, ``shot``, ``user``, ``cores``, ...).
            ``name`` defaults to :func:`default_name` of the run directory.

    Raises:
        FarmError: unknown field names (valid ones listed), a bad template, a missing ``world_size``/
            ``show``/``shot``/``user``, or values the TrainingJob refuses.
    """
    unknown = sorted(set(explicit) - set(JOB_KEYS))
    if unknown:
        raise FarmError(f"unknown job field(s) {unknown}; valid fields are {sorted(JOB_KEYS)}")
    if isinstance(template, str):
        template = load_template(template, folders)
    values: dict[str, Any] = dict(template.values) if template else {}
    given = {k: v for k, v in explicit.items() if v is not None}
    if "tags" in given:
        given["tags"] = tuple(given["tags"])
    checked = validate_values({k: v for k, v in given.items() if k in TEMPLATE_KEYS}, "job")
    values.update(given)
    values.update(checked)
    missing = [k for k in ("world_size", "show", "shot", "user") if not values.get(k)]
    if missing:
        where = f" (template {template.name} does not set it)" if template and "world_size" in missing else ""
        raise FarmError(f"missing job value(s) {', '.join(missing)}{where}; give them explicitly "
                        "(cuetrain submit --world-size/--show/--shot/--user)")
    values.setdefault("name", default_name(train.run_dir))
    precision = values.pop("precision", None)  # a train value: the template's, unless the config chose one
    if precision and train.precision == "auto":
        train = dataclasses.replace(train, precision=precision)
    train = _template_data_cache(train, values.pop("data_cache_mb", None))
    if "cores" in values:
        values["cores"] = float(values["cores"])
    for key in ("rendezvous_timeout_s", "elastic_window_s"):
        if key in values:
            values[key] = float(values[key])
    return TrainingJob(train=train, **values)

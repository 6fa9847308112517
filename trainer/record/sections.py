"""The typed sections of ``run.json`` that other processes own: ``farm`` and ``gang``.

:mod:`trainer.record.runrecord` owns the file; these are the value types of two of its sections, parsed in
one place each (``from_mapping``) so no reader digs in raw mappings: ``farm`` is written by the farm
backend at each submit, ``gang`` by frame 0's node agent (``cue_plugin.node.agent``) at each generation.
Stdlib only (the GUI reads them too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

EVENTS_KEPT = 20  # newest gang events kept in run.json


def now_iso() -> str:
    """Current UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _count(value: Any) -> int:
    """A non-negative int from JSON, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


@dataclass(frozen=True)
class FarmRecord:
    """``run.json`` ``farm``, typed: the farm job of the latest submit (written by the farm backend).

    Parsed in one place (:meth:`from_mapping`, through :attr:`RunRecord.farm_record`); every reader (the
    CLI, the GUI, frames, the farm backend) uses it instead of digging in the raw mapping.

    Attributes:
        job_id: Cuebot's job id ("" when never submitted).
        job_name: the job's name.
        submitted_at: ISO time of the submit.
        attempts_at_submit: training attempts recorded before this submit [count].
        job: the submitted job's fields (``TrainingJob``; e.g. ``ranks_per_frame``, ``world_size``).
    """

    job_id: str = ""
    job_name: str = ""
    submitted_at: str = ""
    attempts_at_submit: int = 0
    job: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> "FarmRecord":
        """Parse ``run.json`` ``farm``; a missing or wrong-typed value falls back to its default."""
        data = data if isinstance(data, Mapping) else {}
        job = data.get("job")
        return cls(job_id=str(data.get("job_id") or ""), job_name=str(data.get("job_name") or ""),
                   submitted_at=str(data.get("submitted_at") or ""),
                   attempts_at_submit=_count(data.get("attempts_at_submit")),
                   job=dict(job) if isinstance(job, Mapping) else {})

    @property
    def submitted(self) -> bool:
        """True when a farm job is recorded (an id or a name)."""
        return bool(self.job_id or self.job_name)

    @property
    def ranks_per_frame(self) -> int:
        """``job.ranks_per_frame`` [ranks]; 1 when unknown or not a positive integer."""
        per = self.job.get("ranks_per_frame", 1)
        return per if isinstance(per, int) and not isinstance(per, bool) and per > 0 else 1


@dataclass(frozen=True)
class GangRecord:
    """``run.json`` ``gang``, typed: frame 0's node agent's record of the job's gang (``cue_plugin.node.agent``).

    Attributes:
        job_id: the farm job the count belongs to (a new submit starts again at 0).
        generation: the latest gang generation hosted (0 = none yet).
        restarts: generations started because the previous one failed [count].
        members: frames of the latest generation (empty = every frame).
        world_size: ranks of the latest generation [ranks].
        events: newest last: {generation, reason, members, world_size, at} (at most :data:`EVENTS_KEPT`).
    """

    job_id: str = ""
    generation: int = 0
    restarts: int = 0
    members: tuple[int, ...] = ()
    world_size: int = 0
    events: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> "GangRecord":
        """Parse ``run.json`` ``gang``; wrong-typed values fall back to their defaults (bad members: none)."""
        data = data if isinstance(data, Mapping) else {}
        members = data.get("members")
        members = members if isinstance(members, list) and all(
            isinstance(m, int) and not isinstance(m, bool) for m in members) else []
        events = data.get("events")
        return cls(job_id=str(data.get("job_id") or ""), generation=_count(data.get("generation")),
                   restarts=_count(data.get("restarts")), members=tuple(members),
                   world_size=_count(data.get("world_size")),
                   events=tuple(e for e in events if isinstance(e, Mapping)) if isinstance(events, list) else ())

    def of_job(self, job_id: str) -> "GangRecord":
        """This record when it belongs to farm job ``job_id``, else an empty one for that job."""
        return self if self.job_id == job_id else GangRecord(job_id=job_id)

    def next(self, reason: str, members: tuple[int, ...], world_size: int, *, restart: bool) -> "GangRecord":
        """The record for the next generation (``restart``: counted against the restart budget)."""
        event = {"generation": self.generation + 1, "reason": reason, "members": list(members),
                 "world_size": world_size, "at": now_iso()}
        return GangRecord(self.job_id, self.generation + 1, self.restarts + (1 if restart else 0), tuple(members),
                          world_size, (*self.events, event)[-EVENTS_KEPT:])

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``run.json`` ``gang``."""
        return {"job_id": self.job_id, "generation": self.generation, "restarts": self.restarts,
                "members": list(self.members), "world_size": self.world_size, "events": [dict(e) for e in self.events]}

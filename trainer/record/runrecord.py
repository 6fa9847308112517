"""``run.json``: the one typed, versioned record of a run, and its one state table.

Every writer (the trainer's rank 0, frame 0, the farm backend) and every reader (frames, the farm
backend, ``cuetrain status``, the GUI) goes through this module, the way submitit's ``JobPaths``
owns a job folder. It imports no torch, no Qt and no opencue, so all of them can use it.

Versions:

- 0: the files cuetrain wrote before this module (no ``version`` key; a failure was only an
  ``error`` text). They are read as they are, with :attr:`RunRecord.failure_kind` empty.
- 1 (:data:`RECORD_VERSION`): adds ``version``, ``failure_kind`` (a :class:`FailureKind` value, so
  nobody matches error texts), ``exit_code`` (:mod:`trainer.core.exitcodes`) and ``stopped_step``.

Unknown keys (written by a newer cuetrain) are kept in :attr:`RunRecord.extra` and written back
unchanged.

Writes are serialised: each read-merge-write holds the lock of :mod:`trainer.record.recordlock`.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

from trainer.record.sections import FarmRecord, GangRecord, now_iso  # noqa: F401 - typed sections, re-exported
from trainer.record.recordlock import locked
from trainer.record.rundir import RunDirError, RunPaths, atomic_write_json, read_json

RECORD_VERSION = 1


class FailureKind(str, enum.Enum):
    """Why a run failed or stopped, as data (``run.json`` ``failure_kind``)."""

    NONE = ""
    GANG_INCOMPLETE = "gang_incomplete"  # not every rank joined within --gang-timeout-s
    MAIN_UNREACHABLE = "main_unreachable"  # a rank could not reach rank 0's store
    PORT_IN_USE = "port_in_use"  # rank 0 could not listen on the main port
    REJECTED = "rejected"  # rank claimed twice or wrong job token
    RANK_LOST = "rank_lost"  # a rank died or hung during training
    NETWORK = "network"  # process-group creation or the first collective failed or timed out (trainer.gang.formation.PhaseGuard)
    STOP_TIMEOUT = "stop_timeout"  # SIGTERM/SIGINT, and no checkpoint within the grace period
    DATA_CHANGED = "data_changed"  # a file of the shot was deleted, truncated or rewritten under the run (trainer.data.shot)
    DIVERGED = "diverged"  # the loss blew up far above the untrained network's (trainer.learn.divergence)
    STORAGE_FULL = "storage_full"  # the run directory stayed full past --storage-full-grace-s (trainer.record.storage)
    ERROR = "error"  # anything else (the ``error`` text says what)


@dataclass(frozen=True)
class StateRow:
    """One row of :data:`STATES`: ``terminal`` = the trainer never leaves it by itself."""

    terminal: bool
    meaning: str


#: THE run-state table (``run.json`` ``state``).
STATES: dict[str, StateRow] = {
    "starting": StateRow(False, "run directory created; the gang has not started training"),
    "running": StateRow(False, "rank 0 is training (an attempt is recorded in attempts)"),
    "stopped": StateRow(False, "stopped with a checkpoint at stopped_step, by SIGTERM/SIGINT (exit_code 75) or, at a "
                               "periodic checkpoint, by the node agent's SIGUSR1 to regroup the gang at another "
                               "world size (exit_code 79); --resume or the farm's retry continues from it"),
    "succeeded": StateRow(True, "all steps trained, model exported"),
    "failed": StateRow(True, "the attempt failed; failure_kind and error say why (the farm may still retry)"),
    "cancelled": StateRow(True, "cancelled by a user"),
}
TERMINAL_STATES = tuple(name for name, row in STATES.items() if row.terminal)


@dataclass(frozen=True)
class RunRecord:
    """The content of ``run.json``.

    Attributes:
        version: record version (0 = a file written before versions existed).
        state: a key of :data:`STATES` ("" when nothing was recorded yet, e.g. only a submit).
        config: the trainer config (``TrainConfig.to_dict()``).
        world_size: ranks of the latest attempt [processes].
        versions: python/torch/numpy/cuetrain versions of the latest attempt.
        started_at: ISO time of the first attempt.
        attempts: one dict per training attempt: attempt, started_at, start_step [steps], world_size,
            host, backend.
        pid: process id of the latest rank 0.
        finished_at: ISO time the latest attempt ended ("" while it runs).
        final_step: last step trained when succeeded [steps].
        final_loss: mean L1 loss of the last log interval when succeeded.
        error: the failure, in words ("" when none).
        failure_kind: :class:`FailureKind` value ("" when none).
        failed_rank: rank that recorded the failure, or None.
        failed_at: ISO time of a failure before training started ("" when none).
        exit_code: exit code of the latest attempt's rank 0 (:mod:`trainer.core.exitcodes`), or None.
        stopped_step: step of the checkpoint written on SIGTERM/SIGINT or a SIGUSR1 regroup [steps], or None.
        farm: the farm job of the latest submit: job_id, job_name, submitted_at, attempts_at_submit, job.
        gang_failure: frame 0's record when it failed the whole layer (reason, at, attempt, layer, job, cuebot).
        gang: frame 0's node agent's record of the gang (:class:`GangRecord`, :attr:`gang_record`): job_id, generation,
            restarts [count], members [frame numbers], world_size [ranks], events.
        precision: the latest attempt's forward-pass precision: precision, requested, device, reason
            (``trainer.learn.precision.Precision.to_dict``).
        optimizer: the latest attempt's optimizer: name, requested, reason (why it trains: ``--optimizer``, auto's
            rule, or a resume's checkpoint) and Muon's ``newton_schulz`` dtype (``trainer.learn.schedule``).
        data: the latest attempt's training data (``trainer.data.shot_loading``): ``shot`` (folders, frames, file names,
            width/height [pixels], bytes), ``cache`` (where crops come from, data cache [MiB], host cache folder and
            size [bytes]) and ``hosts`` (per host: ranks, bytes read from files during the data phase per
            ``/proc/self/io`` ``rchar`` and ``read_bytes``, bytes of shot files decoded, shot reads = decoded / shot).
        init_from: what the run's weights started from with ``--init-from`` ({} for random weights): path (as
            given), kind (``run``, ``checkpoint`` or ``model``), weights (the file loaded), step [steps], run (the
            source run's name), and the source's architecture, model_size, scale and channels
            (``trainer.learn.init_from.apply_init_from``).
        budget: a ``--time-budget`` run's clock, fixed by its first attempt and kept by restarts and resizes
            (``trainer.core.stopping``; {} without a budget): text (as given), deadline (ISO time), deadline_unix
            [s since the epoch], export_s (the export time reserved [s]), stop_step (rank 0's latest planned last
            step [steps]) and planned_at (ISO time of that plan).
        extra: keys this version does not know, kept as they are.
    """

    version: int = RECORD_VERSION
    state: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    world_size: int = 0
    versions: Mapping[str, str] = field(default_factory=dict)
    started_at: str = ""
    attempts: tuple[Mapping[str, Any], ...] = ()
    pid: int | None = None
    finished_at: str = ""
    final_step: int | None = None
    final_loss: float | None = None
    error: str = ""
    failure_kind: str = ""
    failed_rank: int | None = None
    failed_at: str = ""
    exit_code: int | None = None
    stopped_step: int | None = None
    farm: Mapping[str, Any] = field(default_factory=dict)
    gang_failure: Mapping[str, Any] = field(default_factory=dict)
    gang: Mapping[str, Any] = field(default_factory=dict)
    precision: Mapping[str, Any] = field(default_factory=dict)
    optimizer: Mapping[str, Any] = field(default_factory=dict)
    data: Mapping[str, Any] = field(default_factory=dict)
    init_from: Mapping[str, Any] = field(default_factory=dict)
    budget: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> "RunRecord":
        """Parse a ``run.json`` object of any version; wrong-typed fields fall back to their defaults."""
        known = {f.name: f for f in fields(cls) if f.name != "extra"}
        values: dict[str, Any] = {"version": int(obj.get("version", 0) or 0)}
        for name, value in obj.items():
            if name in known and name != "version":
                values[name] = _coerce(name, value)
        values = {k: v for k, v in values.items() if v is not None or k in _NULLABLE}
        extra = {k: v for k, v in obj.items() if k not in known}
        return cls(**values, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written to ``run.json`` (always :data:`RECORD_VERSION`)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out["attempts"] = [dict(a) for a in self.attempts]
        out["version"] = RECORD_VERSION
        return {**dict(self.extra), **out}

    @property
    def farm_record(self) -> FarmRecord:
        """:attr:`farm`, typed (:class:`FarmRecord`)."""
        return FarmRecord.from_mapping(self.farm)

    @property
    def gang_record(self) -> GangRecord:
        """:attr:`gang`, typed (:class:`GangRecord`; check its ``job_id`` against :attr:`farm_record`'s)."""
        return GangRecord.from_mapping(self.gang)

    @property
    def is_terminal(self) -> bool:
        """True when :attr:`state` is terminal in :data:`STATES`."""
        return self.state in TERMINAL_STATES

    @property
    def total_steps(self) -> int:
        """The run's last step: a ``--time-budget`` run's planned ``budget.stop_step`` once rank 0 has planned it,
        else ``config.steps`` (0 when unknown) [steps]."""
        planned = self.budget.get("stop_step")
        if isinstance(planned, int) and not isinstance(planned, bool) and planned > 0:
            return planned
        steps = self.config.get("steps", 0)
        return int(steps) if isinstance(steps, (int, float)) else 0

    @property
    def kind(self) -> FailureKind:
        """:attr:`failure_kind` as a :class:`FailureKind` (``ERROR`` for a value this version does not know)."""
        try:
            return FailureKind(self.failure_kind)
        except ValueError:
            return FailureKind.ERROR


_NULLABLE = {"pid", "final_step", "final_loss", "failed_rank", "exit_code", "stopped_step"}
_TYPES: dict[str, Any] = {"state": str, "config": dict, "world_size": int, "versions": dict, "started_at": str,
                          "pid": int, "finished_at": str, "final_step": int, "final_loss": float, "error": str,
                          "failure_kind": str, "failed_rank": int, "failed_at": str, "exit_code": int,
                          "stopped_step": int, "farm": dict, "gang_failure": dict, "precision": dict, "optimizer": dict,
                          "gang": dict, "data": dict, "init_from": dict,
                          "budget": dict}


def _coerce(name: str, value: Any) -> Any:
    if name == "attempts":
        return tuple(a for a in value if isinstance(a, Mapping)) if isinstance(value, list) else None
    kind = _TYPES[name]
    if value is None:
        return None
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    return value if kind not in (int, float) and isinstance(value, kind) else None


def read_record(paths: RunPaths) -> RunRecord:
    """Read ``run.json`` (any version).

    Raises:
        RunDirError: missing or unreadable file (the message names it).
    """
    return RunRecord.from_dict(read_json(paths.run_json))


def read_gang(paths: RunPaths, job_id: str) -> GangRecord:
    """The gang record of farm job ``job_id`` (an empty one for that job when ``run.json`` holds another
    job's, none, or cannot be read)."""
    return read_record_or_empty(paths).gang_record.of_job(job_id)


def write_gang(paths: RunPaths, gang: GangRecord) -> RunRecord:
    """Replace ``run.json`` ``gang`` with ``gang`` (under the lock, other fields kept).

    Raises:
        RunDirError: the run directory cannot be written (the message names the file).
    """
    return update_record(paths, gang=gang.to_dict())


def read_record_or_empty(paths: RunPaths) -> RunRecord:
    """:func:`read_record`, or an empty record (version :data:`RECORD_VERSION`, state "") when there is none."""
    try:
        return read_record(paths)
    except RunDirError:
        return RunRecord()


_FIELDS = frozenset(f.name for f in fields(RunRecord)) - {"extra", "version"}


def modify_record(paths: RunPaths, changes: Callable[[RunRecord], Mapping[str, Any]]) -> RunRecord:
    """The one write API: under :func:`locked`, read ``run.json``, merge ``changes(current record)`` (field
    names of :class:`RunRecord`) and write it atomically, so a change computed from the record (an appended
    attempt) cannot be lost to another writer.

    The file is created when missing and always written as version :data:`RECORD_VERSION`.
    Returns the new record.

    Raises:
        RunDirError: an unknown field name (the valid ones are listed), an existing ``run.json`` that cannot
            be read (it is left as it is), the lock cannot be taken, or the write failed.
    """
    with locked(paths):
        # Only a missing file starts empty: one this process cannot read (another user's, mode 0640) must
        # not be replaced by a record that lost its other fields.
        current = read_record(paths) if paths.run_json.exists() else RunRecord()
        fields_ = dict(changes(current))
        unknown = sorted(set(fields_) - _FIELDS)
        if unknown:
            raise RunDirError(f"unknown run.json field(s) {unknown}; valid: {', '.join(sorted(_FIELDS))}")
        if "attempts" in fields_:
            fields_["attempts"] = tuple(fields_["attempts"])
        record = replace(current, **fields_)
        json.dumps(record.to_dict(), default=str)  # fail here, before the file is touched
        atomic_write_json(paths.run_json, record.to_dict())
        return record


def update_record(paths: RunPaths, **changes: Any) -> RunRecord:
    """Merge ``changes`` (field names of :class:`RunRecord`) into ``run.json``: :func:`modify_record` with
    fixed values.

    Raises:
        RunDirError: see :func:`modify_record`.
    """
    unknown = sorted(set(changes) - _FIELDS)
    if unknown:  # before the lock: a typo needs no lock to be reported
        raise RunDirError(f"unknown run.json field(s) {unknown}; valid: {', '.join(sorted(_FIELDS))}")
    return modify_record(paths, lambda _current: changes)


def start_attempt(paths: RunPaths, *, config: Mapping[str, Any], world_size: int, start_step: int, backend: str,
                  host: str, pid: int, versions: Mapping[str, str]) -> RunRecord:
    """Record a new training attempt (state ``running``; ``attempts`` grows by one; failure fields cleared).

    The attempts list is read and extended under the write lock (:func:`modify_record`): concurrent
    attempts are all kept, numbered in the order they were recorded.
    """
    def changes(record: RunRecord) -> dict[str, Any]:
        attempts = [*record.attempts, {"attempt": len(record.attempts) + 1, "started_at": now_iso(),
                                       "start_step": start_step, "world_size": world_size, "host": host,
                                       "backend": backend}]
        return dict(config=dict(config), world_size=world_size, state="running", versions=dict(versions),
                    started_at=attempts[0]["started_at"], attempts=attempts, pid=pid, finished_at="", error="",
                    failure_kind="", failed_rank=None, exit_code=None, stopped_step=None)

    return modify_record(paths, changes)


def attempts_since_submit(record: RunRecord, job_id: str) -> int:
    """Training attempts recorded since job ``job_id`` was submitted (0 when ``farm.job_id`` is another job)."""
    farm = record.farm_record
    if not job_id or farm.job_id != job_id:
        return 0
    return max(0, len(record.attempts) - farm.attempts_at_submit)


def failure_fields(exc: BaseException) -> dict[str, Any]:
    """``failure_kind`` and ``exit_code`` for a failed attempt: the exception's ``kind`` and ``exit_code``
    attributes (trainer.gang.formation's errors carry them; bad input, a ConfigError, EnvError, DataError or
    RunDirError, exits 2 as ``cuetrain`` does), else ``error`` and 1 (Python's exit code for an uncaught exception)."""
    kind = getattr(exc, "kind", FailureKind.ERROR)
    return {"failure_kind": FailureKind(kind).value, "exit_code": int(getattr(exc, "exit_code", 1))}


def attempt_mark(record: RunRecord) -> tuple[str, int, str]:
    """What changes in ``run.json`` once an attempt records anything of its own: its state, its number of
    attempts (the trainer's writer appends one as the steps begin) and ``failed_at`` (a failure before they begin).
    Compare the mark read as an attempt starts with the one read as it fails: :func:`record_failed_start`."""
    return record.state, len(record.attempts), record.failed_at


def record_failed_start(paths: RunPaths, mark: tuple[str, int, str], exc: BaseException, rank: int) -> bool:
    """Record ``exc`` as this attempt's failure when it ended before its steps began and nothing of this attempt is
    in ``run.json`` yet (its :func:`attempt_mark` is still ``mark``, read as the attempt started): a ``--resume``
    or a farm retry that could not load its checkpoint, or refused it, would otherwise leave the last attempt's
    state (``running`` after a SIGKILL, or ``succeeded``) while the rank exits non-zero; a new run refused after its
    data phase wrote ``run.json``'s data record would say nothing. Where there is no ``run.json`` yet, nothing is
    written: bad input before then is only the error message, as in the data phase (trainer.data.shot_loading).
    Returns whether it wrote.

    Raises:
        RunDirError: ``run.json`` cannot be written (see :func:`modify_record`).
    """
    failed = dict(state="failed", error=f"{type(exc).__name__}: {exc}", failed_rank=rank, failed_at=now_iso(),
                  **failure_fields(exc))
    wrote = False

    def changes(record: RunRecord) -> Mapping[str, Any]:  # checked under the lock: no writer slips in between
        nonlocal wrote
        wrote = attempt_mark(record) == mark
        return failed if wrote else {}

    if paths.run_json.exists():
        modify_record(paths, changes)
    return wrote

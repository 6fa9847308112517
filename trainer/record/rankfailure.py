"""A rank's structured failure record: what the node agent reads instead of scraping ``rank_N.log``.

After torchelastic's ``@record`` (``torch.distributed.elastic.multiprocessing.errors``): the supervisor
(:func:`trainer.agent.supervise.run_ranks`) gives every rank a file path in ``CUETRAIN_ERROR_FILE`` (removing a
stale record first); a rank that fails writes one JSON object there (:class:`RankFailure`: exit code, kind,
message, rank, host) before it exits, and the supervisor reads it into :class:`trainer.agent.supervise.GangExit`.
A rank killed by a signal writes nothing; the agent then has only the exit code, as before.

The file is ``RUN_DIR/logs/rank_N.failure.json`` (:meth:`trainer.record.rundir.RunPaths.rank_failure`), written
atomically. Imports nothing heavy.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

from trainer.core.envvars import read_error_file_env
from trainer.core.exitcodes import ExitCode
from trainer.record.rundir import RunDirError, atomic_write_json, read_json

log = logging.getLogger(__name__)

ERROR_FILE_VAR = "CUETRAIN_ERROR_FILE"  # read by trainer.core.envvars.read_error_file_env; set by the supervisor
FAILURE_VERSION = 1


@dataclass(frozen=True)
class RankFailure:
    """How one rank failed.

    Attributes:
        exit_code: the process's exit status (:mod:`trainer.core.exitcodes`).
        kind: ``usage`` (exit 2: bad input), a :class:`trainer.record.runrecord.FailureKind` value (a gang error),
            or ``error`` (an uncaught exception, exit 1).
        message: the error in words (the line ``cuetrain: error:`` printed, or ``Type: text``).
        rank: the rank that failed (None when not distributed).
        host: the host name it ran on.
        at: when it was written [s since the epoch].
        version: :data:`FAILURE_VERSION`.
    """

    exit_code: int
    kind: str
    message: str
    rank: int | None
    host: str
    at: float
    version: int = FAILURE_VERSION

    @classmethod
    def from_dict(cls, obj: dict[str, object]) -> "RankFailure":
        """Parse a record; raises ``TypeError``/``ValueError`` on a malformed one."""
        rank = obj.get("rank")
        return cls(exit_code=int(obj["exit_code"]), kind=str(obj.get("kind", "")),  # type: ignore[arg-type]
                   message=str(obj.get("message", "")), rank=None if rank is None else int(rank),  # type: ignore[arg-type]
                   host=str(obj.get("host", "")), at=float(obj.get("at", 0.0)),  # type: ignore[arg-type]
                   version=int(obj.get("version", FAILURE_VERSION)))  # type: ignore[arg-type]


def kind_for(exit_code: int, exc: BaseException) -> str:
    """The record's ``kind`` for an exception ending the process with ``exit_code``."""
    if exit_code == ExitCode.USAGE:
        return "usage"
    kind = getattr(exc, "kind", None)
    return str(getattr(kind, "value", kind)) if kind else "error"


def record_failure(exit_code: int, exc: BaseException, message: str | None = None,
                   env: Mapping[str, str] | None = None) -> RankFailure | None:
    """Write this process's failure to ``CUETRAIN_ERROR_FILE`` when a supervisor set it; never raises.

    Returns the record written (None when no file was asked for or the write failed: logged).
    """
    where = read_error_file_env(env)
    if not where.path:
        return None
    failure = RankFailure(exit_code=int(exit_code), kind=kind_for(exit_code, exc),
                          message=message if message is not None else (str(exc) or type(exc).__name__),
                          rank=where.rank, host=socket.gethostname(), at=time.time())
    try:
        atomic_write_json(Path(where.path), asdict(failure))
    except (OSError, RunDirError) as exc2:
        log.warning("cannot write the failure record %s: %s", where.path, exc2)
        return None
    return failure


def read_failure(path: Path) -> RankFailure | None:
    """The record at ``path``, or None when there is none or it is malformed (logged)."""
    if not path.exists():
        return None
    try:
        return RankFailure.from_dict(read_json(path))
    except (RunDirError, KeyError, TypeError, ValueError) as exc:
        log.warning("ignoring the malformed failure record %s: %s", path, exc)
        return None


def clear_failure(path: Path) -> None:
    """Remove a previous start's record (before a rank starts); a missing file is fine."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass

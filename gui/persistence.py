"""The runs list between sessions: which runs the GUI follows, kept as one JSON string in ``QSettings``. No widgets.

Plain functions, no signals: :class:`gui.controller.RunsController` saves the list after every change and restores
it at start (it emits what changed); this module owns the settings key, what a run's saved record holds, and
writing and reading the list.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Iterable

from qtpy.QtCore import QSettings

from cue_plugin.submit.spec import JobHandle
from gui.records import Run

log = logging.getLogger(__name__)

#: QSettings key holding the runs (one JSON string, the same under PySide2 and PySide6).
SETTINGS_KEY = "runs/v1"


def default_settings() -> QSettings:
    """Where the runs list persists between sessions (per user)."""
    return QSettings("cuetrain", "cuetrain-gui")


def run_record(run: Run) -> dict[str, Any]:
    """What is saved of ``run``: its folder, its view flags, its submitted job's fields and its farm job's handle."""
    handle = run.handle
    return {"run_dir": run.run_dir, "show_graph": run.show_graph, "show_sheet": run.show_sheet, "job": run.job,
            "handle": {"job_id": handle.job_id, "job_name": handle.job_name, "run_dir": handle.run_dir}
            if handle else None}


def save_runs(settings: QSettings, runs: Iterable[Run]) -> None:
    """Write the records of ``runs`` (:func:`run_record`) under :data:`SETTINGS_KEY` and sync."""
    settings.setValue(SETTINGS_KEY, json.dumps([run_record(run) for run in runs]))
    settings.sync()


def load_records(settings: QSettings) -> list[Any] | None:
    """The saved records as written (each checked by :func:`saved_run`); None when the list is not JSON (logged),
    empty when it is not a list."""
    raw = settings.value(SETTINGS_KEY, "[]")
    try:
        records = json.loads(raw if isinstance(raw, str) else "[]")
    except ValueError:
        log.warning("ignoring unreadable saved runs list")
        return None
    return records if isinstance(records, list) else []


def saved_run(rec: Any) -> tuple[str, JobHandle | None, dict[str, Any] | None]:
    """``(run_dir, handle, job)`` of a saved record, as ``RunsController.add_run`` takes them.

    Raises:
        KeyError, TypeError, AttributeError: the record is not one :func:`run_record` writes.
    """
    handle = JobHandle(**rec["handle"]) if rec.get("handle") else None
    return rec["run_dir"], handle, rec.get("job") or None

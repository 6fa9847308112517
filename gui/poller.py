"""Poll one run directory: new metrics rows, new contact sheets and previews, and the ``run.json`` record.

Pure Python (numpy, no Qt, no torch) so it runs on a worker thread and in benchmarks. One
:class:`RunPoller` per run keeps what it has already seen, so a poll reads only what changed:

* ``metrics.jsonl`` through :class:`trainer.record.rundir.MetricsReader` (only appended bytes; a partial last
  line waits for its newline);
* ``contact_sheets/`` and ``previews/`` (the model's renders of ``--preview``) are listed again only when the
  folder's modification time changed;
* ``run.json`` is read again only when its size or modification time changed.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from trainer.record.rundir import MetricsReader, RunDirError, RunPaths, read_metrics
from trainer.record.runrecord import RunRecord, read_record

log = logging.getLogger(__name__)

#: Columns of ``metrics.jsonl`` kept per run (``step`` first).
METRIC_FIELDS = ("step", "loss", "lr", "images_per_s", "wall_s", "noise_scale")

Columns = dict[str, np.ndarray]


@dataclass
class PollResult:
    """What changed in one run directory since the previous poll.

    Attributes:
        run_dir: the run directory polled.
        metrics: new rows as columns (float64 arrays of equal length, keys :data:`METRIC_FIELDS`);
            empty arrays when nothing new arrived.
        reset: ``metrics.jsonl`` started again from the beginning (restarted run); drop old rows.
        new_sheets: contact sheets not reported before, as ``(step, path)`` sorted by step.
        new_previews: preview renders (``previews/step_NNNNNN.png``) not reported before, likewise.
        record: the typed ``run.json`` record (:mod:`trainer.record.runrecord`) when it changed since the last
            poll, else ``None``.
        error: why ``run.json`` could not be read (missing while the run starts, bad JSON), else "".
    """

    run_dir: str
    metrics: Columns = field(default_factory=lambda: empty_columns())
    reset: bool = False
    new_sheets: list[tuple[int, str]] = field(default_factory=list)
    new_previews: list[tuple[int, str]] = field(default_factory=list)
    record: RunRecord | None = None
    error: str = ""

    @property
    def new_rows(self) -> int:
        """Number of new metrics rows."""
        return len(self.metrics["step"])

    @property
    def changed(self) -> bool:
        """True when anything new arrived."""
        return bool(self.new_rows or self.reset or self.new_sheets or self.new_previews or self.record is not None)


def empty_columns() -> Columns:
    """Zero-length float64 columns for every metric field."""
    return {name: np.empty(0, dtype=np.float64) for name in METRIC_FIELDS}


def _number(value: Any) -> float:
    """``value`` as a float, or NaN when it is missing or not a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return math.nan


def rows_to_columns(rows: Sequence[Mapping[str, Any]]) -> Columns:
    """Turn ``metrics.jsonl`` rows into float64 columns; rows without a numeric ``step`` are dropped.

    Missing or non-numeric values become NaN, so a row that lacks ``lr`` still plots its loss.
    """
    rows = [r for r in rows if not math.isnan(_number(r.get("step")))]
    n = len(rows)
    return {name: np.fromiter((_number(r.get(name)) for r in rows), dtype=np.float64, count=n)
            for name in METRIC_FIELDS}


#: A file changed this recently may change again within the file system's time resolution (1-2 s on
#: some network file systems) without its modification time moving, so it is not remembered as seen.
_SETTLE_NS = 2_000_000_000


def measured_noise_scale(run_dir: str) -> float | None:
    """The latest gradient noise scale a run measured [crops]: the last finite, positive ``noise_scale`` in
    ``RUN_DIR/metrics.jsonl`` (already smoothed by the trainer, ``trainer.learn.noise_scale``); None when the
    folder has no metrics or none with a noise scale (a new run, or a run from before it was measured)."""
    paths = RunPaths.of(os.path.expanduser(run_dir.strip())) if run_dir.strip() else None
    if paths is None or not paths.metrics.is_file():
        return None
    try:
        rows = read_metrics(paths)
    except (OSError, RunDirError):
        return None
    for row in reversed(rows):
        value = _number(row.get("noise_scale"))
        if math.isfinite(value) and value > 0:
            return value
    return None


def _stat_key(path: Path) -> tuple[int, int] | None:
    """``(mtime_ns, size)`` of ``path``, or ``None`` when it does not exist."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _settled(key: tuple[int, int]) -> tuple[int, int] | None:
    """``key`` when its modification time is old enough to trust, else ``None`` (look again next poll)."""
    return key if time.time_ns() - key[0] > _SETTLE_NS else None


class _StepFolder:
    """A folder of ``step_NNNNNN`` files, listed again only when its modification time changed; remembers the
    steps already reported."""

    def __init__(self, folder: Path, lister: Callable[[], list[tuple[int, Path]]]) -> None:
        self.folder, self._lister = folder, lister
        self._key: tuple[int, int] | None = None
        self._seen: set[int] = set()

    def new(self) -> list[tuple[int, str]]:
        """``(step, path)`` of files not reported before, sorted by step ([] when the folder did not change)."""
        key = _stat_key(self.folder)
        if key is None or key == self._key:
            return []
        self._key = _settled(key)
        new = [(step, str(path)) for step, path in self._lister() if step not in self._seen]
        self._seen.update(step for step, _ in new)
        return new


class RunPoller:
    """Incremental poller of one run directory (not thread-safe: one poll at a time).

    Args:
        run_dir: the run directory (it may not exist yet; the poll then reports nothing new).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = str(run_dir)
        self.paths = RunPaths.of(run_dir)
        self._reader = MetricsReader(self.paths.metrics)
        self._last_step = -math.inf
        self._sheets = _StepFolder(self.paths.contact_sheets, self.paths.list_contact_sheets)
        self._previews = _StepFolder(self.paths.previews, self.paths.list_previews)
        self._info_key: tuple[int, int] | None = None
        self._record: RunRecord | None = None

    def poll(self) -> PollResult:
        """Read what changed since the previous call (the first call reads everything)."""
        result = PollResult(self.run_dir)
        self._poll_metrics(result)
        result.new_sheets = self._sheets.new()
        result.new_previews = self._previews.new()
        self._poll_info(result)
        return result

    def _poll_metrics(self, result: PollResult) -> None:
        rows = self._reader.read_new()
        if not rows:
            return
        cols = rows_to_columns(rows)
        steps = cols["step"]
        if len(steps) and steps[0] <= self._last_step:
            # The reader starts again from byte 0 when the file shrank (run restarted from scratch).
            log.info("metrics of %s started again at step %d", self.run_dir, int(steps[0]))
            result.reset = True
        if len(steps):
            self._last_step = float(steps[-1])
        result.metrics = cols

    def _poll_info(self, result: PollResult) -> None:
        key = _stat_key(self.paths.run_json)
        if key is None:
            result.error = f"{self.paths.run_json} does not exist yet"
            return
        if key == self._info_key:
            return
        try:
            record = read_record(self.paths)
        except RunDirError as exc:
            result.error = str(exc)
            return
        self._info_key = _settled(key)
        if record == self._record:
            return
        self._record = record
        result.record = record

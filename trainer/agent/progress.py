"""What a person's terminal shows while ``cuetrain local`` or ``cuetrain demo`` trains: one progress bar.

The ranks log everything to ``RUN_DIR/logs/rank_N.log`` as before. On the terminal a :class:`Console`
shows one tqdm bar driven by rank 0's ``metrics.jsonl`` (the run directory's contract,
:class:`trainer.record.rundir.MetricsReader`): the step, the loss, images/s and tqdm's estimate of the
time left. Of the ranks' own lines it shows only what a person must see: warnings, errors, tracebacks and
anything else that is not an INFO record or a progress line (:func:`trainer.core.logsetup.is_detail`).

Where stderr is not a terminal (a pipe, a CI log) the bar is a plain line at every tenth of the run
instead of carriage returns. Farm frames never use this: RQD and CueGUI read their line-per-interval logs.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import IO, Any

from tqdm import tqdm

from trainer.core.logsetup import is_detail
from trainer.record.rundir import MetricsReader, RunPaths
from trainer.record.runrecord import read_record_or_empty

log = logging.getLogger(__name__)

#: How often the bar reads ``metrics.jsonl`` [s].
POLL_S = 0.5


class Console:
    """One progress bar for a local run, and the filtered rank lines above it.

    Args:
        paths: the run directory whose ``metrics.jsonl`` drives the bar.
        total_steps: the run's ``--steps`` [steps]; a ``--time-budget`` run's bar follows rank 0's planned last step
            (``run.json``'s ``RunRecord.total_steps``) once it is planned.
        stream: where the bar and lines go (default ``sys.stderr`` for the bar, ``sys.stdout`` for lines).

    Use as a context manager around the run: it starts a poll thread and closes the bar on exit. Its
    :meth:`write` is the stream :class:`trainer.agent.supervise.RankLogs` writes the ranks' lines to.
    """

    def __init__(self, paths: RunPaths, total_steps: int, stream: IO[str] | None = None) -> None:
        self._reader = MetricsReader(paths.metrics)
        self._total = total_steps
        self._stream = stream
        self._tty = bool(getattr(stream or sys.stderr, "isatty", lambda: False)())
        self._bar: Any = None
        self._next_line_step = 0
        self._last_shown = False
        self._started = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="progress", daemon=True)
        self._lock = threading.Lock()
        self._paths = paths

    def __enter__(self) -> "Console":
        if self._tty:
            self._bar = tqdm(total=self._total, unit="step", dynamic_ncols=True, file=self._stream or sys.stderr,
                             bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}{postfix}]")
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)
        self._update()  # the last rows
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None

    def write(self, text: str) -> None:
        """Show one or more rank lines (already prefixed ``[rank N]``) unless they are detail."""
        shown = "".join(line for line in text.splitlines(keepends=True) if not is_detail(line))
        if not shown:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.write(shown.rstrip("\n"), file=self._stream or sys.stdout)
            else:
                (self._stream or sys.stdout).write(shown)

    def flush(self) -> None:
        """Flush the line stream (file-like protocol for :class:`~trainer.agent.supervise.RankLogs`)."""
        (self._stream or sys.stdout).flush()

    def _poll(self) -> None:
        while not self._done.wait(POLL_S):
            self._update()

    def _follow_plan(self) -> None:
        """A time-budget run's planned last step becomes the bar's total (``RunRecord.total_steps``)."""
        planned = read_record_or_empty(self._paths).total_steps
        if planned > 0 and planned != self._total:
            with self._lock:
                self._total = planned
                if self._bar is not None:
                    self._bar.total = planned
                    self._bar.refresh()

    def _update(self) -> None:
        rows = [row for row in self._reader.read_new() if isinstance(row.get("step"), int)]
        if not rows:
            return
        self._follow_plan()
        last = rows[-1]
        postfix = f"loss={last.get('loss', float('nan')):.4f} images/s={last.get('images_per_s', 0.0):.0f}"
        with self._lock:
            if self._bar is not None:
                step = min(last["step"], self._total)
                if step > self._bar.n:
                    self._bar.update(step - self._bar.n)  # tqdm's rate, hence the time left, follows the updates
                self._bar.set_postfix_str(postfix)
            elif last["step"] >= min(self._next_line_step, self._total) and not self._last_shown:
                self._last_shown = last["step"] >= self._total  # the last step's line is always shown, once
                self._next_line_step = last["step"] + max(1, self._total // 10)
                meter = tqdm.format_meter(min(last["step"], self._total), self._total,
                                          time.monotonic() - self._started, unit="step", postfix=postfix)
                (self._stream or sys.stderr).write(meter + "\n")
                (self._stream or sys.stderr).flush()

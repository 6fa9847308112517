"""What ``cuetrain advise`` shows while it measures: a progress bar on a terminal, JSON lines for the submit dialog.

The probe reports ``(phase, done, total)`` as it measures (``trainer.advise.probe.Report``): ``steps`` (training steps
timed, of those planned), ``outputs`` (contact sheets and checkpoints) and ``quality`` (the quality probe's updates,
of those it expects). :class:`TerminalProgress` shows one tqdm bar per phase on stderr, or, where stderr is not a
terminal, a plain line at every tenth of a phase (as ``trainer.agent.progress`` does for a local run).
:class:`JsonProgress` (``--progress json``, what the submit dialog passes) prints each report as one JSON line on
stdout, ``{"progress": {"phase", "label", "done", "total", "elapsed_s", "budget_s"}}`` (:func:`record`), so the
dialog reads it as data, never from log text (``gui.advisor_view.parse_progress``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import IO, Any

from tqdm import tqdm

#: The key of a progress record's JSON line (``gui.advisor_view`` keeps its own copy: it never imports trainer.advise).
PROGRESS_KEY = "progress"
#: What each phase measures, as the bar and the dialog name it.
LABELS = {"steps": "timing training steps", "outputs": "timing contact sheet and checkpoint",
          "quality": "quality probe: short trainings"}


def record(phase: str, done: int, total: int, elapsed_s: float, budget_s: float) -> dict[str, Any]:
    """One progress record (module doc): ``done`` of ``total`` measurements [count], ``elapsed_s`` of the
    ``budget_s`` budget [s]."""
    return {PROGRESS_KEY: {"phase": phase, "label": LABELS.get(phase, phase), "done": int(done),
                           "total": int(total), "elapsed_s": round(elapsed_s, 2), "budget_s": budget_s}}


class JsonProgress:
    """``--progress json``: each report as one JSON line on ``stream`` (default stdout), flushed at once.

    Args:
        budget_s: the probe's budget [s], repeated in each record.
    """

    def __init__(self, budget_s: float, stream: IO[str] | None = None) -> None:
        self._budget_s = budget_s
        self._stream = stream
        self._started = time.monotonic()

    def __call__(self, phase: str, done: int, total: int) -> None:
        stream = self._stream or sys.stdout
        stream.write(json.dumps(record(phase, done, total, time.monotonic() - self._started, self._budget_s)) + "\n")
        stream.flush()

    def close(self) -> None:
        """Nothing to close (the protocol of :class:`TerminalProgress`)."""


class TerminalProgress:
    """One tqdm bar per phase on ``stream`` (default stderr); a plain line per tenth where it is not a terminal.

    Args:
        budget_s: the probe's budget [s], shown in each bar's description.
    """

    def __init__(self, budget_s: float, stream: IO[str] | None = None) -> None:
        self._budget_s = budget_s
        self._stream = stream
        self._tty = bool(getattr(stream or sys.stderr, "isatty", lambda: False)())
        self._phase = ""
        self._bar: Any = None
        self._next = 0
        self._shown = -1
        self._started = self._last = time.monotonic()

    def __call__(self, phase: str, done: int, total: int) -> None:
        stream = self._stream or sys.stderr
        desc = f"{LABELS.get(phase, phase)} (budget {self._budget_s:.0f} s)"
        if phase != self._phase:
            self.close()
            self._phase, self._next, self._shown = phase, 0, -1
            self._started = self._last  # the previous report: about when this phase began
            if self._tty:
                self._bar = tqdm(total=total, desc=desc, unit="step", file=stream, dynamic_ncols=True, leave=False)
        if self._bar is not None:
            self._bar.total = max(total, done)
            self._bar.update(done - self._bar.n)
        elif done != self._shown and (done >= self._next or done >= total):
            self._next, self._shown = done + max(1, total // 10), done
            stream.write(tqdm.format_meter(min(done, total), max(total, done), time.monotonic() - self._started,
                                           prefix=desc, unit="step") + "\n")
            stream.flush()
        self._last = time.monotonic()

    def close(self) -> None:
        """End the current phase's bar."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

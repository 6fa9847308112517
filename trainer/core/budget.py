"""Training time: a run length in steps, a wall-clock budget (``--time-budget``) or a held-out plateau
(``--stop-when-flat``).

``--time-budget`` takes a duration (``90s``, ``30m``, ``2h``, ``1h30m``; units s, m, h, d) or a deadline, an ISO 8601
time with its UTC offset (``2026-11-27T18:00+01:00``: what the submit dialog's "until HH:MM" sends, so time spent
waiting in the farm's queue counts). A duration starts when the run first starts training; either way the run's
deadline is fixed then, in ``run.json`` (``trainer.record.runrecord.RunRecord.budget``), so restarts and elastic
resizes spend the same budget. This module is torch-free: the GUI and ``cuetrain submit`` check the text with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

#: Seconds per unit of a ``--time-budget`` duration.
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?[smhd])+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


class BudgetError(ValueError):
    """A ``--time-budget`` text that is neither a duration nor a deadline with a UTC offset."""


@dataclass(frozen=True)
class TimeBudget:
    """A parsed ``--time-budget``.

    Attributes:
        text: the text as given.
        seconds: the duration [s], or None for a deadline.
        deadline_unix: the deadline [s since the epoch], or None for a duration.
    """

    text: str
    seconds: float | None = None
    deadline_unix: float | None = None

    def deadline_from(self, start_unix: float) -> float:
        """The deadline [s since the epoch] of a run that first started training at ``start_unix`` [s]."""
        return self.deadline_unix if self.deadline_unix is not None else start_unix + float(self.seconds or 0.0)


def parse_time_budget(text: str) -> TimeBudget:
    """Parse a ``--time-budget`` (module doc).

    Raises:
        BudgetError: not a positive duration such as ``90s``/``30m``/``2h``/``1h30m``, nor an ISO 8601 time with a
            UTC offset (a time without one would be read in whichever time zone a farm host is set to).
    """
    t = text.strip().lower()
    if _DURATION.match(t):
        seconds = sum(float(n) * UNITS[u] for n, u in _PART.findall(t))
        if seconds <= 0:
            raise BudgetError(f"--time-budget {text!r} must be more than 0 seconds (e.g. 90s, 30m, 2h)")
        return TimeBudget(text, seconds=seconds)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise BudgetError(f"--time-budget {text!r} is neither a duration (e.g. 90s, 30m, 2h, 1h30m) nor a deadline "
                          "(an ISO 8601 time with its UTC offset, e.g. 2026-11-27T18:00+01:00)") from None
    if when.tzinfo is None:
        raise BudgetError(f"--time-budget {text!r} has no UTC offset; farm hosts may keep another time zone: write "
                          f"e.g. {text.strip()}+00:00")
    return TimeBudget(text, deadline_unix=when.timestamp())


def format_duration(seconds: float) -> str:
    """``seconds`` as the Runs panel shows time left: ``45 s``, ``12 min``, ``2 h 05 min``."""
    s = max(0, int(round(seconds)))
    if s < 90:
        return f"{s} s"
    if s < 3600:
        return f"{round(s / 60)} min"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"

"""The submit dialog's "Train for" field: N steps, until a clock time, or until it stops improving.

- "N steps" (the default): ``--steps N``; nothing else, so the dialog's default job is unchanged.
- "until HH:MM": ``--time-budget <ISO deadline>``, the next occurrence of that clock time on the artist's machine
  (today, or tomorrow when it has passed) with the local UTC offset in force then (:func:`next_deadline`), so the
  farm hosts' time zones do not matter and time waiting in the queue counts (``trainer.core.budget``).
- "until it stops improving": ``--stop-when-flat`` :data:`FLAT_DB` over the trainer's default window.

In the last two modes the steps box stays a cap: the run stops at whichever comes first.
"""

from __future__ import annotations

import logging
from datetime import datetime, time, timedelta
from typing import Any

from qtpy.QtCore import QTime, Signal
from qtpy.QtWidgets import QComboBox, QHBoxLayout, QLabel, QSpinBox, QTimeEdit, QVBoxLayout, QWidget

from trainer.core.budget import format_duration

log = logging.getLogger(__name__)

STEPS, UNTIL, FLAT = "steps", "until", "flat"
#: The mode dropdown's text for each mode (item data = the mode).
MODE_TEXTS = {STEPS: "N steps", UNTIL: "until HH:MM", FLAT: "until it stops improving"}
#: ``--stop-when-flat`` of "until it stops improving": the least held-out gain over the window that goes on [dB].
FLAT_DB = 0.05
_CAP_TIP = ("a cap on the steps (--steps): with \"{mode}\" the run stops at whichever comes first, so keep it "
            "generous")
_STEPS_TIP = "steps to train (--steps)"


def next_deadline(hour: int, minute: int, now: datetime | None = None) -> datetime:
    """The next time the clock shows ``hour``:``minute`` (today, or tomorrow when it is ``now`` or has passed).

    Args:
        hour: 0-23 [h]; minute: 0-59 [min].
        now: the current time, time-zone aware (tests); default this machine's clock in its local time zone.
    Returns:
        An aware datetime carrying the UTC offset in force at the deadline (a DST change overnight is followed;
        with ``now`` in a ``zoneinfo`` zone that zone's rules, with a fixed offset that offset).
    """
    local = datetime.now() if now is None else now.replace(tzinfo=None)
    when = datetime.combine(local.date(), time(hour, minute))
    if when <= local:
        when += timedelta(days=1)
    return when.astimezone() if now is None else when.replace(tzinfo=now.tzinfo)


def deadline_text(hour: int, minute: int, now: datetime | None = None) -> str:
    """``--time-budget`` for "until HH:MM": :func:`next_deadline` as ISO 8601 to the minute with its UTC offset,
    e.g. ``2026-11-27T18:00+01:00``."""
    return next_deadline(hour, minute, now).isoformat(timespec="minutes")


class TrainForField(QWidget):
    """"Train for": a mode dropdown, a clock time (mode "until HH:MM" only) and the steps box, with a note below.

    Args:
        steps: the steps box's starting value [steps].
        parent: Qt parent.
    """

    #: The mode, the time or the steps changed.
    changed = Signal()

    def __init__(self, steps: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.mode_box = QComboBox()
        for mode, text in MODE_TEXTS.items():
            self.mode_box.addItem(text, mode)
        self.time_edit = QTimeEdit(QTime(18, 0))
        self.time_edit.setDisplayFormat("HH:mm")
        self.time_edit.setToolTip("the local clock time to stop at: today, or tomorrow once it has passed")
        self.steps_spin = QSpinBox()
        self.steps_spin.setRange(1, 10_000_000)
        self.steps_spin.setValue(steps)
        self.fixed_now: datetime | None = None  # the current time, aware, for tests; None: this machine's clock
        self.note = QLabel("")
        self.note.setObjectName("train_for_note")
        self.note.setWordWrap(True)
        self._build_layout()
        for signal in (self.mode_box.currentIndexChanged, self.time_edit.timeChanged, self.steps_spin.valueChanged):
            signal.connect(lambda *_: self._update())
        self._update()

    def _build_layout(self) -> None:
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.mode_box)
        row.addWidget(self.time_edit)
        row.addWidget(self.steps_spin, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.note)

    def mode(self) -> str:
        """The chosen mode: :data:`STEPS`, :data:`UNTIL` or :data:`FLAT`."""
        return str(self.mode_box.currentData())

    def set_mode(self, mode: str) -> None:
        """Choose ``mode`` (an unknown one leaves the choice as it is)."""
        index = self.mode_box.findData(mode)
        if index >= 0:
            self.mode_box.setCurrentIndex(index)

    def config_fields(self, now: datetime | None = None) -> dict[str, Any]:
        """The :class:`trainer.core.config.TrainConfig` fields of the chosen mode: ``steps`` always (the cap
        outside "N steps"), plus ``time_budget`` (the deadline as of ``now``, default :attr:`fixed_now` or this
        machine's clock) or ``stop_when_flat``."""
        now = now or self.fixed_now
        out: dict[str, Any] = {"steps": self.steps_spin.value()}
        if self.mode() == UNTIL:
            clock = self.time_edit.time()
            out["time_budget"] = deadline_text(clock.hour(), clock.minute(), now)
        elif self.mode() == FLAT:
            out["stop_when_flat"] = FLAT_DB
        return out

    def _update(self) -> None:
        """Show the time edit in "until HH:MM" only; label the steps box as a cap outside "N steps"; say when
        the run stops."""
        mode = self.mode()
        self.time_edit.setVisible(mode == UNTIL)
        self.steps_spin.setPrefix("" if mode == STEPS else "at most ")
        self.steps_spin.setSuffix(" steps")
        self.steps_spin.setToolTip(_STEPS_TIP if mode == STEPS else _CAP_TIP.format(mode=MODE_TEXTS[mode]))
        self.note.setText(self.note_text())
        self.note.setVisible(bool(self.note.text()))  # an empty line takes no room under the field
        self.changed.emit()

    def note_text(self, now: datetime | None = None) -> str:
        """The line under the field: when an "until HH:MM" run stops, what "until it stops improving" means
        ("" for "N steps"); as of ``now`` (default :attr:`fixed_now` or this machine's clock)."""
        now = now or self.fixed_now
        cap = f"{self.steps_spin.value():,} steps"
        if self.mode() == UNTIL:
            clock = self.time_edit.time()
            when = next_deadline(clock.hour(), clock.minute(), now)
            left = when.timestamp() - (now or datetime.now().astimezone()).timestamp()
            return (f"Stops by {when:%a %H:%M} (UTC{when:%z}), {format_duration(left)} from now, including time "
                    f"queued on the farm, or at {cap}.")
        if self.mode() == FLAT:
            return (f"Stops once the held-out frames improve by less than {FLAT_DB} dB over the trainer's window, "
                    f"or at {cap}.")
        return ""

"""The submit dialog's building blocks: its sections and the small widgets its rows are made of.

- :func:`form_section`: a titled ``QGroupBox`` holding a form ("Shot", "What to learn", "How long", "Farm").
- :class:`AdvancedSection`: the "Advanced" ``QGroupBox``, folded by default as in CopyCat's panel (Model Size,
  Batch Size, Crop Size under "Advanced"): ticking its title shows its form; folded, one line says the values
  that still apply.
- :func:`align_labels`: one label column width for every section, so the fields line up across the boxes.
- :func:`folder_row`, :func:`spin`, :func:`note`, :func:`pair_row`: a path with "Browse...", a bounded integer
  box, an inline warning line, two fields side by side.
"""

from __future__ import annotations

from typing import Sequence

from qtpy.QtWidgets import (QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QSpinBox,
                            QVBoxLayout, QWidget)

#: Inline warnings (a note under a field): amber, readable on dark and light palettes.
WARN_STYLE = "color: #d09030;"
#: One form row: its label ("": the widget sits in the fields' column, with no label) and its widget.
Row = tuple[str, QWidget]
#: The Qt property marking a form row's label (:func:`align_labels` lines these up).
_ROW_LABEL = "cuetrainRowLabel"


def spin(value: int, low: int, high: int) -> QSpinBox:
    """An integer box from ``low`` to ``high`` showing ``value``."""
    box = QSpinBox()
    box.setRange(low, high)
    box.setValue(value)
    return box


def folder_row(parent: QWidget, edit: QLineEdit) -> QWidget:
    """``edit`` with a "Browse..." button beside it that fills it with a folder chosen in a file dialog."""
    row = QWidget()
    lay = QHBoxLayout(row)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.addWidget(edit, 1)
    button = QPushButton("Browse...")

    def browse() -> None:
        folder = QFileDialog.getExistingDirectory(parent, "Choose a folder", edit.text())
        if folder:
            edit.setText(folder)

    button.clicked.connect(lambda _=False: browse())
    lay.addWidget(button)
    return row


class Note(QLabel):
    """A word-wrapped line under a field, hidden while it has no text (so an empty one takes no room)."""

    def setText(self, text: str) -> None:  # noqa: N802 - Qt API
        """Show ``text`` ("" hides the line)."""
        super().setText(text)
        self.setVisible(bool(text))


def note(name: str) -> Note:
    """An empty (hidden) word-wrapped :class:`Note` in the warning colour, named ``name`` (for tests)."""
    label = Note("")
    label.setObjectName(name)
    label.setWordWrap(True)
    label.setStyleSheet(WARN_STYLE)
    label.setVisible(False)
    return label


def pair_row(first: QWidget, second_label: str, second: QWidget) -> QWidget:
    """``first``, then ``second_label`` and ``second``, on one line (e.g. Show and Shot)."""
    row = QWidget()
    lay = QHBoxLayout(row)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.addWidget(first, 1)
    lay.addWidget(QLabel(second_label))
    lay.addWidget(second, 1)
    return row


def _form(rows: Sequence[Row]) -> QFormLayout:
    form = QFormLayout()
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    for label, widget in rows:
        if not label:
            form.addRow("", widget)  # no label widget: a hidden field (an empty note) then takes no room
        else:
            row_label = QLabel(label)
            row_label.setProperty(_ROW_LABEL, True)  # for align_labels
            form.addRow(row_label, widget)
    return form


def form_section(title: str, name: str, rows: Sequence[Row], below: Sequence[QWidget] = ()) -> QGroupBox:
    """A ``QGroupBox`` titled ``title`` (object name ``name``) with one form row per ``(label, widget)``, then the
    ``below`` widgets across the box's width (e.g. the advisor, whose word-wrapped lines a form row would squash)."""
    box = QGroupBox(title)
    box.setObjectName(name)
    lay = QVBoxLayout(box)
    lay.addLayout(_form(rows))
    for widget in below:
        lay.addWidget(widget)
    return box


class AdvancedSection(QGroupBox):
    """The "Advanced" section: a checkable ``QGroupBox`` whose tick shows its form (folded at first).

    Folded, :attr:`summary` (object name ``advanced_summary``) says in one line the values the form holds, since
    they still go into the job; :meth:`set_summary` keeps it current. Folding or unfolding refits the dialog.

    Args:
        rows: the form's ``(label, widget)`` rows.
        parent: Qt parent.
    """

    def __init__(self, rows: Sequence[Row], parent: QWidget | None = None) -> None:
        super().__init__("Advanced", parent)
        self.setObjectName("advanced_section")
        self.setCheckable(True)
        self.setToolTip("Tick to show the model size, crop size, batch size and sync interval")
        self.summary = QLabel("")
        self.summary.setObjectName("advanced_summary")
        self.summary.setWordWrap(True)
        self.body = QWidget()
        form = _form(rows)
        form.setContentsMargins(0, 0, 0, 0)
        self.body.setLayout(form)
        lay = QVBoxLayout(self)
        lay.addWidget(self.summary)
        lay.addWidget(self.body)
        self.toggled.connect(self._show_body)
        self.setChecked(False)
        self._show_body(False)

    def is_expanded(self) -> bool:
        """Whether the form shows (the title is ticked)."""
        return self.isChecked()

    def set_expanded(self, expanded: bool) -> None:
        """Show (True) or fold (False) the form."""
        self.setChecked(expanded)

    def set_summary(self, text: str) -> None:
        """The line shown while folded (e.g. ``small model, 64 px crops, batch 8, sync every 1 step``)."""
        self.summary.setText(text)

    def _show_body(self, expanded: bool) -> None:
        self.body.setVisible(expanded)
        self.summary.setVisible(not expanded)
        window = self.window()
        if window is not self and window.isVisible():
            window.adjustSize()  # grow to the form, or give its room back


def align_labels(sections: Sequence[QGroupBox]) -> None:
    """Give every form row label in ``sections`` the widest one's width, so the fields start at one column."""
    labels = [label for section in sections for label in section.findChildren(QLabel)
              if label.property(_ROW_LABEL)]
    width = max((label.sizeHint().width() for label in labels), default=0)
    for label in labels:
        label.setMinimumWidth(width)

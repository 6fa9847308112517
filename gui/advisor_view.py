"""The submit dialog's "How many machines?" section: run ``cuetrain advise`` and use its recommendation.

The advisor's probe imports torch and the GUI never does, so it runs as a separate process of the
cuetrain environment (:class:`AdvisorRunner`, a ``QProcess`` running ``cuetrain advise --json`` through
:func:`gui.farm_process.cuetrain_command`: the GUI thread never waits on it). The process prints a table
and ends with one JSON line holding the recommendation (:func:`gui.advisor_output.parse_output`) and every prediction
(:func:`gui.advisor_chart.parse_advice`); an advisor without ``--json`` is still understood from its
``recommended: N rank(s), sync interval K`` line. With ``--progress json`` it also prints one
``{"progress": {...}}`` line per measurement as it goes (``trainer.advise.progress``): the runner reads stdout as it
arrives, hands those records to a progress bar as data (:func:`gui.advisor_output.parse_progress`) and keeps the
other lines for the tables. The JSON's ``confidence`` statement (how sure the probe is, given its time budget) is shown under the
recommendation. The view shows a chart of time to the same quality and
farm hours against ranks with one sentence (:class:`gui.advisor_chart.AdvisorChart`); the printed tables
stay behind "Details".
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Sequence

from qtpy.QtCore import QObject, QProcess, QProcessEnvironment, Qt, Signal
from qtpy.QtGui import QFontDatabase
from qtpy.QtWidgets import (QCheckBox, QDoubleSpinBox, QHBoxLayout, QLabel, QPlainTextEdit, QProgressBar,
                            QPushButton, QToolButton, QVBoxLayout, QWidget)

from gui.advisor_chart import AdvisorChart, parse_advice
from gui.advisor_output import (DEFAULT_BANDWIDTH_GBPS, AdviseRequest, Progress, Recommendation, confidence_text,
                                error_line, parse_output, parse_progress, parse_recommendation)
from gui.farm_process import child_environment, cuetrain_command

log = logging.getLogger(__name__)

__all__ = ["AdviseRequest", "AdvisorRunner", "AdvisorView", "Progress", "Recommendation", "confidence_text",
           "default_command", "error_line", "parse_output", "parse_progress", "parse_recommendation"]


def default_command() -> list[str]:
    """``CUETRAIN_PYTHON -m cuetrain advise`` (the request's arguments follow)."""
    return cuetrain_command("advise")


def _fold_button(text: str, toggled: Callable[[bool], None]) -> QToolButton:
    """A flat checkable button with an arrow that shows or folds a section (``toggled(shown)``)."""
    button = QToolButton()
    button.setText(text)
    button.setCheckable(True)
    button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
    button.setAutoRaise(True)
    button.toggled.connect(toggled)
    return button


class AdvisorRunner(QObject):
    """Runs the advisor command in a ``QProcess``, one at a time; no widgets (tested without a view).

    Args:
        command: program and leading arguments (default :func:`default_command`); the request's
            flags are appended. Tests point it at a stub script.
    """

    probe_started = Signal()
    probe_finished = Signal(str, object, object)  # tables text, Recommendation | None, --json dict | None
    probe_failed = Signal(str)  # one line for the artist
    probe_cancelled = Signal()
    probe_progressed = Signal(object)  # Progress

    def __init__(self, command: Sequence[str] | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.command = list(command) if command else default_command()
        self._process: QProcess | None = None
        self._out: list[str] = []  # stdout lines that are not progress records
        self._partial = b""  # an unfinished stdout line

    def is_running(self) -> bool:
        return self._process is not None

    def start(self, arguments: Sequence[str]) -> None:
        """Start ``command + arguments``; a probe already running is cancelled first."""
        self.cancel()
        proc = QProcess(self)
        env = QProcessEnvironment()
        for name, value in child_environment().items():
            env.insert(name, value)
        proc.setProcessEnvironment(env)
        proc.finished.connect(lambda code, status, p=proc: self._on_finished(p, code, status))
        proc.errorOccurred.connect(lambda error, p=proc: self._on_error(p, error))
        proc.readyReadStandardOutput.connect(lambda p=proc: self._on_output(p))
        self._process = proc
        self._out, self._partial = [], b""
        program, *lead = self.command
        log.info("advisor: %s", " ".join([program, *lead, *arguments]))
        self.probe_started.emit()
        proc.start(program, [*lead, *arguments])

    def cancel(self) -> bool:
        """Kill the running probe (never waits for it); False when none runs."""
        proc, self._process = self._process, None
        if proc is None:
            return False
        proc.finished.connect(proc.deleteLater)  # it is reaped later, off this call
        proc.kill()
        self.probe_cancelled.emit()
        return True

    def _on_finished(self, proc: QProcess, code: int, status: QProcess.ExitStatus) -> None:
        if proc is not self._process:
            return  # cancelled
        self._process = None
        proc.deleteLater()
        self._on_output(proc, final=True)
        out = "".join(self._out)
        err = bytes(proc.readAllStandardError().data()).decode("utf-8", "replace")
        if status != QProcess.ExitStatus.NormalExit:
            self.probe_failed.emit(f"the advisor crashed: {error_line(err, code)}")
        elif code != 0:
            self.probe_failed.emit(error_line(err, code))
        else:
            self.probe_finished.emit(*parse_output(out), parse_advice(out))

    def _on_output(self, proc: QProcess, final: bool = False) -> None:
        """Split what stdout holds into lines: progress records go out as :attr:`probe_progressed`, the rest is
        kept for the tables (``final``: the unfinished last line too)."""
        if proc is not self._process and not final:
            return
        lines = (self._partial + bytes(proc.readAllStandardOutput().data())).split(b"\n")
        self._partial = lines.pop()  # b"" when the data ends with a newline
        if final and self._partial:
            lines.append(self._partial)
            self._partial = b""
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            progress = parse_progress(line)
            if progress is not None:
                self.probe_progressed.emit(progress)
            else:
                self._out.append(line + "\n")

    def _on_error(self, proc: QProcess, error: QProcess.ProcessError) -> None:
        if proc is not self._process or error != QProcess.ProcessError.FailedToStart:
            return  # crashes arrive through finished too
        self._process = None
        proc.deleteLater()
        self.probe_failed.emit(f"cannot start {self.command[0]}: {proc.errorString()}")


class AdvisorView(QWidget):
    """Collapsible "How many machines?": bandwidth, Advise…/Cancel, the chart and its sentence, "Use
    recommendation", and the advisor's tables behind "Details" (folded by default).

    Args:
        request: the dialog's current values (raises ``ValueError`` with a message when they are
            not ready, e.g. no input folder); the bandwidth field's value replaces its bandwidth.
        command: advisor command (default :func:`default_command`), see :class:`AdvisorRunner`.
    """

    recommendation_used = Signal(int, int)  # world size, sync interval

    def __init__(self, request: Callable[[], AdviseRequest], command: Sequence[str] | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._request = request
        self.recommendation: Recommendation | None = None
        self._steps = 0  # the probed request's steps: the chart's times are for them
        self.runner = AdvisorRunner(command, self)
        self.runner.probe_finished.connect(self._on_finished)
        self.runner.probe_failed.connect(self._on_failed)
        self.runner.probe_progressed.connect(self._on_progress)
        self._make_widgets()
        self._build_layout()
        self.set_details_shown(False)
        self.set_expanded(False)

    def _make_widgets(self) -> None:
        self.header = _fold_button("How many machines?", self.set_expanded)
        self.bandwidth_spin = QDoubleSpinBox()
        self.bandwidth_spin.setRange(0.01, 10_000.0)
        self.bandwidth_spin.setDecimals(2)
        self.bandwidth_spin.setValue(DEFAULT_BANDWIDTH_GBPS)
        self.bandwidth_spin.setSuffix(" Gb/s")
        self.bandwidth_spin.setToolTip("network bandwidth between farm hosts ('cuetrain advise link' measures it)")
        self.quality_box = QCheckBox("Time to quality")
        self.quality_box.setToolTip("also train briefly at 1x, 4x and 16x the batch from the same weights and measure "
                                    "how many updates each needs to one loss (the critical batch): the chart then "
                                    "shows which world size and sync interval reach the same quality soonest. Within "
                                    "the advisor's time budget (90 s by default); seconds on a GPU. Unticked, an "
                                    "earlier run's noise scale in this run directory is used when there is one.")
        self.advise_button = QPushButton("Advise…")
        self.advise_button.setToolTip("time a few training steps on this host and predict images/s per world size")
        self.advise_button.clicked.connect(self.advise)
        self.cancel_button = QPushButton("Cancel probe")
        self.cancel_button.clicked.connect(self.cancel)
        self.status = QLabel("")
        self.status.setObjectName("advisor_status")
        self.status.setWordWrap(True)
        self.status.hide()  # shown with text: "probing…", a problem
        self.progress_bar = QProgressBar()
        self.progress_bar.setObjectName("advisor_progress")
        self.progress_bar.hide()  # shown while a probe runs: busy until its first progress record
        self.confidence_label = QLabel("")
        self.confidence_label.setObjectName("advisor_confidence")
        self.confidence_label.setWordWrap(True)
        self.confidence_label.setToolTip("how many timed steps the probe's figures rest on and how much they spread; "
                                         "a short time budget leaves the answer rough")
        self.confidence_label.hide()
        self.chart = AdvisorChart()
        self.details_button = _fold_button("Details", self.set_details_shown)
        self.details_button.setToolTip("the advisor's tables: images/s and efficiency per world size and sync "
                                       "interval, and time to quality")
        self.table = QPlainTextEdit()
        self.table.setReadOnly(True)
        self.table.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.table.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self._fit_table(6)
        self.table.setPlaceholderText("Advise… times the training step for these settings on this host "
                                      "(a few seconds) and predicts images/s and efficiency per world size.")
        self.recommended_label = QLabel("")
        self.recommended_label.setWordWrap(True)
        self.recommended_label.setStyleSheet("font-weight: bold;")
        self.use_button = QPushButton("Use recommendation")
        self.use_button.clicked.connect(self.use_recommendation)
        self.use_button.setEnabled(False)
        self._set_running(False)

    def _build_layout(self) -> None:
        self.body = QWidget()
        controls = QHBoxLayout()
        controls.addWidget(QLabel("Bandwidth between hosts"))
        controls.addWidget(self.bandwidth_spin)
        controls.addWidget(self.quality_box)
        controls.addStretch(1)
        controls.addWidget(self.advise_button)
        controls.addWidget(self.cancel_button)
        result = QHBoxLayout()
        result.addWidget(self.recommended_label, 1)
        result.addWidget(self.use_button)
        body = QVBoxLayout(self.body)
        body.setContentsMargins(16, 0, 0, 0)
        body.addLayout(controls)
        body.addWidget(self.status)
        body.addWidget(self.progress_bar)
        body.addWidget(self.chart)
        body.addLayout(result)
        body.addWidget(self.confidence_label)
        body.addWidget(self.details_button)
        body.addWidget(self.table)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.header)
        layout.addWidget(self.body)

    def set_expanded(self, expanded: bool) -> None:
        """Show or fold the section (the header's arrow follows)."""
        if self.header.isChecked() != expanded:
            self.header.setChecked(expanded)  # toggled calls back here
            return
        self.header.setArrowType(Qt.ArrowType.DownArrow if expanded else Qt.ArrowType.RightArrow)
        self.body.setVisible(expanded)
        self._fit_window(shrink=not expanded)

    def set_details_shown(self, shown: bool) -> None:
        """Show or fold the advisor's tables under "Details" (its arrow follows)."""
        if self.details_button.isChecked() != shown:
            self.details_button.setChecked(shown)  # toggled calls back here
            return
        self.details_button.setArrowType(Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow)
        self.table.setVisible(shown)
        self._fit_window(shrink=not shown)

    # -------------------------------------------------------------- probing
    def advise(self) -> bool:
        """Start the advisor for the dialog's values; False (reason shown) when they are not ready."""
        self.set_expanded(True)
        try:
            request = dataclasses.replace(self._request(), bandwidth_gbps=self.bandwidth_spin.value(),
                                          quality_probe=self.quality_box.isChecked())
        except ValueError as exc:
            self._show_status(str(exc), error=True)
            return False
        self._steps = request.steps
        self._show_result("", None)
        self._set_running(True)
        self._show_status("probing… (timing the training step on this host" + (
            ", then short trainings at 1x, 4x and 16x the batch)" if request.quality_probe else ")"))
        self.runner.start(request.arguments())
        return True

    def cancel(self) -> None:
        """Stop a running probe (the table keeps nothing)."""
        if self.runner.cancel():
            self._set_running(False)
            self._show_status("probe cancelled")

    def shutdown(self) -> None:
        """Stop a running probe quietly (the dialog closes)."""
        if self.runner.cancel():
            self._set_running(False)
            self._show_status("")

    def use_recommendation(self) -> None:
        if self.recommendation is not None:
            self.recommendation_used.emit(self.recommendation.world_size, self.recommendation.sync_interval)

    def _on_finished(self, out: str, recommendation: Recommendation | None, advice: dict | None) -> None:
        self._set_running(False)
        self._show_result(out, recommendation, advice)
        if recommendation is None:
            self._show_status("the advisor printed no 'recommended:' line", error=True)
        else:
            self._show_status("")

    def _on_progress(self, progress: Progress) -> None:
        """Show one progress record (:func:`parse_progress`): ``done`` of ``total`` of its phase, and the time."""
        total = max(progress.total, progress.done, 1)
        self.progress_bar.setRange(0, total)
        self.progress_bar.setValue(progress.done)
        self.progress_bar.setFormat(f"{progress.label}: %v of %m ({progress.elapsed_s:.0f} s of "
                                    f"{progress.budget_s:.0f} s)")

    def _on_failed(self, message: str) -> None:
        self._set_running(False)
        self._show_status(f"Advisor failed: {message}", error=True)

    # ------------------------------------------------------------ display
    def _set_running(self, running: bool) -> None:
        self.advise_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.progress_bar.setRange(0, 0)  # busy until the first progress record
        self.progress_bar.setFormat("starting the probe…")
        self.progress_bar.setVisible(running)

    def _show_status(self, text: str, error: bool = False) -> None:
        self.status.setStyleSheet("color: #e05050;" if error else "")
        self.status.setText(text)
        self.status.setVisible(bool(text))

    def _show_result(self, out: str, recommendation: Recommendation | None, advice: dict | None = None) -> None:
        """The tables (``out``), the recommendation line and the chart (``advice``: the ``--json`` dict); ``out``
        empty: all cleared, the chart's placeholder says what Advise… draws."""
        self.recommendation = recommendation
        if out.strip():
            self.chart.show_advice(advice, self._steps)
        else:
            self.chart.clear()
        self.table.setPlainText(out.rstrip())
        self._fit_table(out.rstrip().count("\n") + 1 if out.strip() else 6)
        self.recommended_label.setText(recommendation.line if recommendation else "")
        text, rough = confidence_text(advice)
        self.confidence_label.setText(text)
        self.confidence_label.setStyleSheet("color: #d08020;" if rough else "")
        self.confidence_label.setVisible(bool(text))
        self.use_button.setEnabled(recommendation is not None)

    def _fit_table(self, lines: int) -> None:
        """Room for the table's ~100 columns and ``lines`` lines (at most 30; it scrolls beyond)."""
        metrics = self.table.fontMetrics()
        chrome = 2 * self.table.frameWidth() + self.table.horizontalScrollBar().sizeHint().height() + 12
        self.table.setMinimumSize(metrics.horizontalAdvance("x" * 104) + chrome,
                                  metrics.lineSpacing() * min(max(lines, 1), 30) + chrome)
        self._fit_window()

    def _fit_window(self, shrink: bool = False) -> None:
        """Grow the host dialog to show the section (``shrink``: fit it again once folded)."""
        window = self.window()
        if window is self or not window.isVisible():
            return
        if shrink:
            window.adjustSize()
            return
        hint = window.sizeHint()
        window.resize(max(window.width(), hint.width()), max(window.height(), hint.height()))

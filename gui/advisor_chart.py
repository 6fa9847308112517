"""The advisor as a picture: time to the same quality and farm hours against ranks (pyqtgraph), and one sentence.

The numbers come from the closing JSON line of ``cuetrain advise --json`` (``trainer.advise.advisor``), read by
:func:`parse_advice`. Per rank count, at the recommended sync interval ``k`` (``recommended.sync_interval``), with
``S`` the planned steps of the dialog (the advisor's ``--steps``) and ``ref`` the first prediction (fewest ranks,
shortest sync interval: 1 rank at sync 1, the advisor's baseline):

- time to the same quality [h] = ``S x ref.step_s / time_to_quality_speedup / 3600``: how soon ``N`` ranks reach the
  quality that ``S`` steps on ``ref`` give (``time_to_quality_speedup`` is against ``ref``, ``trainer.advise.quality``);
- without a critical batch (``time_to_quality_speedup`` null) it is the time for the same ``S`` steps instead,
  ``S x step_s / 3600`` [h], and the chart says so;
- farm hours [rank x h] = ``world_size x`` that time: what the gang holds of the farm.

The recommended rank count (``recommended.world_size``) is marked on both plots. ``recommendation_basis`` (one
sentence on what the recommendation rests on) is shown when the JSON has it, at the top level or in ``recommended``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Mapping

import pyqtgraph as pg
from qtpy.QtWidgets import QLabel, QVBoxLayout, QWidget

log = logging.getLogger(__name__)

#: Colours of the two series and the recommendation marker (as gui.graph's palette, on the dark plot background).
TIME_COLOUR, FARM_COLOUR, MARK_COLOUR = "#4c9be8", "#f0a030", "#5cc85c"
#: Chart units: (name on the axis, hours per unit), the first whose largest value is >= 1 unit (or the last).
UNITS = (("hours", 1.0), ("minutes", 1 / 60), ("seconds", 1 / 3600))
PLACEHOLDER = ("Advise… charts, for each number of ranks, how soon a model of the same quality is ready and how many "
               "farm hours (ranks x hours) it takes.")


@dataclass(frozen=True)
class RankPoint:
    """One rank count of the chart.

    Attributes:
        ranks: world size N [ranks].
        hours: wall-clock time to the same quality (or the same steps, :attr:`AdvisorSeries.same_quality`) [h].
        farm_hours: ``ranks x hours`` [rank-hours].
    """

    ranks: int
    hours: float
    farm_hours: float


@dataclass(frozen=True)
class AdvisorSeries:
    """What the chart and its sentence show (:func:`advisor_series`).

    Attributes:
        points: one per rank count, ascending ranks.
        recommended: the point at ``recommended.world_size``.
        sync_interval: the recommended sync interval every point is taken at [steps].
        same_quality: True: hours to the same quality (``time_to_quality_speedup``); False: hours for the same steps.
        steps: the planned steps the times refer to [steps].
        reference_ranks: ranks of the baseline whose ``steps`` steps set the quality [ranks].
        basis: the advisor's ``recommendation_basis`` sentence ("" when the JSON has none).
    """

    points: tuple[RankPoint, ...]
    recommended: RankPoint
    sync_interval: int
    same_quality: bool
    steps: int
    reference_ranks: int
    basis: str = ""


def parse_advice(out: str) -> dict[str, Any] | None:
    """The closing ``--json`` line of ``cuetrain advise`` output as a dict; None when there is none or it is broken."""
    lines = out.rstrip().splitlines()
    if not lines or not lines[-1].lstrip().startswith("{"):
        return None
    try:
        advice = json.loads(lines[-1])
    except ValueError:
        log.warning("the advisor's JSON line does not parse: %.80s", lines[-1])
        return None
    return advice if isinstance(advice, dict) else None


def _basis(advice: Mapping[str, Any]) -> str:
    chosen = advice.get("recommended") or {}
    text = advice.get("recommendation_basis") or (chosen.get("recommendation_basis") if isinstance(chosen, dict)
                                                  else None)
    return text.strip() if isinstance(text, str) else ""


def advisor_series(advice: Mapping[str, Any] | None, steps: int) -> AdvisorSeries | None:
    """Per-rank time and farm hours from the advisor's JSON (module doc); None when it holds no usable predictions.

    Args:
        advice: :func:`parse_advice`'s dict (keys ``recommended``, ``predictions``), or None.
        steps: the planned training steps the times are for [steps], > 0.
    """
    try:
        rows = sorted(advice["predictions"], key=lambda p: (int(p["world_size"]), int(p["sync_interval"])))
        ranks, k = int(advice["recommended"]["world_size"]), int(advice["recommended"]["sync_interval"])
        ref_seconds = steps * float(rows[0]["step_s"])
        at_k = [p for p in rows if int(p["sync_interval"]) == k]
        speedups = [p.get("time_to_quality_speedup") for p in at_k]
        same_quality = all(isinstance(s, (int, float)) and s > 0 for s in speedups)
        seconds = ([ref_seconds / float(s) for s in speedups] if same_quality
                   else [steps * float(p["step_s"]) for p in at_k])
        points = tuple(RankPoint(int(p["world_size"]), t / 3600, int(p["world_size"]) * t / 3600)
                       for p, t in zip(at_k, seconds))
        chosen = next(p for p in points if p.ranks == ranks)
    except (KeyError, TypeError, ValueError, IndexError, StopIteration):
        return None
    if steps <= 0 or not all(p.hours > 0 for p in points):
        return None
    return AdvisorSeries(points, chosen, k, same_quality, steps, int(rows[0]["world_size"]), _basis(advice))


def duration_text(hours: float) -> str:
    """``hours`` for a sentence: ``12 h``, ``0.4 h``, ``5 min``, ``40 s``."""
    if hours >= 10:
        return f"{hours:.0f} h"
    if hours >= 0.1:
        return f"{hours:.1f} h"
    return f"{hours * 60:.0f} min" if hours * 60 >= 1 else f"{hours * 3600:.0f} s"


def farm_text(farm_hours: float) -> str:
    """``farm_hours`` for a sentence: ``1.6 farm hours``, ``25 farm minutes``, ``40 farm seconds``."""
    value, unit = duration_text(farm_hours).split()
    return f"{value} farm {dict(h='hours', min='minutes', s='seconds')[unit]}"


def _ranks(n: int) -> str:
    return f"{n} rank" + ("" if n == 1 else "s")


def summary_sentence(series: AdvisorSeries) -> str:
    """One plain-English sentence: the recommended ranks, their time and farm hours, and what more ranks would do."""
    rec = series.recommended
    what = (f"a model as good as {series.steps:,} steps on {_ranks(series.reference_ranks)}, in"
            if series.same_quality else f"the {series.steps:,} steps in")
    head = f"{_ranks(rec.ranks)}: {what} {duration_text(rec.hours)}, for {farm_text(rec.farm_hours)}"
    more = [p for p in series.points if p.ranks > rec.ranks]
    if not more:
        fewer = [p for p in series.points if p.ranks < rec.ranks]
        return head + ("; fewer ranks take longer." if fewer and all(p.hours > rec.hours for p in fewer) else ".")
    soonest = min(more, key=lambda p: p.hours)
    saved, extra = rec.hours - soonest.hours, soonest.farm_hours - rec.farm_hours
    if saved <= 0:
        return head + "; more ranks are not sooner."
    if saved < 0.1 * rec.hours:
        return head + "; more ranks cost more farm hours for little time saved."
    return head + (f"; {_ranks(soonest.ranks)} would be {duration_text(saved)} sooner"
                   + (f" for {farm_text(extra)} more." if extra > 0 else "."))


def chart_unit(hours: list[float]) -> tuple[str, float]:
    """The axis unit for values in ``hours``: ``(name, hours per unit)`` from :data:`UNITS`."""
    top = max(hours, default=0.0)
    return next(((name, size) for name, size in UNITS if top >= size), UNITS[-1])


class AdvisorChart(QWidget):
    """Two small plots against ranks (time to the same quality; farm hours), the recommendation marked on both, and
    the sentence under them; a placeholder line until :meth:`show_advice` gets usable advice."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.series: AdvisorSeries | None = None
        self.placeholder = QLabel(PLACEHOLDER)
        self.placeholder.setObjectName("advisor_chart_placeholder")
        self.placeholder.setWordWrap(True)
        self.placeholder.setStyleSheet("color: gray;")
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setFixedHeight(230)  # pyqtgraph's size hint would take the dialog's whole height
        self.time_plot = self.plots.addPlot(row=0, col=0)
        self.farm_plot = self.plots.addPlot(row=0, col=1)
        self.time_curve, self.time_mark, self.time_line = self._series_items(self.time_plot, TIME_COLOUR)
        self.farm_curve, self.farm_mark, self.farm_line = self._series_items(self.farm_plot, FARM_COLOUR)
        self.sentence = QLabel("")
        self.sentence.setObjectName("advisor_sentence")
        self.sentence.setWordWrap(True)
        self.basis = QLabel("")
        self.basis.setObjectName("advisor_basis")
        self.basis.setWordWrap(True)
        self.basis.setStyleSheet("color: gray;")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.placeholder)
        layout.addWidget(self.plots)
        layout.addWidget(self.sentence)
        layout.addWidget(self.basis)
        self.clear()

    @staticmethod
    def _series_items(plot: pg.PlotItem, colour: str) -> tuple[pg.PlotDataItem, pg.ScatterPlotItem, pg.InfiniteLine]:
        """A curve with a dot per rank count, a star at the recommended point, a dashed line at its ranks."""
        plot.showGrid(x=True, y=True, alpha=0.25)
        plot.setLabel("bottom", "ranks")
        plot.getAxis("left").enableAutoSIPrefix(False)
        plot.setMouseEnabled(x=False, y=False)
        plot.hideButtons()
        curve = plot.plot([], [], pen=pg.mkPen(colour, width=2), symbol="o", symbolSize=7, symbolBrush=colour)
        line = pg.InfiniteLine(angle=90, movable=False, pen=pg.mkPen(MARK_COLOUR, width=1, style=pg.QtCore.Qt.DashLine))
        mark = pg.ScatterPlotItem(symbol="star", size=18, brush=pg.mkBrush(MARK_COLOUR), pen=pg.mkPen("w"))
        plot.addItem(line)
        plot.addItem(mark)
        return curve, mark, line

    def clear(self, placeholder: str = PLACEHOLDER) -> None:
        """No chart: ``placeholder`` says why (or what Advise… will draw)."""
        self.series = None
        for item in (self.time_curve, self.farm_curve, self.time_mark, self.farm_mark):
            item.setData([], [])
        self.placeholder.setText(placeholder)
        self.placeholder.show()
        self.plots.hide()
        for label in (self.sentence, self.basis):
            label.setText("")
            label.hide()

    def show_advice(self, advice: Mapping[str, Any] | None, steps: int) -> AdvisorSeries | None:
        """Draw the advisor's JSON (:func:`advisor_series`) for ``steps`` planned steps; a placeholder when unusable."""
        series = advisor_series(advice, steps)
        if series is None:
            self.clear("No chart: the advisor printed no JSON line (its tables are under Details)." if advice is None
                       else "No chart: the advisor's JSON has no usable per-rank predictions (tables under Details).")
            return None
        self.series = series
        ranks = [p.ranks for p in series.points]
        self._draw(self.time_plot, self.time_curve, self.time_mark, self.time_line, ranks,
                   [p.hours for p in series.points], series.recommended.hours, "",
                   "time to the same quality" if series.same_quality else f"time for {series.steps:,} steps")
        self._draw(self.farm_plot, self.farm_curve, self.farm_mark, self.farm_line, ranks,
                   [p.farm_hours for p in series.points], series.recommended.farm_hours, "rank-",
                   "farm time (ranks x time)")
        self.placeholder.hide()
        self.plots.show()
        self.sentence.setText(summary_sentence(series))
        self.sentence.show()
        self.basis.setText(series.basis)
        self.basis.setVisible(bool(series.basis))
        return series

    def _draw(self, plot: pg.PlotItem, curve: pg.PlotDataItem, mark: pg.ScatterPlotItem, line: pg.InfiniteLine,
              ranks: list[int], hours: list[float], chosen: float, unit_prefix: str, title: str) -> None:
        """One plot: ``hours`` [h] against ``ranks`` in :func:`chart_unit`'s unit, the recommendation marked."""
        unit, size = chart_unit(hours)
        curve.setData(ranks, [h / size for h in hours])
        mark.setData([self.series.recommended.ranks], [chosen / size])
        line.setValue(self.series.recommended.ranks)
        plot.setTitle(title)
        plot.setLabel("left", unit_prefix + unit)
        plot.getAxis("bottom").setTicks([[(n, str(n)) for n in ranks]])
        plot.setXRange(min(ranks) - 0.5, max(ranks) + 0.5, padding=0)
        plot.setYRange(0, max(hours) / size * 1.1, padding=0)

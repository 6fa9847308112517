"""The Graph area: one metric against step for every run with "show graph" ticked (pyqtgraph).

A thin view: it reads :class:`gui.records.Run` metrics and redraws a run's curve when the controller
says its metrics changed. Long runs are decimated to :data:`MAX_POINTS` points before plotting.
"""

from __future__ import annotations

import pyqtgraph as pg
from qtpy.QtWidgets import QCheckBox, QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from gui.controller import RunsController
from gui.records import decimate

#: Dropdown label -> (metrics column, y-axis label, log scale by default).
METRICS = {
    "Loss": ("loss", "loss", True),
    "Learning rate": ("lr", "learning rate", True),
    "Images/s": ("images_per_s", "images / s", False),
    # McCandlish et al. 2018's B_simple, smoothed (trainer.learn.noise_scale): the global batch [crops] past
    # which more crops per update stop buying fewer updates
    "Gradient noise scale": ("noise_scale", "noise scale (crops)", True),
}
#: Points per curve after decimation.
MAX_POINTS = 2000
#: Curve colours, distinct on the dark plot background (cycled by run order).
PALETTE = ("#4c9be8", "#f0a030", "#5cc85c", "#e05050", "#b07ce8", "#40c8c8", "#e8e050", "#e878b8", "#a0a0a0")


class GraphView(QWidget):
    """Metric dropdown, log-scale toggle and a plot with one curve per shown run."""

    def __init__(self, controller: RunsController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self._curves: dict[str, pg.PlotDataItem] = {}
        self.metric_box = QComboBox()
        self.metric_box.addItems(list(METRICS))
        self.log_box = QCheckBox("Log scale")
        self.plot = pg.PlotWidget()
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.setLabel("bottom", "step")
        self.plot.getAxis("left").enableAutoSIPrefix(False)  # "0.1", not "100 (x0.001)"
        self.plot.addLegend(offset=(-10, 10))
        self._build_layout()
        self.metric_box.currentTextChanged.connect(self._on_metric_changed)
        self.log_box.toggled.connect(self._on_log_toggled)
        controller.metrics_updated.connect(self.refresh_run)
        controller.run_added.connect(self.refresh_run)
        controller.run_updated.connect(self._on_run_updated)
        controller.run_removed.connect(self._remove_curve)
        self._on_metric_changed(self.metric_box.currentText())

    def _build_layout(self) -> None:
        top = QHBoxLayout()
        top.addWidget(QLabel("Graph"))
        top.addWidget(self.metric_box)
        top.addWidget(self.log_box)
        top.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.plot, 1)

    @property
    def column(self) -> str:
        """The metrics column plotted now."""
        return METRICS[self.metric_box.currentText()][0]

    def curve_names(self) -> list[str]:
        """Run directories that have a curve (for tests)."""
        return list(self._curves)

    def curve_data(self, run_dir: str) -> tuple:
        """The ``(x, y)`` arrays drawn for ``run_dir`` (for tests)."""
        return self._curves[run_dir].getData()

    def refresh_all(self) -> None:
        """Redraw every run's curve."""
        for run in self._controller.runs():
            self.refresh_run(run.run_dir)

    def refresh_run(self, run_dir: str) -> None:
        """Redraw the curve of ``run_dir`` (or remove it when the run is hidden or gone)."""
        run = self._controller.run(run_dir)
        if run is None or not run.show_graph:
            self._remove_curve(run_dir)
            return
        x, y = decimate(run.metrics.view("step"), run.metrics.view(self.column), MAX_POINTS)
        curve = self._curves.get(run.run_dir)
        if curve is None:
            index = [r.run_dir for r in self._controller.runs()].index(run.run_dir)
            pen = pg.mkPen(PALETTE[index % len(PALETTE)], width=1.5)
            curve = self.plot.plot(name=run.name, pen=pen, connect="finite")
            self._curves[run.run_dir] = curve
        curve.setData(x, y, connect="finite")

    def _on_run_updated(self, run_dir: str) -> None:
        run = self._controller.run(run_dir)
        if run is not None and run.show_graph != (run.run_dir in self._curves):
            self.refresh_run(run_dir)

    def _remove_curve(self, run_dir: str) -> None:
        curve = self._curves.pop(run_dir, None)
        if curve is not None:
            self.plot.removeItem(curve)

    def _on_metric_changed(self, label: str) -> None:
        _, axis_label, log_scale = METRICS[label]
        self.plot.setLabel("left", axis_label)
        self.log_box.blockSignals(True)
        self.log_box.setChecked(log_scale)
        self.log_box.blockSignals(False)
        self.plot.setLogMode(x=False, y=log_scale)
        self.refresh_all()
        self.plot.enableAutoRange()

    def _on_log_toggled(self, on: bool) -> None:
        self.plot.setLogMode(x=False, y=on)
        self.plot.enableAutoRange()

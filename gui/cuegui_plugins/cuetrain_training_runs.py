"""CueGUI plugin "Training Runs": the selected cuetrain job's loss graph, latest contact sheet or preview, ranks.

CueGUI 1.37's plugin convention (``cuegui/Plugins.py``): a module in a folder on CueGUI's plugin paths
(``paths.plugins`` in cuegui.yaml, or ``Plugin_Paths`` in the user's ``~/.config/.cuetopia/cuetopia.ini``)
that defines ``PLUGIN_NAME``, ``PLUGIN_CATEGORY``, ``PLUGIN_DESCRIPTION`` and ``PLUGIN_PROVIDES`` (the
class to instantiate, here a ``cuegui.AbstractDockWidget.AbstractDockWidget``). CueGUI lists it under
Views/Plugins > Cuetrain > Training Runs.

Selecting (single or double click) a job in the job monitor emits ``app.single_click`` /
``app.view_object``; a cuetrain job (one layer whose command runs ``-m cue_plugin.frame``) is followed:
its run directory comes from the layer command's ``--run-dir``. The dock's label sums the run up
(:func:`run_summary`: state, step, ranks, time left, task, upres factor and what its weights started from, as the Runs
panel's Task, Scale and Start columns show them) above its live loss graph (:class:`gui.graph.GraphView`), its
contact sheets and previews in two tabs (:class:`gui.contact_sheet.ContactSheetView`,
:class:`gui.contact_sheet.PreviewView`: the model's renders of the run's ``--preview`` frames) and one row per
rank = frame (state, host, retries, exit status), polled by a :class:`gui.controller.RunsController` on its
worker thread. CueGUI is a pycue application, so the farm here is
:class:`cue_plugin.submit.opencue_farm.OpenCueFarm` in process, using CueGUI's Cuebot connection.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # imported by CueGUI by file name: make the cuetrain checkout importable
    _ROOT = str(Path(__file__).resolve().parents[2])
    if _ROOT not in sys.path:
        sys.path.append(_ROOT)

import cuegui.AbstractDockWidget  # noqa: E402 - after the path fix
import cuegui.Utils  # noqa: E402
from qtpy.QtCore import Qt  # noqa: E402
from qtpy.QtWidgets import QLabel, QSplitter, QTreeWidget, QTreeWidgetItem  # noqa: E402

from cue_plugin.submit.spec import JobHandle  # noqa: E402
from gui.contact_sheet import ContactSheetView, PreviewView  # noqa: E402
from gui.controller import RunsController  # noqa: E402
from gui.graph import GraphView  # noqa: E402
from gui.records import Run, time_left_text  # noqa: E402
from gui.runs_panel import image_tabs, start_tooltip  # noqa: E402
from gui.task import task_text  # noqa: E402
from gui.head_start import started_from_text  # noqa: E402
from gui.upres import record_scale, scale_text  # noqa: E402

log = logging.getLogger(__name__)

PLUGIN_NAME = "Training Runs"
PLUGIN_CATEGORY = "Cuetrain"
PLUGIN_DESCRIPTION = "Loss graph, latest contact sheet or preview and rank frames of the selected cuetrain job"
PLUGIN_PROVIDES = "TrainingRunsDockWidget"

#: Live Updates period while the dock is open [ms].
POLL_INTERVAL_MS = 3000
RANK_COLUMNS = ("Rank", "State", "Host", "Retries", "Exit")


def _in_process_farm():
    from cue_plugin.submit.opencue_farm import OpenCueFarm  # CueGUI already runs pycue

    return OpenCueFarm()


def run_dir_of(job) -> str | None:
    """The run directory of a cuetrain job (its layer command's ``--run-dir``), else None (not cuetrain)."""
    for layer in job.getLayers():
        argv = shlex.split(layer.data.command or "")
        if not any("cue_plugin.frame" in arg for arg in argv):
            continue
        for i, arg in enumerate(argv[:-1]):
            if arg == "--run-dir":
                return argv[i + 1]
    return None


def run_summary(run: Run, now: float | None = None) -> str:
    """The dock's label for ``run``: job, state, step, ranks, time left (as the Runs panel's Time left column, as
    of ``now`` [s since the epoch, default this machine's clock]; left out when blank), task, upres factor and
    start, run directory.

    The task, factor and start read as the Runs panel's Task, Scale and Start columns (:mod:`gui.task`,
    :mod:`gui.upres`, :mod:`gui.head_start`), e.g. ``shot010 - running, step 40/400, ranks 2/2 - matte, upres 2x,
    start: shot010_v1 step 100 - /runs/shot010_v2``.
    """
    job = run.handle.job_name if run.handle else run.name
    left = time_left_text(run, time.time() if now is None else now)
    left = f", time left {left}" if left else ""
    return (f"{job}  -  {run.state}, step {run.step}/{run.total_steps or '?'}, ranks {run.ranks_text}{left}  -  "
            f"{task_text(run.record)}, {scale_text(record_scale(run.record))}, "
            f"start: {started_from_text(run.record)}  -  {run.run_dir}")


class TrainingRunsDockWidget(cuegui.AbstractDockWidget.AbstractDockWidget):
    """The "Training Runs" dock (see module doc).

    Args:
        parent: CueGUI's main window (CueGUI passes it).
        farm_factory: farm backend for describe (default: in-process :class:`OpenCueFarm`).
    """

    def __init__(self, parent, farm_factory=None) -> None:
        super().__init__(parent, PLUGIN_NAME, Qt.DockWidgetArea.RightDockWidgetArea)
        self.controller = RunsController(farm_factory or _in_process_farm, settings=None,
                                         poll_interval_ms=POLL_INTERVAL_MS, parent=self)
        self.job_label = QLabel("Select a cuetrain job in the job monitor.")
        self.job_label.setWordWrap(True)
        self.graph = GraphView(self.controller)
        self.sheet = ContactSheetView(self.controller)
        self.preview = PreviewView(self.controller)
        self.images = image_tabs(self.sheet, self.preview)
        self.ranks = QTreeWidget()
        self.ranks.setHeaderLabels(list(RANK_COLUMNS))
        self.ranks.setRootIsDecorated(False)
        split = QSplitter(Qt.Orientation.Vertical)
        for widget in (self.graph, self.images, self.ranks):
            split.addWidget(widget)
        split.setSizes([300, 300, 120])
        self.layout().addWidget(self.job_label)
        self.layout().addWidget(split, 1)
        self.controller.run_updated.connect(self._on_run_updated)
        self.app.single_click.connect(self.set_job)
        self.app.view_object.connect(self.set_job)
        self.run_dir: str | None = None

    def set_job(self, job) -> None:
        """Follow ``job`` when it is a cuetrain job (other objects and jobs are ignored)."""
        if not cuegui.Utils.isJob(job):
            return
        try:
            run_dir = run_dir_of(job)
        except Exception as exc:  # noqa: BLE001 - a farm error must not break CueGUI's selection
            self.job_label.setText(f"{job.name()}: cannot read its layers ({exc})")
            return
        if run_dir is None:
            self.job_label.setText(f"{job.name()} is not a cuetrain training job.")
            return
        run_dir = os.path.normpath(run_dir)
        for run in self.controller.runs():
            if run.run_dir != run_dir:
                self.controller.remove_run(run.run_dir)
        self.run_dir = self.controller.add_run(run_dir, JobHandle(job.id(), job.name(), run_dir)).run_dir
        self.sheet.choose(self.run_dir)
        self.preview.choose(self.run_dir)
        self.job_label.setText(f"{job.name()}  -  {self.run_dir}")
        self.controller.set_live_updates(True)  # polls now, then every POLL_INTERVAL_MS

    def _on_run_updated(self, run_dir: str) -> None:
        run = self.controller.run(run_dir)
        if run is None or run_dir != self.run_dir:
            return
        self.job_label.setText(run_summary(run))
        self.job_label.setToolTip(start_tooltip(run))  # the head start's path, kind, weights, step, ...
        self.ranks.clear()
        frames = run.status.frames if run.status is not None else {}
        for number, frame in sorted(frames.items(), key=lambda kv: int(kv[0])):
            self.ranks.addTopLevelItem(QTreeWidgetItem([str(number), str(frame.get("state", "?")),
                                                        str(frame.get("host") or "-"),
                                                        str(frame.get("retries", 0)),
                                                        str(frame.get("exit_status", "-"))]))

    def rank_rows(self) -> list[list[str]]:
        """The ranks table as texts (tests, screenshots)."""
        return [[self.ranks.topLevelItem(i).text(c) for c in range(len(RANK_COLUMNS))]
                for i in range(self.ranks.topLevelItemCount())]

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt API
        self.controller.shutdown()
        self.sheet.shutdown()
        self.preview.shutdown()
        super().closeEvent(event)

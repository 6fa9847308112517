"""GUI test fixtures: offscreen Qt, a fake farm, temp QSettings, synthetic run directories."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before any Qt import

import gc  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import pytest  # noqa: E402
from qtpy.QtCore import QCoreApplication, QEvent, QSettings  # noqa: E402

from cue_plugin.submit.spec import FarmError, JobHandle, JobStatus, RunState, TrainingJob  # noqa: E402
from gui.controller import RunsController  # noqa: E402


@pytest.fixture(autouse=True)
def _qt_objects_die_on_the_gui_thread(qapp):
    """After each GUI test, delete the Qt objects it left, here, on the GUI thread.

    Why: a test's windows, dialogs and controllers sit in reference cycles (signal connections to bound
    methods), so Python's cyclic GC frees them later, on whichever thread happens to allocate at that
    moment. In the suite that is a gRPC worker or the Cuebot double's dispatcher thread of the next
    (multihost) test, and a ``QWidget``/``QTimer`` deleted off the GUI thread is a segfault: the CI crash
    of stop 25 (exit 139 in ``tests/multihost/test_booking.py``), and the "unexplained segfault in a
    worker thread of the multihost fixture" of issue 20. ``test_gui_tests_leave_no_qt_object_for_another_thread``
    (test_widgets.py) reproduces it: without this fixture it segfaults every time.
    """
    yield
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)  # the tests' deleteLater() calls
    gc.collect()  # cycles holding Qt wrappers die now, on this thread
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@dataclass
class FakeFarm:
    """A :class:`cue_plugin.submit.spec.Farm` in memory: records calls, answers from ``statuses``."""

    submitted: list[TrainingJob] = field(default_factory=list)
    cancelled: list[JobHandle] = field(default_factory=list)
    described: list[JobHandle] = field(default_factory=list)
    statuses: dict[str, JobStatus] = field(default_factory=dict)
    submit_error: str = ""

    def dry_run(self, job: TrainingJob) -> str:
        return f"<job world_size={job.world_size}/>"

    def submit(self, job: TrainingJob) -> JobHandle:
        if self.submit_error:
            raise FarmError(self.submit_error)
        self.submitted.append(job)
        n = len(self.submitted)
        return JobHandle(f"id-{n}", f"{job.show}-{job.shot}-{job.user}_{job.name}", job.train.run_dir)

    def describe(self, handle: JobHandle) -> JobStatus:
        self.described.append(handle)
        return self.statuses.get(handle.job_id, JobStatus(RunState.RUNNING, 2, 4, "IN_PROGRESS"))

    def cancel(self, handle: JobHandle) -> None:
        self.cancelled.append(handle)


class RetryFarm(FakeFarm):
    """A fake farm that can retry frames, as OpenCue's backend does."""

    def __init__(self) -> None:
        super().__init__()
        self.retried: list[JobHandle] = []

    def retry(self, handle: JobHandle) -> int:
        self.retried.append(handle)
        return 1  # dead frames retried, as OpenCueFarm.retry answers


@pytest.fixture
def farm() -> FakeFarm:
    return FakeFarm()


@pytest.fixture
def settings(tmp_path) -> QSettings:
    """Settings in a temp INI file (never the user's)."""
    return QSettings(str(tmp_path / "cuetrain-gui.ini"), QSettings.Format.IniFormat)


@pytest.fixture
def controller(qapp, farm, settings):
    ctl = RunsController(lambda: farm, settings, poll_interval_ms=50)
    yield ctl
    ctl.shutdown()
    ctl.deleteLater()


def fill_dialog(dialog, tmp_path) -> None:
    """Fill a SubmitDialog's required fields: new Input and Ground Truth folders ``in``/``gt`` under ``tmp_path``, the
    run directory ``tmp_path/new_run``, show ``demo`` and shot ``sh010``."""
    for name, edit in (("in", dialog.input_edit), ("gt", dialog.target_edit)):
        (tmp_path / name).mkdir(exist_ok=True)
        edit.setText(str(tmp_path / name))
    dialog.run_dir_edit.setText(str(tmp_path / "new_run"))
    dialog.show_edit.setText("demo")
    dialog.shot_edit.setText("sh010")

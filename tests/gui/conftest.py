"""GUI test fixtures: offscreen Qt, a fake farm, temp QSettings, synthetic run directories."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before any Qt import

from dataclasses import dataclass, field  # noqa: E402

import pytest  # noqa: E402
from qtpy.QtCore import QSettings  # noqa: E402

from cue_plugin.spec import FarmError, JobHandle, JobStatus, RunState, TrainingJob  # noqa: E402
from gui.controller import RunsController  # noqa: E402


@dataclass
class FakeFarm:
    """A :class:`cue_plugin.spec.Farm` in memory: records calls, answers from ``statuses``."""

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

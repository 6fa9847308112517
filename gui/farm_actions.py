"""Farm actions on a followed run, as plain functions a worker thread runs: making the farm backend, submit, cancel,
retry or resume, and an inference job. No widgets, no signals: :class:`gui.controller.RunsController` runs them
on its thread pool and emits what they return (a :class:`gui.workers.Outcome`) or raise.
"""

from __future__ import annotations

import os
from typing import Callable

from cue_plugin.submit.spec import Farm, FarmError, JobHandle, TrainingJob
from gui.workers import Outcome


def make_farm(factory: Callable[[], Farm]) -> Farm:
    """The farm backend ``factory`` makes.

    Raises:
        FarmError: it cannot be made (e.g. OpenCue is not installed); any other error is said as one.
    """
    try:
        return factory()
    except FarmError:
        raise
    except Exception as exc:  # noqa: BLE001 - ImportError and friends, said plainly
        raise FarmError(f"cannot start the farm backend: {exc}; install cuetrain[farm] "
                        "and check the OpenCue configuration") from exc


def submit_job(farm: Farm, job: TrainingJob, progress: Callable[[str], None]) -> JobHandle:
    """Submit ``job``, telling ``progress`` each step when the farm can (``submit_with_progress``)."""
    with_progress = getattr(farm, "submit_with_progress", None)
    return with_progress(job, progress) if callable(with_progress) else farm.submit(job)


def cancel_job(farm: Farm, run_dir: str, handle: JobHandle) -> Outcome:
    """Kill the run's farm job (idempotent)."""
    farm.cancel(handle)
    return Outcome(run_dir, f"cancelled job {handle.job_name or handle.job_id}")


def retry_job(farm: Farm, run_dir: str, mode: str, handle: JobHandle | None, job: TrainingJob | None) -> Outcome:
    """Retry a live job's failed frames (``mode`` ``retry``: ``farm.retry``), or resubmit ``job`` (the run with
    resume); ``mode`` and ``job`` as ``gui.records.retry_plan`` gives them.

    Raises:
        FarmError: the farm cannot retry frames, or the farm's own error.
    """
    if mode == "retry":
        retry = getattr(farm, "retry", None)
        if not callable(retry):
            raise FarmError("this farm cannot retry frames; cancel the job, then Retry/Resume "
                            "resubmits the run with resume")
        new = retry(handle)  # OpenCue: how many dead frames were retried
        name = handle.job_name or handle.job_id
        count = f"{new} " if isinstance(new, int) else ""
        return Outcome(run_dir, f"retried {count}failed frame(s) of {name}",
                       handle=new if isinstance(new, JobHandle) else None)
    new = farm.submit(job)
    return Outcome(run_dir, f"resumed as job {new.job_name or new.job_id}", handle=new)


def infer_job(farm: Farm, run_dir: str, input_dir: str, output_dir: str, show: str, shot: str, template: str,
              chunk: int | None) -> Outcome:
    """Apply the run's ``model.pt`` to a shot on the farm (``farm.submit_infer``, a separate job under ``show`` and
    ``shot``); ``chunk``: input frames per farm frame (None: the farm's default).

    Raises:
        FarmError: the farm cannot submit inference jobs, or the farm's own error.
    """
    submit = getattr(farm, "submit_infer", None)
    if not callable(submit):
        raise FarmError("this farm cannot submit inference jobs; use cuetrain submit-infer")
    new = submit(os.path.join(run_dir, "model.pt"), input_dir, output_dir, show, shot, template, chunk)
    return Outcome(run_dir, f"submitted inference job {new.job_name or new.job_id} -> {output_dir}")

"""The soak's checks: what a supervisor's exit may be after each fault, and what a finished run must show.

A run passes when it ends ``succeeded`` at its last step with a valid ``run.json`` whose attempts match its faults (an
elastic run's: world sizes full, shrunk, full again per fault), its model's held-out gain is within
:data:`GAIN_TOLERANCE_DB` of the fault-free reference, no fault lost more than its kind's checkpoint intervals, and
the run directory holds no temp file. Anything else makes it a lost run.
"""

from __future__ import annotations

from pathlib import Path

from lib.soak_plan import ELASTIC_MIN_WORLD_SIZE, KINDS, FaultOutcome, RunConfig
from trainer.core.exitcodes import ExitCode
from trainer.record.rundir import RunDirError, RunPaths
from trainer.record.runrecord import read_record

GAIN_TOLERANCE_DB = 0.3  # a faulted run's held-out gain may differ from the fault-free run's by this much [dB]

#: A second writer into a live run directory must be refused with exit 2 (the run-directory lease,
#: ``trainer.record.lease``); False would report one that is not refused as a known gap instead of a failure.
LEASE_REQUIRED = True

#: Supervisor exits a fault kind may cause (the soak then starts the run again with ``--resume``, as an operator or
#: the farm's retry would): Popen codes (-9 = killed by SIGKILL) -> the run.json states that may go with it.
EXPECTED_EXITS: dict[str, dict[int, tuple[str, ...]]] = {
    "kill_agent": {-9: ("running", "failed")},  # the ranks die of a broken pipe and rank 0 records it, or not
    "kill_frame": {-9: ("running", "failed")},  # every process killed at once: nobody records anything
    "sigterm_agent": {ExitCode.STOPPED: ("stopped",)},  # the gang agreed on a step and checkpointed it
    "runjson_immutable": {ExitCode.USAGE: ("running", "failed")},  # run.json cannot take the new attempt
}


def judge_second_submit(code: int | None, lease_required: bool = LEASE_REQUIRED) -> tuple[bool, str]:
    """Judge a second ``cuetrain local --resume`` into a live run directory.

    Args:
        code: its exit code within ``SECOND_SUBMIT_WAIT_S`` (None: still running, then stopped by the soak).
        lease_required: a second writer must be refused (exit 2); False: not being refused is a known gap.

    Returns: (acceptable, one line saying what happened).
    """
    if code == ExitCode.USAGE:
        return True, "second submit refused (exit 2)"
    said = "still running, stopped by the soak" if code is None else f"exit {code}"
    if lease_required:
        return False, f"second submit into a live run directory not refused ({said})"
    return True, f"known gap: second submit into a live run directory not refused ({said}; run-directory lease)"


def expected_exit(kind: str, code: int, state: str) -> bool:
    """Whether a supervisor exiting ``code`` with run.json in ``state`` is what fault ``kind`` may do."""
    return state in EXPECTED_EXITS.get(kind, {}).get(code, ())


def check_run(paths: RunPaths, cfg: RunConfig, outcomes: list[FaultOutcome], extra_attempts: int) -> list[str]:
    """What is wrong with a finished run (empty: nothing): state, last step, attempts, steps lost, temp files.

    ``extra_attempts``: attempts a second writer may have recorded (the known gap of :func:`judge_second_submit`).
    """
    problems = [o.problem for o in outcomes if o.problem]
    try:
        record = read_record(paths)
    except (RunDirError, ValueError, OSError) as exc:
        return [*problems, f"run.json unreadable: {exc}"]
    if record.state != "succeeded" or record.final_step != cfg.steps:
        problems.append(f"run ended {record.state or 'without a state'} at step {record.final_step} "
                        f"({record.failure_kind or '-'}: {record.error[:120]})")
    expected = 1 + sum(KINDS[o.fault.kind].attempts for o in outcomes)
    if not expected <= len(record.attempts) <= expected + extra_attempts:
        problems.append(f"{len(record.attempts)} attempts in run.json, the faults make {expected}"
                        + (f" (+ up to {extra_attempts} of a second writer)" if extra_attempts else ""))
    sizes = [a.get("world_size") for a in record.attempts]
    if (want := elastic_sizes(cfg.world_size, outcomes)) and sizes != want:
        problems.append(f"attempts of {sizes} ranks in run.json, an elastic run's faults make {want}")
    numbers = [a.get("attempt") for a in record.attempts]
    if numbers != list(range(1, len(numbers) + 1)):
        problems.append(f"attempt numbers {numbers} are not 1..{len(numbers)}")
    for o in outcomes:
        bound = KINDS[o.fault.kind].lost_intervals * cfg.interval
        if o.steps_lost > bound:
            problems.append(f"{o.fault.kind} at step {o.fault.step}: lost {o.steps_lost} steps (> {bound})")
    temp = sorted(str(p.relative_to(paths.root)) for p in Path(paths.root).rglob("*.tmp"))
    if temp:
        problems.append(f"temp files left: {', '.join(temp[:5])}")
    return problems


def elastic_sizes(world_size: int, outcomes: list[FaultOutcome]) -> list[int]:
    """The world sizes [ranks] of an elastic run's attempts: ``world_size``, then the shrunk and the full gang for
    each fault; [] when any fault is not ``elastic`` (another path's run: not checked here)."""
    if not outcomes or any(o.fault.kind != "elastic" for o in outcomes):
        return []
    return [world_size, *[ELASTIC_MIN_WORLD_SIZE, world_size] * len(outcomes)]


def check_gain(gain_db: float | None, reference_db: float | None) -> str:
    """"" when the held-out gain is within :data:`GAIN_TOLERANCE_DB` of the reference's, else why not."""
    if gain_db is None:
        return "no model to score"
    if reference_db is not None and abs(gain_db - reference_db) > GAIN_TOLERANCE_DB:
        return f"held-out gain {gain_db:+.2f} dB, the fault-free run's {reference_db:+.2f} dB (> {GAIN_TOLERANCE_DB})"
    return ""

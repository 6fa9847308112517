"""OpenCue job and frame states map to run states through one table (UNKNOWN for anything else)."""

import pytest
from opencue_proto import job_pb2

from cue_plugin.submit.opencue_farm import FRAME_GROUPS, STATES, frame_summary, run_state
from cue_plugin.submit.spec import RunState

#: (job state, frame states, expected run state), written by hand: every entry of STATES has a case
#: here (test_every_table_entry_has_a_hand_written_case), plus combinations that must be UNKNOWN.
CASES = [
    ("PENDING", ["WAITING", "WAITING"], RunState.PENDING),
    ("PENDING", ["DEPEND", "WAITING"], RunState.PENDING),
    ("PENDING", ["RUNNING", "WAITING"], RunState.RUNNING),  # OpenCue starts frames one by one
    ("PENDING", ["SETUP", "RUNNING"], RunState.RUNNING),
    ("PENDING", ["RUNNING", "SUCCEEDED"], RunState.RUNNING),
    ("PENDING", ["DEAD", "RUNNING"], RunState.FAILED),  # a dead rank fails the gang; the job waits for a retry
    ("PENDING", ["EATEN", "SUCCEEDED"], RunState.FAILED),
    ("FINISHED", ["SUCCEEDED", "SUCCEEDED"], RunState.SUCCEEDED),
    ("FINISHED", ["WAITING", "WAITING"], RunState.CANCELLED),  # killed: running frames went back to WAITING
    ("FINISHED", ["SUCCEEDED", "WAITING"], RunState.CANCELLED),
    ("FINISHED", ["DEAD", "WAITING"], RunState.FAILED),  # killed after a rank had died
    ("FINISHED", ["EATEN", "SUCCEEDED"], RunState.FAILED),
    ("STARTUP", [], RunState.PENDING),
    ("POSTED", ["WAITING"], RunState.UNKNOWN),
    ("PENDING", [], RunState.UNKNOWN),
    ("PENDING", ["RUNNING", "SOMETHING_NEW"], RunState.UNKNOWN),
    ("PENDING", ["SUCCEEDED", "SUCCEEDED"], RunState.SUCCEEDED),  # before Cuebot marks the job FINISHED
    ("PENDING", ["CHECKPOINT", "SUCCEEDED"], RunState.RUNNING),
    ("STARTUP", ["WAITING", "DEPEND"], RunState.PENDING),
    ("FINISHED", [], RunState.CANCELLED),
    ("FINISHED", ["RUNNING", "SUCCEEDED"], RunState.CANCELLED),  # killed: a frame not yet back to WAITING
    ("SHUTDOWN", ["RUNNING", "WAITING"], RunState.CANCELLED),  # being killed
    ("SHUTDOWN", ["WAITING"], RunState.CANCELLED),
    ("SHUTDOWN", ["SUCCEEDED"], RunState.UNKNOWN),
    ("POSTED", [], RunState.UNKNOWN),
]


@pytest.mark.parametrize("job_state,frames,expected", CASES)
def test_state_table(job_state, frames, expected):
    assert run_state(job_state, frames) is expected


def test_frame_summary_precedence():
    assert frame_summary([]) == "none"
    assert frame_summary(["SUCCEEDED", "WAITING", "RUNNING", "EATEN", "DEAD"]) == "dead"
    assert frame_summary(["SUCCEEDED", "CHECKPOINT"]) == "running"


def test_every_table_entry_has_a_hand_written_case():
    """Each (job state, frame summary) entry of STATES is reached by a case above through run_state,
    so changing any entry's run state fails test_state_table."""
    covered = {(job, frame_summary(frames)) for job, frames, _ in CASES}
    assert set(STATES) <= covered, sorted(set(STATES) - covered)


def test_table_names_are_opencues_state_names():
    """A misspelt state (e.g. "SUCCEDED") would never match what pycue returns."""
    assert set(FRAME_GROUPS) == set(job_pb2.FrameState.keys())  # every frame state has a group
    assert {job for job, _ in STATES} <= set(job_pb2.JobState.keys())

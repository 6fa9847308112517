"""OpenCue job and frame states map to run states through one table (UNKNOWN for anything else)."""

import pytest

from cue_plugin.opencue_farm import STATES, frame_summary, run_state
from cue_plugin.spec import RunState


@pytest.mark.parametrize("job_state,frames,expected", [
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
])
def test_state_table(job_state, frames, expected):
    assert run_state(job_state, frames) is expected


def test_frame_summary_precedence():
    assert frame_summary([]) == "none"
    assert frame_summary(["SUCCEEDED", "WAITING", "RUNNING", "EATEN", "DEAD"]) == "dead"
    assert frame_summary(["SUCCEEDED", "CHECKPOINT"]) == "running"


def test_every_table_entry_is_reachable():
    groups = {"dead", "eaten", "running", "waiting", "succeeded", "none"}
    assert all(summary in groups and isinstance(state, RunState) for (_, summary), state in STATES.items())

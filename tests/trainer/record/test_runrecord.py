"""run.json: one typed, versioned record; today's (version 0) files still read."""

from __future__ import annotations

import json

import pytest

from trainer.record import runrecord
from trainer.core.exitcodes import ExitCode, describe
from trainer.gang.formation import GangIncomplete, RankLost
from trainer.record.rundir import RunDirError, RunPaths, atomic_write_json

# A run.json as cuetrain wrote it before versions (a farm run that failed on a lost rank).
VERSION_0 = {"attempts": [{"attempt": 1, "backend": "gloo", "host": "node1", "start_step": 0,
                           "started_at": "2026-11-20T10:00:00+00:00", "world_size": 2}],
             "config": {"steps": 400, "run_dir": "/runs/a"}, "error": "RankLost: rank 0 lost rank 1 during training",
             "failed_rank": 0, "farm": {"attempts_at_submit": 0, "job_id": "j1", "job_name": "show-sh-u_cuetrain"},
             "finished_at": "2026-11-20T10:05:00+00:00", "pid": 123, "started_at": "2026-11-20T10:00:00+00:00",
             "state": "failed", "versions": {"torch": "2.13.0"}, "world_size": 2, "later_field": [1, 2]}


def test_version_0_file_reads_and_is_rewritten_as_version_1_keeping_unknown_keys(tmp_path):
    paths = RunPaths.of(tmp_path)
    atomic_write_json(paths.run_json, VERSION_0)
    record = runrecord.read_record(paths)
    assert (record.version, record.state, record.world_size, record.total_steps) == (0, "failed", 2, 400)
    assert record.failure_kind == "" and record.failed_rank == 0 and record.farm["job_id"] == "j1"
    assert runrecord.attempts_since_submit(record, "j1") == 1 and runrecord.attempts_since_submit(record, "j2") == 0
    runrecord.update_record(paths, gang_failure={"reason": "x"})
    written = json.loads(paths.run_json.read_text())
    assert written["version"] == 1 and written["later_field"] == [1, 2] and written["error"] == VERSION_0["error"]
    assert runrecord.read_record(paths).gang_failure == {"reason": "x"}


def test_unknown_field_and_wrong_types_are_refused_or_defaulted(tmp_path):
    paths = RunPaths.of(tmp_path)
    with pytest.raises(RunDirError, match=r"unknown run.json field\(s\) \['stat'\]; valid: .*state"):
        runrecord.update_record(paths, stat="running")
    assert not paths.run_json.exists()
    record = runrecord.RunRecord.from_dict({"version": 1, "world_size": "two", "attempts": "none", "state": "running"})
    assert (record.world_size, record.attempts, record.state) == (0, (), "running")


def test_failure_kind_is_data_from_the_exception_and_the_state_table_is_one(tmp_path):
    paths = RunPaths.of(tmp_path)
    fields = runrecord.failure_fields(GangIncomplete("gang incomplete: ranks 2 did not join"))
    assert fields == {"failure_kind": "gang_incomplete", "exit_code": 3}
    assert runrecord.failure_fields(RankLost("x")) == {"failure_kind": "rank_lost", "exit_code": 4}
    assert runrecord.failure_fields(ValueError("x")) == {"failure_kind": "error", "exit_code": 1}
    from trainer.core.config import ConfigError
    from trainer.core.envvars import EnvError
    from trainer.data.images import DataError
    from trainer.data.shot import ShotChanged

    bad_input = [ConfigError("x"), EnvError("x"), DataError("x"), RunDirError("x")]
    assert [runrecord.failure_fields(e)["exit_code"] for e in bad_input] == [2] * 4  # as cuetrain exits (trainer.cli)
    assert runrecord.failure_fields(ShotChanged("x"))["exit_code"] == ExitCode.DATA_CHANGED
    record = runrecord.update_record(paths, state="failed", error="anything at all", **fields)
    assert record.kind is runrecord.FailureKind.GANG_INCOMPLETE and record.is_terminal
    assert runrecord.TERMINAL_STATES == ("succeeded", "failed", "cancelled")
    assert not runrecord.RunRecord(state="stopped").is_terminal


def test_exit_code_table_never_uses_cuebots_memory_failure_statuses():
    assert not {int(c) for c in ExitCode} & {33, 137}
    assert describe(75).startswith("stopped by a signal") and describe(137) == "killed by signal 9"


def test_a_run_json_that_cannot_be_read_is_never_replaced(tmp_path):
    """A frame running as another user may not read the submitter's run.json (mode 0640; stood in for
    here by a file that does not parse, since root reads everything): merging into an empty record
    would drop ``farm`` and the attempts, so the update fails and the file stays as it is."""
    paths = RunPaths.of(tmp_path)
    paths.run_json.write_text('{"farm": {"job_id": "j1"}, "state": ')
    with pytest.raises(RunDirError, match="cannot read"):
        runrecord.update_record(paths, gang={"generation": 1})
    assert paths.run_json.read_text() == '{"farm": {"job_id": "j1"}, "state": '


def test_farm_record_is_typed_with_defaults_for_bad_values() -> None:
    from trainer.record.runrecord import FarmRecord, RunRecord

    record = RunRecord.from_dict({"farm": {"job_id": "j1", "job_name": "n", "attempts_at_submit": 2,
                                           "job": {"ranks_per_frame": 2}}, "attempts": [{}, {}, {}]})
    farm = record.farm_record
    assert (farm.job_id, farm.job_name, farm.attempts_at_submit, farm.ranks_per_frame, farm.submitted) == \
        ("j1", "n", 2, 2, True)
    bad = FarmRecord.from_mapping({"attempts_at_submit": "x", "job": {"ranks_per_frame": 0}})
    assert (bad.attempts_at_submit, bad.ranks_per_frame, bad.submitted) == (0, 1, False)
    assert FarmRecord.from_mapping(None) == FarmRecord()


def test_gang_record_is_typed_belongs_to_one_job_and_round_trips(tmp_path) -> None:
    from trainer.record.runrecord import GangRecord, RunRecord

    data = {"job_id": "j1", "generation": 3, "restarts": 1, "members": [0, 2], "world_size": 4,
            "events": [{"generation": 3, "reason": "regroup"}, "junk"]}
    gang = RunRecord.from_dict({"gang": data}).gang_record
    assert (gang.job_id, gang.generation, gang.restarts, gang.members, gang.world_size) == ("j1", 3, 1, (0, 2), 4)
    assert [e["reason"] for e in gang.events] == ["regroup"]  # a non-object event is dropped
    bad = GangRecord.from_mapping({"job_id": "j1", "generation": "3", "restarts": -1, "members": [0, "x"]})
    assert (bad.generation, bad.restarts, bad.members) == (0, 0, ())
    assert gang.of_job("j2") == GangRecord(job_id="j2")  # another submit's gang counts nothing
    paths = RunPaths.of(tmp_path)
    runrecord.write_gang(paths, gang.next("restart", (), 4, restart=True))
    again = runrecord.read_gang(paths, "j1")
    assert (again.generation, again.restarts, again.members, len(again.events)) == (4, 2, (), 2)
    assert runrecord.read_gang(paths, "other").generation == 0

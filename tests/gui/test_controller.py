"""RunsController headless: polling, Live Updates, submit, cancel, retry, persistence."""

from __future__ import annotations

from cue_plugin.submit.spec import JobHandle, JobStatus, RunState, TrainingJob
from gui.controller import RunsController
from gui.synthetic import add_sheet, metrics_rows, write_run
from tests.gui.conftest import RetryFarm
from trainer.core.config import TrainConfig
from trainer.record.rundir import append_metrics
from trainer.record.runrecord import update_record


def _job(tmp_path, **kw) -> TrainingJob:
    train = TrainConfig(input_dir=str(tmp_path), target_dir=str(tmp_path), run_dir=str(tmp_path / "run"))
    return TrainingJob(train=train, world_size=2, show="demo", shot="sh010", user="artist", **kw)


def test_poll_picks_up_metrics_and_sheets_between_polls(controller, qtbot, tmp_path):
    paths = write_run(tmp_path / "run", steps=1000, logged_to=300, sheet_interval=100)
    run = controller.add_run(str(paths.root))
    with qtbot.waitSignals([controller.metrics_updated, controller.contact_sheets_updated, controller.run_updated]):
        controller.poll_now()
    assert (run.step, run.total_steps, len(run.sheets)) == (300, 1000, 3)
    append_metrics(paths, metrics_rows(310, 400))
    add_sheet(paths, 400)
    with qtbot.waitSignal(controller.contact_sheets_updated):
        controller.poll_now()
    assert run.step == 400 and len(run.metrics) == 40 and run.sheets[-1][0] == 400


def test_async_poll_applies_on_gui_thread(controller, qtbot, tmp_path):
    paths = write_run(tmp_path / "run", steps=1000, logged_to=100)
    run = controller.add_run(str(paths.root))
    with qtbot.waitSignal(controller.poll_finished, timeout=5000):
        assert controller.poll_async()
    assert run.step == 100


def test_async_and_sync_polls_apply_in_order(controller, qtbot, tmp_path):
    paths = write_run(tmp_path / "run", steps=1000, logged_to=100)
    run = controller.add_run(str(paths.root))
    controller.poll_async()
    append_metrics(paths, metrics_rows(110, 200))
    controller.poll_now()
    qtbot.waitUntil(lambda: not controller.polling, timeout=5000)
    steps = list(run.metrics.view("step"))
    assert steps == list(range(10, 201, 10))


def test_live_updates_off_by_default_and_polls_only_when_on(controller, farm, qtbot, tmp_path):
    paths = write_run(tmp_path / "run", steps=1000, logged_to=100, farm={"job_id": "j1", "job_name": "demo-job"})
    run = controller.add_run(str(paths.root))
    assert not controller.live_updates
    qtbot.wait(200)  # 4 timer periods: nothing may happen while off
    assert run.step == 0 and farm.described == []
    with qtbot.waitSignal(controller.live_updates_changed):
        controller.set_live_updates(True)
    qtbot.waitUntil(lambda: len(farm.described) >= 2, timeout=5000)  # the timer keeps polling
    assert run.step == 100 and run.handle.job_id == "j1" and run.state == "running" and run.ranks_text == "2/4"
    controller.set_live_updates(False)
    qtbot.wait(100)  # let a poll already in flight land
    calls = len(farm.described)
    qtbot.wait(200)
    assert len(farm.described) == calls


def test_terminal_farm_job_is_not_described_again(controller, farm, tmp_path):
    run = controller.add_run(str(tmp_path / "run"), JobHandle("j1", "job", str(tmp_path / "run")))
    farm.statuses["j1"] = JobStatus(RunState.SUCCEEDED, 0, 4, "FINISHED")
    controller.poll_now()
    controller.poll_now()
    assert len(farm.described) == 1 and run.state == "succeeded"


def test_submit_goes_to_the_farm_and_adds_the_run(controller, farm, qtbot, tmp_path):
    with qtbot.waitSignal(controller.submit_finished, timeout=5000) as blocker:
        controller.submit(_job(tmp_path, tags=("gpu",)))
    handle = blocker.args[0]
    assert handle.job_id == "id-1" and farm.submitted[0].world_size == 2
    run = controller.run(str(tmp_path / "run"))
    assert run.handle == handle and run.job["show"] == "demo" and run.job["tags"] == ["gpu"]


def test_submit_errors_are_messages(controller, farm, qtbot, tmp_path):
    farm.submit_error = "cuebot unreachable: check CUEBOT_HOSTS"
    with qtbot.waitSignal(controller.submit_failed, timeout=5000) as blocker:
        controller.submit(_job(tmp_path))
    assert blocker.args == ["cuebot unreachable: check CUEBOT_HOSTS"] and controller.runs() == []


def test_farm_factory_failure_is_a_farm_error(qapp, qtbot, tmp_path):
    def broken():
        raise ImportError("No module named 'opencue'")

    ctl = RunsController(broken)
    with qtbot.waitSignal(ctl.submit_failed, timeout=5000) as blocker:
        ctl.submit(_job(tmp_path))
    assert "cannot start the farm backend" in blocker.args[0] and "opencue" in blocker.args[0]
    run = ctl.add_run(str(tmp_path / "r"), JobHandle("j", "job", str(tmp_path / "r")))
    ctl.poll_now()
    assert "cannot start the farm backend" in run.farm_error
    ctl.shutdown()


def test_cancel_and_retry(controller, farm, qtbot, tmp_path):
    with qtbot.waitSignal(controller.action_failed) as blocker:
        controller.cancel(str(tmp_path / "nothing"))
    assert "no farm job" in blocker.args[1]
    paths = write_run(tmp_path / "run", steps=1000, logged_to=100, state="running")
    handle = JobHandle("j1", "demo-job", str(paths.root))
    controller.add_run(str(paths.root), handle, {"show": "demo", "shot": "sh010", "user": "a", "world_size": 4})
    controller.poll_now()
    with qtbot.waitSignal(controller.action_finished, timeout=5000) as blocker:
        controller.cancel(str(paths.root))
    assert farm.cancelled == [handle] and "demo-job" in blocker.args[1]
    # The farm here has no retry(): a live job cannot be retried, an ended one is resumed.
    with qtbot.waitSignal(controller.action_failed, timeout=5000) as blocker:
        controller.retry(str(paths.root))
    assert "cannot retry" in blocker.args[1]
    farm.statuses["j1"] = JobStatus(RunState.CANCELLED, 0, 4, "FINISHED")
    controller.poll_now()
    with qtbot.waitSignal(controller.action_finished, timeout=5000) as blocker:
        controller.retry(str(paths.root))
    assert farm.submitted[-1].train.resume and farm.submitted[-1].world_size == 4
    assert controller.run(str(paths.root)).handle.job_id == "id-1"
    # A job submitted elsewhere (cuetrain submit --resume) is learnt from run.json's farm record.
    update_record(paths, farm={"job_id": "j9", "job_name": "cli-job"})
    controller.poll_now()
    assert controller.run(str(paths.root)).handle.job_id == "j9"


def test_retry_uses_farm_retry_for_a_live_job(qapp, qtbot, tmp_path):
    farm = RetryFarm()
    ctl = RunsController(lambda: farm)
    paths = write_run(tmp_path / "run", steps=1000, logged_to=100, farm={"job_id": "j1", "job_name": "job"})
    ctl.add_run(str(paths.root))
    ctl.poll_now()
    with qtbot.waitSignal(ctl.action_finished, timeout=5000) as blocker:
        ctl.retry(str(paths.root))
    assert [h.job_id for h in farm.retried] == ["j1"] and farm.submitted == []
    assert blocker.args[1] == "retried 1 failed frame(s) of job"
    ctl.shutdown()


def test_runs_persist_between_sessions(qapp, farm, settings, tmp_path):
    first = RunsController(lambda: farm, settings)
    first.add_run(str(tmp_path / "a"), JobHandle("j1", "job-a", str(tmp_path / "a")), {"show": "demo"})
    first.add_run(str(tmp_path / "b"))
    first.set_show_graph(str(tmp_path / "b"), False)
    first.remove_run(str(tmp_path / "b"))
    first.add_run(str(tmp_path / "c"))
    first.set_show_sheet(str(tmp_path / "c"), False)
    second = RunsController(lambda: farm, settings)
    assert second.runs() == []  # nothing is read until restore()
    second.restore()
    a, c = second.runs()
    assert a.run_dir == str(tmp_path / "a") and a.handle.job_name == "job-a" and a.job == {"show": "demo"}
    assert c.run_dir == str(tmp_path / "c") and c.show_graph and not c.show_sheet


def test_unreadable_settings_are_ignored(qapp, settings):
    settings.setValue("runs/v1", "not json")
    ctl = RunsController(settings=settings)
    ctl.restore()
    assert ctl.runs() == []


def test_same_run_added_twice_is_one_run(controller, tmp_path):
    controller.add_run(str(tmp_path / "run"))
    controller.add_run(str(tmp_path / "run") + "/")
    assert len(controller.runs()) == 1


def test_resume_of_a_run_added_by_folder_uses_the_recorded_job(controller, farm, qtbot, tmp_path):
    recorded = {"job_id": "j1", "job_name": "demo-job", "job": {"show": "demo", "shot": "sh020", "user": "a",
                                                                "world_size": 2, "tags": ["gpu"], "extra_env": ["SECRET"]}}
    paths = write_run(tmp_path / "run", steps=1000, logged_to=100, state="failed", farm=recorded)
    controller.add_run(str(paths.root))
    farm.statuses["j1"] = JobStatus(RunState.FAILED, 0, 2, "FINISHED")
    controller.poll_now()
    with qtbot.waitSignal(controller.action_finished, timeout=5000) as blocker:
        controller.retry(str(paths.root))
    job = farm.submitted[0]
    assert (job.shot, job.world_size, job.tags, dict(job.extra_env), job.train.resume) == \
        ("sh020", 2, ("gpu",), {}, True)
    assert blocker.args[1].startswith("resumed as job")


"""Ranks per frame in the GUI: the submit dialog's field (template default, validation, job, advisor
request) and the Runs panel's ranks column (frames x ranks)."""

from dataclasses import replace

from cue_plugin.submit.spec import JobStatus, RunState
from gui.poller import measured_noise_scale
from gui.records import Run
from gui.runs_panel import row_texts
from gui.submit_dialog import SubmitDialog
from tests.gui.test_widgets import _fill
from trainer.record.rundir import RunPaths, append_metrics
from trainer.record.runrecord import RunRecord


def test_dialog_takes_ranks_per_frame_from_the_template_and_submits_it(qtbot, controller, farm, tmp_path):
    (tmp_path / "node.toml").write_text('description = "4-GPU node"\ngpus = 1\nworld_size = 8\nranks_per_frame = 4\n')
    dialog = SubmitDialog(controller, template_folders=[tmp_path])
    qtbot.addWidget(dialog)
    _fill(dialog, tmp_path)
    dialog.batch_spin.setValue(16)
    dialog.template_box.setCurrentText("node")
    assert (dialog.world_spin.value(), dialog.frame_spin.value()) == (8, 4)
    dialog.world_spin.setValue(6)
    assert "World size 6 is not a multiple of ranks per frame 4" in " ".join(dialog.validate())
    dialog.world_spin.setValue(8)
    assert dialog.validate() == []
    job = dialog.build_job()
    assert (job.world_size, job.ranks_per_frame, job.frames, job.frame_resources["gpus"]) == (8, 4, 2, 4)
    assert dialog.advise_request().arguments()[-3:] == ["--ranks-per-frame", "4", "--json"]


def test_runs_panel_shows_frames_and_ranks():
    run = Run("/runs/a", job={"ranks_per_frame": 2}, record=RunRecord(world_size=4))
    assert run.ranks_text == "-/4 (2 frames x 2 ranks)"
    run.status = JobStatus(RunState.RUNNING, ranks_running=1, ranks_total=2)  # the farm counts frames
    assert row_texts(run)[3] == "2/4 (2 frames x 2 ranks)"
    one = Run("/runs/b", record=RunRecord(world_size=2, farm={"job_id": "j", "job": {"ranks_per_frame": 1}}))
    one.status = JobStatus(RunState.RUNNING, ranks_running=2, ranks_total=2)
    assert one.ranks_text == "2/2"  # one rank per frame: as before


def test_runs_panel_shows_gang_restarts_and_an_elastic_gang_that_shrank():
    farm = {"job_id": "j", "job": {"world_size": 3, "ranks_per_frame": 1}}
    run = Run("/runs/c", record=RunRecord(world_size=2, farm=farm, gang={
        "job_id": "j", "generation": 2, "restarts": 1, "members": [0, 1], "world_size": 2}))
    assert run.ranks_text == "-/2, 1 restart, elastic: 2 of 3 ranks"
    run.record = replace(run.record, gang={"job_id": "j", "generation": 4, "restarts": 2, "members": [],
                                           "world_size": 3})
    assert run.ranks_text == "-/2, 2 restarts"  # grown back: every frame
    run.record = replace(run.record, gang={"job_id": "older-job", "restarts": 5})
    assert run.ranks_text == "-/2"  # another submit's count


def test_advisor_request_carries_the_noise_scale_an_earlier_run_measured(qtbot, controller, tmp_path):
    """Issue 18: the submit dialog asks the advisor in time to quality when the run directory already
    measured a gradient noise scale (a resume, or training again into the same folder)."""
    dialog = SubmitDialog(controller)
    qtbot.addWidget(dialog)
    _fill(dialog, tmp_path)
    assert "--noise-scale" not in dialog.advise_request().arguments()  # a new run directory: nothing measured
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    append_metrics(paths, [{"step": 100, "loss": 0.1, "noise_scale": 41.25}, {"step": 200, "loss": 0.09},
                           {"step": 300, "loss": 0.08, "noise_scale": float("nan")}])
    args = dialog.advise_request().arguments()
    assert args[args.index("--noise-scale") + 1] == "41.25"  # the latest finite value
    assert measured_noise_scale(str(tmp_path / "nowhere")) is None

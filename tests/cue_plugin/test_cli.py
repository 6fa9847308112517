"""``cuetrain submit|status|cancel`` against a fake Farm (the OpenCue one is tested with the Cuebot double)."""

import dataclasses
from xml.etree import ElementTree

from cue_plugin.submit import cli
from cue_plugin.submit.spec import FarmError, JobHandle, JobStatus, RunState, TrainingJob
from trainer.record.rundir import RunPaths, append_metrics
from trainer.record.runrecord import update_record


@dataclasses.dataclass
class FakeFarm:
    """Records calls; describes every job as running."""

    submitted: list = dataclasses.field(default_factory=list)
    cancelled: list = dataclasses.field(default_factory=list)
    down: bool = False

    def dry_run(self, job: TrainingJob) -> str:
        from cue_plugin.submit import builder

        return builder.dry_run(job, python="/py", token="t")

    def submit(self, job: TrainingJob) -> JobHandle:
        self.submitted.append(job)
        return JobHandle("id-1", f"{job.show}-{job.shot}-{job.user}_{job.name}", job.train.run_dir)

    def describe(self, handle: JobHandle) -> JobStatus:
        if self.down:
            raise FarmError("cannot reach Cuebot at x: check CUEBOT_HOSTS")
        return JobStatus(RunState.RUNNING, 1, 2, "PENDING", {"0": {"state": "RUNNING", "host": "node1", "retries": 0},
                                                             "1": {"state": "WAITING", "host": "", "retries": 1}})

    def cancel(self, handle: JobHandle) -> None:
        self.cancelled.append(handle)


def train_args(tmp_path):
    return ["--input", str(tmp_path / "in"), "--target", str(tmp_path / "gt"), "--run-dir", str(tmp_path / "run")]


def test_submit_merges_template_and_flags(tmp_path, capsys):
    farm = FakeFarm()
    code = cli.main(["submit", "--template", "gpu-small", "--show", "demo", "--shot", "sh010", "--user", "artist",
                     "--world-size", "4", "--tags", "gpu,a100", "--env", "A=1", "--batch-size", "16",
                     *train_args(tmp_path)], farm=farm)
    assert code == 0
    job = farm.submitted[0]
    assert (job.world_size, job.gpus, job.tags, dict(job.extra_env)) == (4, 1, ("gpu", "a100"), {"A": "1"})
    assert job.train.batch_size == 16 and job.train.run_dir == str(tmp_path / "run")
    assert "submitted demo-sh010-artist_cuetrain_run (id id-1): 4 rank(s)" in capsys.readouterr().out


def test_submit_dry_run_prints_the_spec(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SHOW", "envshow")
    monkeypatch.setenv("SHOT", "envshot")
    assert cli.main(["submit", "--template", "cpu-test", "--dry-run", *train_args(tmp_path)], farm=FakeFarm()) == 0
    root = ElementTree.fromstring(capsys.readouterr().out)
    assert (root.findtext("show"), root.findtext("shot")) == ("envshow", "envshot")


def test_submit_passes_the_node_agent_its_restart_budget_and_elastic_size(tmp_path, capsys):
    farm = FakeFarm()
    assert cli.main(["submit", "--template", "cpu-test", "--show", "demo", "--shot", "sh010", "--user", "artist",
                     "--world-size", "4", "--batch-size", "8", "--max-restarts", "6", "--min-world-size", "2",
                     "--elastic-window-s", "45", *train_args(tmp_path)], farm=farm) == 0
    job = farm.submitted[0]
    assert (job.max_restarts, job.min_world_size, job.elastic_window_s) == (6, 2, 45.0)
    assert cli.main(["submit", "--template", "cpu-test", "--show", "demo", "--shot", "sh010", "--user", "artist",
                     "--world-size", "4", "--batch-size", "8", "--min-world-size", "5", *train_args(tmp_path)],
                    farm=farm) == 2
    assert "min_world_size=5 must be a multiple of ranks_per_frame=1 between 1 and world_size=4" in \
        capsys.readouterr().err


def test_submit_errors_are_one_line_and_exit_code_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SHOW", raising=False)
    assert cli.main(["submit", "--world-size", "2", "--shot", "s", *train_args(tmp_path)], farm=FakeFarm()) == 2
    assert "error: missing job value(s) show" in capsys.readouterr().err
    assert cli.main(["submit", "--show", "s", "--shot", "s", "--world-size", "2"], farm=FakeFarm()) == 2
    assert "missing required argument(s) --input" in capsys.readouterr().err


def test_list_templates(capsys):
    assert cli.main(["submit", "--list-templates"], farm=FakeFarm()) == 0
    assert "gpu-small" in capsys.readouterr().out


def test_status_of_a_run_dir_shows_run_and_farm(tmp_path, capsys):
    paths = RunPaths.of(tmp_path / "run")
    paths.create()
    update_record(paths, state="running", config={"steps": 100}, farm={"job_id": "id-1", "job_name": "j"})
    append_metrics(paths, [{"step": 10, "loss": 0.5}, {"step": 20, "loss": 0.25}])
    assert cli.main(["status", str(paths.root)], farm=FakeFarm()) == 0
    out = capsys.readouterr().out
    assert "running, step 20/100, loss 0.25" in out and "state    running (OpenCue PENDING), ranks running 1/2" in out
    assert "rank   1 WAITING" in out
    assert cli.main(["status", str(paths.root)], farm=FakeFarm(down=True)) == 1
    assert "farm     unavailable: cannot reach Cuebot" in capsys.readouterr().out


def test_status_and_cancel_by_name_or_id(capsys):
    farm = FakeFarm()
    assert cli.main(["cancel", "demo-sh010-artist_x"], farm=farm) == 0
    assert cli.main(["cancel", "0b9f3a52-7a4e-4a43-9a4f-1c2d3e4f5a6b"], farm=farm) == 0
    assert farm.cancelled == [JobHandle("", "demo-sh010-artist_x", ""),
                              JobHandle("0b9f3a52-7a4e-4a43-9a4f-1c2d3e4f5a6b", "", "")]
    assert cli.main(["status", "demo-sh010-artist_x"], farm=FakeFarm(down=True)) == 2
    assert "cannot reach Cuebot" in capsys.readouterr().err


def test_the_front_door_dispatches_here(tmp_path, capsys, monkeypatch):
    from cuetrain.cli import main

    monkeypatch.setenv("SHOW", "demo")
    monkeypatch.setenv("SHOT", "sh010")
    assert main(["submit", "--template", "cpu-test", "--dry-run", *train_args(tmp_path)]) == 0
    assert "<cmd>" in capsys.readouterr().out


def test_submit_refuses_a_deadline_already_past_and_passes_a_budget_on(tmp_path, capsys):
    job = ["submit", "--dry-run", "--world-size", "2", "--show", "s", "--shot", "x", "--user", "u", *train_args(tmp_path)]
    assert cli.main([*job, "--time-budget", "2020-01-01T18:00+00:00"], farm=FakeFarm()) == 2
    assert "--time-budget 2020-01-01T18:00+00:00 has already passed; give a later deadline" in capsys.readouterr().err
    assert cli.main([*job, "--time-budget", "2h", "--stop-when-flat", "0.05"], farm=FakeFarm()) == 0
    cmd = ElementTree.fromstring(capsys.readouterr().out).find(".//cmd").text
    assert "--steps 10000000 --time-budget 2h --stop-when-flat 0.05" in cmd

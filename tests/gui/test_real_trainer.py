"""The Runs panel follows a run directory written by the real trainer, between polls."""

from __future__ import annotations

from tests.conftest import make_pairs


def test_panel_picks_up_new_metrics_and_sheets_from_the_real_trainer(controller, tmp_path):
    from trainer.core.config import TrainConfig
    from trainer.core.envvars import DistEnv
    from trainer.learn.train import train

    pairs = make_pairs(tmp_path / "data")
    run_dir = str(tmp_path / "run")
    cfg = dict(input_dir=str(pairs[0]), target_dir=str(pairs[1]), run_dir=run_dir, batch_size=2, crop_size=16,
               log_interval=2, contact_sheet_interval=4, checkpoint_interval=4)
    env = DistEnv(distributed=False)
    train(TrainConfig(steps=8, **cfg), env)
    controller.add_run(run_dir)
    controller.poll_now(include_farm=False)
    run = controller.run(run_dir)
    assert list(run.metrics.view("step")) == [2, 4, 6, 8]
    assert [s for s, _ in run.sheets] == [4, 8]
    assert run.record.state == "succeeded"

    train(TrainConfig(steps=12, resume=True, **cfg), env)  # the run goes on: more rows, one more sheet
    controller.poll_now(include_farm=False)
    assert list(run.metrics.view("step")) == [2, 4, 6, 8, 10, 12]
    assert [s for s, _ in run.sheets] == [4, 8, 12]
    assert run.metrics.last("loss") > 0 and run.record.config["steps"] == 12

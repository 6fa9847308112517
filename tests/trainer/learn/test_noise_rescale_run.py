"""The trainer's own small-batch rescale of the noise scale, through real runs of ``trainer.learn.train``.

One rank reads ``|G_small|^2`` mid-update, when the gradient so far is ``crops seen / crops per update`` times
the mean gradient of the crops seen, and rescales it by ``(local * sync / stop) ** 2``
(``trainer.learn.train._Loop._forward_backward``; ``trainer.learn.noise_scale`` module doc). Two ways to check it
without writing the factor down again:

- **Split either way, the same estimate.** With the crop stream numbered by crop, not by step (:func:`crops_by_index`),
  4 crops a step at sync interval 1 (the step split in halves, ``G_small`` = the first 2 crops) and 2 crops a step at
  sync interval 2 (``G_small`` = the first micro-batch, the same 2 crops) train the same updates on the same crops:
  the recorded ``B_simple`` must agree to float rounding. Using ``local`` for ``local * sync`` misses the factor in
  one of them only.
- **No gradient noise, no noise scale.** On flat frames every crop is the same, so ``tr(Sigma) = 0`` whatever the
  split (McCandlish et al. 2018, appendix A): the smoothed ``tr(Sigma)`` the checkpoint records must be 0 to float
  rounding at sync intervals 1 and 4 (rescale factors 2 and 4). A factor off by ``c`` gives
  ``tr(Sigma) / |G|^2 = (c - 1) / (1 / b_small - 1 / b_big) x (b_big - b_small) / (b_big - c b_small)``: dropping the
  square (``c`` = 1/2 at sync 1, 1/4 at sync 4) gives -1.33 and -0.8 crops.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import shot_folders
from trainer.core.config import TrainConfig
from trainer.core.envvars import DistEnv
from trainer.data.crops import CropSampler
from trainer.data.images import write_image
from trainer.learn import train as train_mod
from trainer.learn.noise_scale import GradNoise
from trainer.learn.run_writer import load_latest_checkpoint
from trainer.record.rundir import RunPaths, read_metrics

UPDATES = 4  # optimizer updates of each photo run, logged every 2 [updates]
CROPS_PER_UPDATE = 4  # crops per update in every run: batch x sync interval [crops]


@pytest.fixture
def crops_by_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """Number the training crop stream by crop: crop ``j`` of a run (steps count from 1, ``j = (step - 1) x batch +
    i``) is the same crop whatever the batch, so a run at batch b and sync interval k sees, update by update, the
    crops of a run at batch ``b k`` and sync interval 1. Other streams (contact sheets) are left as they are."""
    real = CropSampler.coords

    def by_index(self: CropSampler, step: int, count: int | None = None, stream: int = 0) -> np.ndarray:
        n = self.global_batch if count is None else count
        if stream != 0:
            return real(self, step, count, stream)
        return np.concatenate([real(self, (step - 1) * n + i, 1, stream) for i in range(n)])

    monkeypatch.setattr(CropSampler, "coords", by_index)


def run(data: tuple, root, batch: int, sync: int, updates: int = UPDATES) -> RunPaths:
    """Train ``updates`` updates of ``batch`` crops x ``sync`` steps on one rank (fp32, the default network, Adam),
    sampling the noise scale every update (``noise_interval=1``) and logging every 2 updates; returns its paths."""
    paths = RunPaths.of(root)
    cfg = TrainConfig(input_dir=str(data[0]), target_dir=str(data[1]), run_dir=str(root), batch_size=batch,
                      crop_size=16, steps=updates * sync, log_interval=2 * sync, warmup_steps=2, noise_interval=1,
                      checkpoint_interval=10 ** 6, contact_sheet_interval=10 ** 6, ema_decay=0.0, precision="fp32",
                      optimizer="adam")  # any optimizer will do: Adam is the cheapest step
    train_mod.train(cfg, DistEnv(distributed=False, sync_interval=sync))
    return paths


def noise_scales(paths: RunPaths) -> list[tuple[int, float | None]]:
    """``(update, recorded B_simple or None)`` per metrics row [updates, crops]."""
    return [(row["step"], row.get("noise_scale")) for row in read_metrics(paths)]


def assert_same_noise_scale(pairs, tmp_path) -> None:
    """Batch 4 at sync 1 (split in halves) against batch 2 at sync 2 (two micro-batches): same crops, same updates."""
    halves = noise_scales(run(pairs, tmp_path / "halves", CROPS_PER_UPDATE, 1))
    micro = noise_scales(run(pairs, tmp_path / "micro", CROPS_PER_UPDATE // 2, 2))
    print(f"B_simple per log, split in halves: {halves}\nin two micro-batches: {micro}")
    assert [u for u, _ in halves] == [s // 2 for s, _ in micro] == [2, 4]
    assert all(v is not None and 0 < v < 1e4 for _, v in halves), halves  # the photo's noise scale, measured
    assert [v for _, v in micro] == pytest.approx([v for _, v in halves], rel=1e-4)


def test_the_noise_scale_is_the_same_however_an_update_is_split(pairs, tmp_path, crops_by_index):
    assert_same_noise_scale(pairs, tmp_path)


def test_a_rescale_missing_the_sync_interval_fails_the_check_above(pairs, tmp_path, crops_by_index, monkeypatch):
    """The check's power: a mutant whose micro-batch rescale lacks the sync interval (``local`` in place of
    ``local * sync``: ``|G_small|^2`` 2^2 = 4 times too small at sync 2, unchanged at sync 1) must fail it."""
    real_observe, real_train = GradNoise.observe_small, train_mod.train
    sync = [1]  # the sync interval of the run in progress

    def train(cfg, env):
        sync[0] = env.sync_interval
        return real_train(cfg, env)

    def mutant(self: GradNoise, small_sq) -> None:
        real_observe(self, small_sq / (4.0 if sync[0] == 2 else 1.0))

    monkeypatch.setattr(train_mod, "train", train)
    monkeypatch.setattr(GradNoise, "observe_small", mutant)
    with pytest.raises(AssertionError):
        assert_same_noise_scale(pairs, tmp_path)


def flat_frames(folder) -> tuple:
    """Two flat frames (input grey 0.3, ground truth orange): every crop, flipped or not, is the same crop."""
    inp, tgt = shot_folders(folder)
    for i in range(2):
        write_image(inp / f"plate.{1001 + i:04d}.png", np.full((40, 48, 3), 0.3, np.float32))
        write_image(tgt / f"plate.{1001 + i:04d}.png", np.full((40, 48, 3), (0.8, 0.5, 0.2), np.float32))
    return inp, tgt


def assert_no_trace(tmp_path, batch: int, sync: int) -> None:
    """Train 3 updates on :func:`flat_frames`; the smoothed ``tr(Sigma)`` the checkpoint records must be 0 to float
    rounding: ``B_simple = tr(Sigma) / |G|^2`` within 0.001 crops of 0."""
    paths = run(flat_frames(tmp_path / "flat"), tmp_path / "run", batch, sync, updates=3)
    state = load_latest_checkpoint(paths)["noise_scale"]
    print(f"batch {batch}, sync {sync}: smoothed |G|^2 {state['g2']:.6g}, tr(Sigma) {state['trace']:.6g}")
    assert state["g2"] > 0  # the frames are far from each other: a real gradient
    b_simple = state["trace"] / state["g2"]  # [crops]
    assert abs(b_simple) < 1e-3, f"B_simple {b_simple:.3g} crops is not 0 (tr(Sigma) {state['trace']:.4g})"


@pytest.mark.parametrize("batch, sync", [(4, 1), (1, 4)])
def test_without_gradient_noise_every_split_measures_no_trace(tmp_path, batch, sync):
    """Identical crops: the rescaled small-batch gradient equals the update's, so ``tr(Sigma)`` is 0 however the
    update is split (module doc)."""
    assert_no_trace(tmp_path, batch, sync)


def test_a_rescale_without_the_square_fails_the_check_above(tmp_path, monkeypatch):
    """The check's power: at batch 4, sync 1 the halves' factor is 2, so a rescale by 2 (the square dropped) leaves
    ``|G_small|^2`` half what the trainer's factor 4 gives, and ``B_simple = tr(Sigma) / |G|^2`` = -4/3 crops (module
    doc)."""
    real_observe = GradNoise.observe_small
    monkeypatch.setattr(GradNoise, "observe_small", lambda self, small_sq: real_observe(self, small_sq / 2))
    with pytest.raises(AssertionError, match=r"B_simple -1\.33 crops is not 0"):
        assert_no_trace(tmp_path, 4, 1)

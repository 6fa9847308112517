"""The two copies of every checkpoint: listing order, the CRC-32 check, pruning (trainer.record.ckptcopies)."""

import io
import zipfile

import torch

from trainer.record import ckptcopies
from trainer.record.rundir import RunPaths


def _checkpoint_bytes(step: int) -> bytes:
    buf = io.BytesIO()
    torch.save({"step": step, "model": {"w": torch.arange(4096, dtype=torch.float32)}}, buf)
    return buf.getvalue()


def _run(tmp_path, first=(), second=()) -> RunPaths:
    run = RunPaths.of(tmp_path / "run")
    run.create()
    for step in first:
        run.checkpoint(step).write_bytes(_checkpoint_bytes(step))
    for step in second:
        run.checkpoint_copy(step).write_bytes(_checkpoint_bytes(step))
    return run


def test_newest_first_lists_each_steps_first_copy_then_its_second(tmp_path):
    run = _run(tmp_path, first=(25, 50, 75), second=(50, 75, 100))
    assert ckptcopies.newest_first(run) == [(100, run.checkpoint_copy(100)), (75, run.checkpoint(75)),
                                            (75, run.checkpoint_copy(75)), (50, run.checkpoint(50)),
                                            (50, run.checkpoint_copy(50)), (25, run.checkpoint(25))]
    assert run.checkpoint_copy(75).parent == run.checkpoints / "copy"
    assert [s for s, _ in run.list_checkpoints()] == [25, 50, 75]  # the copies are not listed as checkpoints


def test_damage_names_truncated_flipped_and_missing_files_and_passes_an_intact_one(tmp_path):
    run = _run(tmp_path, first=(25, 50, 75))
    assert ckptcopies.damage(run.checkpoint(25)) is None
    data = run.checkpoint(50).read_bytes()
    run.checkpoint(50).write_bytes(data[: len(data) // 2])
    assert "BadZipFile" in ckptcopies.damage(run.checkpoint(50))
    flipped = bytearray(run.checkpoint(75).read_bytes())
    flipped[len(flipped) // 2] ^= 0x01
    run.checkpoint(75).write_bytes(bytes(flipped))
    assert torch.load(run.checkpoint(75), weights_only=True)["step"] == 75  # torch.load alone does not notice
    assert "fails its CRC-32 check" in ckptcopies.damage(run.checkpoint(75))
    assert "FileNotFoundError" in ckptcopies.damage(run.checkpoint(100))
    with zipfile.ZipFile(run.checkpoint(25)) as archive:  # what the check rests on: torch.save writes a ZIP
        assert all(info.CRC for info in archive.infolist() if info.file_size)


def test_prune_keeps_both_copies_of_the_newest_steps(tmp_path):
    run = _run(tmp_path, first=(25, 50, 75, 100), second=(25, 50, 75, 100))
    run.checkpoint(75).unlink()  # a step with one copy left still counts as a step
    removed = ckptcopies.prune(run, keep=2)
    assert sorted(removed) == sorted([run.checkpoint(25), run.checkpoint_copy(25), run.checkpoint(50),
                                      run.checkpoint_copy(50)])
    assert ckptcopies.newest_first(run) == [(100, run.checkpoint(100)), (100, run.checkpoint_copy(100)),
                                            (75, run.checkpoint_copy(75))]

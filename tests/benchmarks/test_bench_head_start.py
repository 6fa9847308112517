"""The head-start benchmark's shots (benchmarks/lib/head_start.py): the alike pair is later frames of shot A's clip
at A's size, held out as the demo holds out; a pair it does not know is refused."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from lib import head_start as hs  # noqa: E402
from trainer.data.images import read_image  # noqa: E402
from trainer.data.sequences import find_sequence  # noqa: E402


def test_the_alike_pair_is_later_frames_of_shot_as_clip_at_its_size_every_6th_held_out(tmp_path):
    a, b = hs.shots(tmp_path, "alike")
    assert b.name == "shot_c"
    a_train = find_sequence(a / "train/target")
    held, train = find_sequence(b / "holdout/target"), find_sequence(b / "train/target")
    assert len(a_train) == 120 and not (a / "holdout").exists()
    assert (len(held), len(train)) == (20, 100) and set(held) == set(range(6, 121, 6))
    first_a = read_image(a_train[min(a_train)])
    first_b = read_image(train[min(train)])
    assert first_a.shape == first_b.shape  # the same camera, halved alike
    assert np.abs(first_a - first_b).mean() > 0.05  # another stretch of the clip, not A's frames again


def test_the_full_size_pairs_keep_the_clips_own_size_and_their_own_shot_a(tmp_path, monkeypatch):
    """``alike-full``: bikes 131-250 and shot A (bikes 1-120) at the clip's size, not halved; ``held-out-full``:
    bigbuckbunny 1-120 from the same full-size A. Each decoded frame holds its clip's number and its index."""
    clips = {"bikes.mp4": 1, "bigbuckbunny.mp4": 2}

    def fake_decode(path):  # type: ignore[no-untyped-def]
        frames = np.zeros((260, 6, 10, 3), dtype=np.uint8)
        frames[..., 0], frames[..., 1] = np.arange(260)[:, None, None], clips[Path(path).name]
        return frames

    monkeypatch.setattr(hs, "_decode", fake_decode)
    a, b = hs.shots(tmp_path, "alike-full")
    _, bunny = hs.shots(tmp_path, "held-out-full")
    assert (a.name, b.name, bunny.name) == ("shot_afull", "shot_bikesfull", "shot_bunnyfull")
    firsts = [read_image(seq[min(seq)]) for seq in (find_sequence(a / "train/target"),
                                                   find_sequence(b / "train/target"),
                                                   find_sequence(bunny / "train/target"))]
    assert [f.shape for f in firsts] == [(6, 10, 3)] * 3  # not halved
    assert [(round(f[0, 0, 0] * 255), round(f[0, 0, 1] * 255)) for f in firsts] == [(0, 1), (130, 1), (0, 2)]
    assert len(find_sequence(bunny / "holdout/target")) == 20 and not (a / "holdout").exists()
    assert hs.source_dir(tmp_path, "a", 3000, "", full=True) == tmp_path / "run_Afull_3000"


def test_a_pair_it_does_not_know_is_refused_naming_the_choices(tmp_path):
    with pytest.raises(ValueError, match="'same' is not one of different, alike, alike-full, held-out-full"):
        hs.shots(tmp_path, "same")


def test_tiles_cut_the_centred_grid_of_128x160_tiles_frame_by_frame_and_refuse_a_smaller_frame():
    frames = np.random.default_rng(0).random((2, 300, 330, 3), dtype=np.float32)
    out = hs.tiles(frames)
    assert out.shape == (2 * 2 * 2, 128, 160, 3)  # 2 rows of 2 tiles a frame, margins of 22 and 5 px dropped
    np.testing.assert_array_equal(out[0], frames[0, 22:150, 5:165])
    np.testing.assert_array_equal(out[3], frames[0, 150:278, 165:325])
    np.testing.assert_array_equal(out[4], frames[1, 22:150, 5:165])
    with pytest.raises(ValueError, match="100x330 px are smaller than the 128x160 px tile"):
        hs.tiles(frames[:, :100])


def test_the_source_run_is_the_studys_a_without_flags_and_named_by_its_source_and_flags(tmp_path):
    assert hs.source_dir(tmp_path, "a", 3000, "") == tmp_path / "run_A_3000"
    assert hs.source_dir(tmp_path, "a", 3000, "--augment 0.5") == tmp_path / "run_A_3000_augment_0.5"
    assert hs.source_dir(tmp_path, "library", 6000, "") == tmp_path / "run_library_6000"


def test_interior_scores_the_rendered_frames_and_the_input_without_the_16_px_band(tmp_path):
    from trainer.data.images import write_image

    shot, run = tmp_path / "shot", tmp_path / "run"
    target = np.full((48, 64, 3), 0.5, np.float32)
    edge_only = target.copy()
    edge_only[:hs.BORDER] = 0.25  # wrong only in the top band
    for folder, img in ((shot / "holdout/target", target), (shot / "holdout/input", edge_only),
                        (run / "holdout_output", target + 0.125 * (np.arange(64) % 2)[None, :, None])):
        folder.mkdir(parents=True)
        write_image(folder / "s.0006.exr", img)
    assert hs.interior(None, shot) == float("inf")  # the Input's error lies in the band left out
    assert hs.interior(run, shot) == pytest.approx(10 * np.log10(1 / (0.125 ** 2 / 2)), abs=1e-6)


def test_the_table_gives_each_length_with_the_head_starts_difference_with_and_without_the_edges(capsys):
    hs.print_table([{"steps": 1000, "scratch_psnr": 30.0, "scratch_interior": 31.0, "head_steps": 500,
                     "head_psnr": 29.95, "head_interior": 31.02, "scratch_s": 70.0, "head_s": 25.0}], 24.0)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("| reached | the same without 16 px at each edge |")
    assert lines[2] == "| 1000 steps, 70 s | +6.00 dB | 500 steps, 25 s | +5.95 dB | -0.05 dB | no | +0.02 dB |"

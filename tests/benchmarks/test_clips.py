"""benchmarks/lib/clips.py: the second clip's seeded degradation, and the decoded-clips file a GPU host reads
instead of the videos."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from trainer.export.infer import psnr

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from lib import clips  # noqa: E402


def test_second_clip_degradation_is_deterministic_blurs_and_adds_noise():
    rng = np.random.default_rng(0)
    frames = rng.random((2, 32, 40, 3), dtype=np.float32)
    a, b = clips.degrade(frames), clips.degrade(frames)
    assert np.array_equal(a, b)  # seeded: the same Input on every run
    flat = clips.degrade(np.full((1, 16, 16, 3), 0.5, np.float32), noise_sigma=0.0)
    assert np.allclose(flat, 0.5, atol=1e-6)  # a normalised kernel keeps a flat frame flat
    blurred = clips.degrade(frames, noise_sigma=0.0)
    assert blurred.std() < 0.6 * frames.std()  # white noise loses most of its variance to the blur
    smooth = np.broadcast_to(np.linspace(0.2, 0.8, 40, dtype=np.float32)[None, None, :, None], (1, 32, 40, 3))
    assert 26.0 < psnr(clips.degrade(np.ascontiguousarray(smooth))[0], smooth[0]) < 30.0  # ~ noise sigma 0.04


def test_decoded_clips_give_the_same_pairs_as_the_videos(tmp_path, monkeypatch):
    """A GPU host reads the .npz --save-decoded wrote; its pairs (and bikes' seeded degradation) equal decoding's."""
    rng = np.random.default_rng(0)
    videos = {s: rng.integers(0, 256, (12, 16, 20, 3), dtype=np.uint8) for s in clips.VIDEOS}
    monkeypatch.setattr(clips, "_decode", lambda path: videos[Path(path).stem])
    monkeypatch.setattr(clips, "clip_path", lambda name: Path(name))
    clips.save_decoded(tmp_path / "clips.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clips.npz"]  # no temp file left
    direct = {clip: clips.load_clip(clip) for clip in clips.CLIPS}

    def no_video(path):
        raise AssertionError(f"decoded {path} although the .npz holds it")

    monkeypatch.setattr(clips, "_decode", no_video)
    for clip in clips.CLIPS:
        decoded = clips.load_clip(clip, tmp_path / "clips.npz")
        assert [len(x) for x in decoded] == [10, 2]
        for a, b in zip(decoded[0] + decoded[1], direct[clip][0] + direct[clip][1]):
            assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_halved_is_the_2x2_mean_in_0_1_and_drops_an_odd_last_row_and_column():
    frames = np.arange(2 * 5 * 7 * 3, dtype=np.uint8).reshape(2, 5, 7, 3)
    out = clips.halved(frames)
    assert out.shape == (2, 2, 3, 3) and out.dtype == np.float32
    expected = frames[:, :4, :6].astype(np.float32).reshape(2, 2, 2, 3, 2, 3).mean(axis=(2, 4)) / 255.0
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    np.testing.assert_allclose(out[0, 0, 0, 0], np.mean([frames[0, y, x, 0] for y in (0, 1) for x in (0, 1)]) / 255.0,
                               rtol=1e-6)
    np.testing.assert_allclose(clips.halved(frames, by=4)[:, 0, 0], frames[:, :4, :4].mean(axis=(1, 2)) / 255.0, rtol=1e-6)
    assert clips.halved(frames, by=4).shape == (2, 1, 1, 3)

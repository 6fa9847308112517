"""S(B) = S_min (1 + B_noise / B) (trainer/advise/quality.py): fit on synthetic curves with known answers."""

import numpy as np
import pytest

from trainer.advise.quality import fit_steps_curve, steps_to_quality, time_to_quality_speedup


def test_fit_recovers_a_noiseless_curve_exactly():
    batches = [8, 16, 32, 64, 128]
    steps = [steps_to_quality(500.0, 40.0, b) for b in batches]
    assert fit_steps_curve(batches, steps) == pytest.approx((500.0, 40.0))


def test_fit_of_a_noisy_curve_is_within_10_percent():
    rng = np.random.default_rng(0)
    batches = [8, 16, 32, 64, 128] * 4
    steps = [steps_to_quality(2000.0, 25.0, b) * (1 + 0.03 * rng.standard_normal()) for b in batches]
    s_min, b_noise = fit_steps_curve(batches, steps)
    assert s_min == pytest.approx(2000.0, rel=0.10) and b_noise == pytest.approx(25.0, rel=0.10)


def test_speedup_saturates_past_the_noise_scale():
    # equal step times: batch 4x bigger gives at most 4x fewer updates, ~4x far below B_noise, ~1x far above
    below = time_to_quality_speedup(100.0, 1000.0, 32, 1.0, 8, 1.0)
    above = time_to_quality_speedup(100.0, 1.0, 512, 1.0, 128, 1.0)
    assert 3.8 < below <= 4.0 and 1.0 <= above < 1.01


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="distinct batches"):
        fit_steps_curve([8, 8], [10, 10])
    with pytest.raises(ValueError, match="not a decreasing curve"):
        fit_steps_curve([8, 16], [10, 20])
    with pytest.raises(ValueError, match="batch > 0"):
        steps_to_quality(1.0, 1.0, 0)


def test_prediction_speedups_against_one_rank():
    from trainer.advise.quality import prediction_speedups

    # B_noise 24, batch 8: 1 rank k=1 (baseline), 2 ranks twice as fast per step, 1 rank k=4 (4x the crops per update)
    got = prediction_speedups(24.0, 8, [(1, 1.0), (1, 0.5), (4, 1.0)])
    assert got[0] == pytest.approx(1.0) and got[1] == pytest.approx(2.0)
    # k=4: S(32) = 1.75 vs S(8) = 4 updates, each 4 s vs 1 s -> 4 / (1.75 x 4)
    assert got[2] == pytest.approx(4.0 / (1.75 * 4.0))


def test_advise_json_reports_noise_scale_and_time_to_quality(pairs, capsys):
    """``cuetrain advise --noise-scale N --json``: the fields the submit dialog reads."""
    import json

    from trainer.advise.advisor import main

    assert main(["--input", str(pairs[0]), "--target", str(pairs[1]), "--crop-size", "16", "--batch-size", "4",
                 "--max-world-size", "2", "--sync-intervals", "1", "2", "--warmup", "1", "--iters", "1",
                 "--noise-scale", "12", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["noise_scale"] == 12.0
    speedups = [p["time_to_quality_speedup"] for p in out["predictions"]]
    assert speedups[0] == pytest.approx(1.0) and all(s > 0 for s in speedups)
    assert out["recommended"]["time_to_quality_speedup"] > 0


def test_advise_quality_probe_measures_the_critical_batch_it_reports(pairs, capsys, monkeypatch):
    """``cuetrain advise --quality-probe --json``: the probe trains on the pairs (here with a short budget), and
    its critical batch is the noise scale behind every row's time-to-quality speedup."""
    import functools
    import json

    import trainer.advise.critical_batch as cb
    from trainer.advise.advisor import main
    from trainer.advise.quality import prediction_speedups

    seen = []

    def short(cfg, frames, **kw):
        seen.append((cfg.batch_size, len(frames)))
        return real(cfg, frames, factors=(2, 4), small_updates=6, big_updates=4, **kw)

    real = cb.measure_critical_batch
    monkeypatch.setattr(cb, "measure_critical_batch", functools.wraps(real)(short))
    assert main(["--input", str(pairs[0]), "--target", str(pairs[1]), "--crop-size", "16", "--batch-size", "4",
                 "--max-world-size", "2", "--sync-intervals", "1", "2", "--warmup", "1", "--iters", "1",
                 "--quality-probe", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    out = json.loads(lines[-1])
    assert seen == [(4, len(list(pairs[0].iterdir())))]  # the global batch, every frame of a short shot
    probe = out["quality_probe"]
    assert probe["batches"] == [4, 8, 16] and len(probe["updates"]) == 3
    assert out["noise_scale"] == probe["critical_batch"] and out["noise_scale_source"] == "quality probe"
    assert any(line.startswith("quality probe: updates to the same loss") for line in lines)
    head = next(i for i, line in enumerate(lines) if line.startswith("time to the same quality"))
    assert lines[head + 3].startswith("    1 |    1.00x")  # the table the submit dialog shows: 1 rank, sync 1
    pick_row = lines[head + 3 + [1, 2].index(out["recommended"]["world_size"])]
    assert pick_row.count("*") == 1  # its recommendation marked
    rows = out["predictions"]
    base = next(r for r in rows if r["world_size"] == 1 and r["sync_interval"] == 1)
    expect = prediction_speedups(out["noise_scale"], 4, [(base["sync_interval"], base["step_s"])]
                                 + [(r["sync_interval"], r["step_s"]) for r in rows])[1:]
    assert [r["time_to_quality_speedup"] for r in rows] == pytest.approx(expect)
    # the recommendation is the time-to-quality one: the fewest ranks within 5% of the best speedup
    best = max(expect)
    near = [r for r, s in zip(rows, expect) if s >= 0.95 * best]
    pick = min(near, key=lambda r: (r["world_size"], r["sync_interval"]))
    assert (out["recommended"]["world_size"], out["recommended"]["sync_interval"]) == \
        (pick["world_size"], pick["sync_interval"])
    assert out["recommended"]["line"].startswith("recommended for time to quality:")
    assert out["recommended_for_images_per_s"]["line"].startswith("recommended: ")


def test_advise_takes_a_noise_scale_or_a_quality_probe_not_both(pairs, capsys):
    from trainer.advise.advisor import main

    with pytest.raises(SystemExit):
        main(["--input", str(pairs[0]), "--target", str(pairs[1]), "--noise-scale", "5", "--quality-probe"])
    assert "not both" in capsys.readouterr().err


def test_quality_table_has_a_row_per_world_size_and_a_column_per_sync_interval():
    from trainer.advise.quality import format_quality_table

    text = format_quality_table({(1, 1): 1.0, (1, 4): 0.61, (2, 1): 1.93, (4, 1): 3.5, (4, 4): 2.25}, (4, 1))
    lines = text.splitlines()
    assert lines[0].split("|")[1:] == ["   sync 1 ", "   sync 4 "]
    assert lines[2] == "    1 |    1.00x |    0.61x "
    assert lines[3] == "    2 |    1.93x |        - "  # not predicted
    assert lines[4] == "    4 |    3.50x*|    2.25x "  # the recommendation's cell


def test_quality_recommendation_takes_the_fewest_ranks_near_the_best_and_says_when_more_stop_helping():
    from trainer.advise.quality import quality_recommendation

    rows = [(1, 1, 1.0), (1, 2, 0.7), (2, 1, 1.8), (4, 1, 2.6), (4, 2, 2.0), (8, 1, 2.7), (8, 2, 2.2)]
    n, k, line = quality_recommendation(rows)
    assert (n, k) == (4, 1)  # 2.6 is within 5% of 8 ranks' 2.7: twice the machines for 4% sooner
    assert line.startswith("recommended for time to quality: 4 rank(s), sync interval 1: the same quality 2.60x")
    assert "past 4 rank(s) the same quality takes more compute and is not sooner (at most 1.04x" in line
    n, k, line = quality_recommendation(rows, tolerance=0.0)
    assert (n, k) == (8, 1) and "past" not in line  # nothing bigger was predicted
    with pytest.raises(ValueError, match="no predictions"):
        quality_recommendation([])

"""``cuetrain advise`` says what it knows: which figure its recommendation rests on, B_simple called a lower bound
and never the critical batch, and the optimizer the probe timed (trainer/advise/advisor.py)."""

from __future__ import annotations

import json

from tests.trainer.advise.test_advisor import make_probe
from trainer.advise import advisor as advise
from trainer.advise.budget import ProbeSettings
from trainer.advise.critical_batch import QualityProbe
from trainer.core.config import TrainConfig

#: the keys the submit dialog (gui/advisor_view.py, gui/advisor_chart.py) reads: added to, never renamed or removed
JSON_KEYS = {"recommended", "recommended_for_images_per_s", "predictions", "noise_scale", "noise_scale_source",
             "quality_probe", "rank_memory_mb"}


def advise_json(pairs, capsys, monkeypatch, *extra: str) -> tuple[list[str], dict]:
    """Run ``cuetrain advise ... --json`` on a fake timing probe (tests/trainer/advise/test_advisor.py tests the
    real one); returns the printed lines before the JSON line, and the JSON."""
    monkeypatch.setattr(advise, "run_probe", lambda cfg, sizes, **kw: make_probe(batch_size=cfg.batch_size))
    assert advise.main(["--input", str(pairs[0]), "--target", str(pairs[1]), "--batch-size", "8",
                        "--max-world-size", "4", "--sync-intervals", "1", "2", "--json", *extra]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    out = json.loads(lines[-1])
    assert JSON_KEYS <= set(out)
    return lines[:-1], out


def test_without_a_critical_batch_the_recommendation_says_it_is_from_images_per_s(pairs, capsys, monkeypatch):
    lines, out = advise_json(pairs, capsys, monkeypatch)
    line = next(x for x in lines if x.startswith("recommended: "))
    assert line.endswith("; from images/s alone (no critical batch: --quality-probe measures it)")
    assert out["basis"] == "none" and out["noise_scale"] is None
    assert out["recommendation_basis"] == ("Recommended from images/s alone, without a critical batch; run "
                                           "--quality-probe to measure it for time to quality.")
    assert out["recommended"]["line"] == line.split("; from ")[0]  # the line's value as before: the basis is apart


def test_b_simple_is_called_a_noisy_lower_bound_never_the_critical_batch(pairs, capsys, monkeypatch):
    lines, out = advise_json(pairs, capsys, monkeypatch, "--noise-scale", "120")
    text = "\n".join(lines)
    assert "critical batch 120" not in text and "critical batch of 120" not in out["recommendation_basis"]
    assert ("time to the same quality, x 1 rank at sync interval 1 (S(B) with B_simple 120 crops from --noise-scale "
            "in place of the critical batch: a noisy lower bound on it, so these speedups are lower bounds):") in text
    line = next(x for x in lines if x.startswith("recommended for time to quality: "))
    assert line.endswith("; from B_simple 120 crops (an earlier run's simple noise scale: a noisy lower bound on the "
                         "critical batch, so more ranks may pay off; run --quality-probe for the critical batch)")
    assert out["basis"] == "b_simple" and out["noise_scale"] == 120.0 and out["noise_scale_source"] == "--noise-scale"
    assert out["recommendation_basis"] == (
        "Recommended for time to quality from B_simple of 120 crops, an earlier run's simple noise scale and a noisy "
        "lower bound on the critical batch (more ranks may pay off); run --quality-probe to measure the critical "
        "batch.")
    assert out["recommended"]["line"].startswith("recommended for time to quality: ")
    assert "B_simple" not in out["recommended"]["line"]


def test_the_quality_probes_figure_is_the_critical_batch(pairs, capsys, monkeypatch):
    import trainer.advise.critical_batch as cb

    measured = QualityProbe((8, 32, 128), (160.0, 70.0, 52.0), 0.05, 96.0, ((), (), ()), 12.0)
    monkeypatch.setattr(cb, "measure_critical_batch", lambda cfg, frames, **kw: measured)
    monkeypatch.setattr(cb, "probe_frames", lambda cfg: [])
    lines, out = advise_json(pairs, capsys, monkeypatch, "--quality-probe")
    assert measured.line() in lines and "critical batch 96.0 crops" in measured.line()
    assert ("time to the same quality, x 1 rank at sync interval 1 (S(B) with the quality probe's critical batch 96 "
            "crops):") in lines
    line = next(x for x in lines if x.startswith("recommended for time to quality: "))
    assert line.endswith("; from the quality probe's critical batch 96 crops")
    assert (out["basis"], out["noise_scale"], out["noise_scale_source"]) == ("critical_batch", 96.0, "quality probe")
    assert out["recommendation_basis"] == ("Recommended for time to quality from the quality probe's critical batch "
                                           "of 96 crops.")
    assert "B_simple" not in "\n".join(lines)


def test_the_probe_line_names_the_optimizer_it_timed():
    assert "\n  Adam step 4.0 ms (once per sync)" in advise.describe_probe(make_probe())
    muon = advise.describe_probe(make_probe(optimizer="muon"))
    assert "\n  Muon step 4.0 ms (once per sync)" in muon and "Adam" not in muon


def test_the_probe_times_the_configured_optimizer(pairs, tmp_path):
    """The real probe records the optimizer the run trains (``build_optimizer``: ``TrainConfig.optimizer_name``)."""
    cfg = TrainConfig(str(pairs[0]), str(pairs[1]), str(tmp_path / "run"), batch_size=2, crop_size=16,
                      optimizer="muon")
    probe = advise.run_probe(cfg, [1], ProbeSettings(warmup=1, iters=1))
    assert probe.optimizer == cfg.optimizer_name == "muon"
    assert "\n  Muon step " in advise.describe_probe(probe)

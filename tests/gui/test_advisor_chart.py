"""The advisor's chart (gui.advisor_chart): per-rank time to the same quality and farm hours from ``--json``.

The sample is the shape ``cuetrain advise --json`` prints (trainer.advise.advisor._time_to_quality), with round
numbers: 1 rank at sync 1 takes 1 s a step, so 3,600 planned steps are 1 h on 1 rank.
"""

from __future__ import annotations

import json

import pytest

from gui.advisor_chart import (AdvisorChart, AdvisorSeries, RankPoint, advisor_series, duration_text, parse_advice,
                               summary_sentence)

STEPS = 3600
#: (ranks, sync interval) -> (step_s [s], time_to_quality_speedup against 1 rank at sync 1)
CELLS = {(1, 1): (1.0, 1.0), (2, 1): (0.6, 1.8), (4, 1): (0.45, 2.5), (8, 1): (0.42, 2.6),
         (1, 2): (0.9, 0.7), (2, 2): (0.5, 1.2), (4, 2): (0.3, 1.5), (8, 2): (0.2, 1.9)}


def advice(recommended: tuple[int, int] = (4, 1), quality: bool = True, **extra) -> dict:
    """A ``cuetrain advise --json`` dict over :data:`CELLS`, recommending ``recommended`` (ranks, sync interval)."""
    rows = [{"world_size": n, "sync_interval": k, "per_rank_batch": 8 // n, "compute_s": s, "comm_s": 0.0,
             "step_s": s, "images_per_s": 8 / s, "speedup": 1.0 / s, "efficiency": 1.0 / s / n, "ranks_per_frame": 1,
             "time_to_quality_speedup": q if quality else None} for (n, k), (s, q) in CELLS.items()]
    chosen = next(r for r in rows if (r["world_size"], r["sync_interval"]) == recommended)
    return {"recommended": {**chosen, "line": f"recommended for time to quality: {recommended[0]} rank(s), "
                                              f"sync interval {recommended[1]}"},
            "predictions": rows, "noise_scale": 6.0 if quality else None, **extra}


def test_series_has_one_point_per_rank_at_the_recommended_sync_interval():
    series = advisor_series(advice(), STEPS)
    assert [p.ranks for p in series.points] == [1, 2, 4, 8] and series.sync_interval == 1 and series.same_quality
    # 1 h on 1 rank / the time-to-quality speedup; farm hours = ranks x that
    assert [p.hours for p in series.points] == pytest.approx([1.0, 1 / 1.8, 0.4, 1 / 2.6])
    assert [p.farm_hours for p in series.points] == pytest.approx([1.0, 2 / 1.8, 1.6, 8 / 2.6])
    assert series.recommended == series.points[2] and series.reference_ranks == 1 and series.basis == ""
    at_sync_2 = advisor_series(advice((2, 2)), STEPS)  # the sync-2 column; still against 1 rank at sync 1
    assert [p.hours for p in at_sync_2.points] == pytest.approx([1 / 0.7, 1 / 1.2, 1 / 1.5, 1 / 1.9])


def test_without_a_critical_batch_the_times_are_for_the_same_steps():
    series = advisor_series(advice(quality=False), STEPS)
    assert not series.same_quality
    assert [p.hours for p in series.points] == pytest.approx([1.0, 0.6, 0.45, 0.42])  # steps x step_s
    assert summary_sentence(series).startswith("4 ranks: the 3,600 steps in 0.5 h, for 1.8 farm hours;")


def test_unusable_advice_gives_no_series():
    assert advisor_series(None, STEPS) is None
    assert advisor_series({"recommended": {"world_size": 4, "sync_interval": 1}, "predictions": []}, STEPS) is None
    assert advisor_series(advice((4, 1)) | {"recommended": {"world_size": 3, "sync_interval": 1}}, STEPS) is None
    assert advisor_series(advice(), 0) is None


def test_sentence_names_the_recommended_ranks_hours_and_what_more_ranks_do():
    assert summary_sentence(advisor_series(advice(), STEPS)) == (
        "4 ranks: a model as good as 3,600 steps on 1 rank, in 0.4 h, for 1.6 farm hours; "
        "more ranks cost more farm hours for little time saved.")
    # 2 ranks: 0.56 h; 8 ranks are 0.17 h sooner for 2 more farm hours
    assert summary_sentence(advisor_series(advice((2, 1)), STEPS)).endswith(
        "in 0.6 h, for 1.1 farm hours; 8 ranks would be 0.2 h sooner for 2.0 farm hours more.")
    assert summary_sentence(advisor_series(advice((8, 1)), STEPS)).endswith(
        "in 0.4 h, for 3.1 farm hours; fewer ranks take longer.")
    slower = AdvisorSeries((RankPoint(1, 2.0, 2.0), RankPoint(2, 2.5, 5.0)), RankPoint(1, 2.0, 2.0), 1, True, 10, 1)
    assert summary_sentence(slower) == ("1 rank: a model as good as 10 steps on 1 rank, in 2.0 h, for 2.0 farm hours; "
                                        "more ranks are not sooner.")
    assert [duration_text(h) for h in (12.4, 0.42, 0.05, 0.005)] == ["12 h", "0.4 h", "3 min", "18 s"]


def test_parse_advice_reads_the_closing_json_line():
    line = json.dumps(advice())
    assert parse_advice(f"table\nrecommended: 4 rank(s)\n{line}\n")["recommended"]["world_size"] == 4
    assert parse_advice("table\nrecommended: 4 rank(s), sync interval 1\n") is None
    assert parse_advice('table\n{"recommended": \n') is None and parse_advice("") is None


def test_chart_plots_each_rank_and_marks_the_recommendation(qtbot):
    chart = AdvisorChart()
    qtbot.addWidget(chart)
    assert chart.placeholder.isVisibleTo(chart) and not chart.plots.isVisibleTo(chart)
    assert chart.show_advice(advice(), STEPS) is chart.series
    assert not chart.placeholder.isVisibleTo(chart) and chart.plots.isVisibleTo(chart)
    x, y = chart.time_curve.getData()
    assert list(x) == [1, 2, 4, 8] and list(y) == pytest.approx([1.0, 1 / 1.8, 0.4, 1 / 2.6])  # hours
    x, y = chart.farm_curve.getData()
    assert list(x) == [1, 2, 4, 8] and list(y) == pytest.approx([1.0, 2 / 1.8, 1.6, 8 / 2.6])  # rank-hours
    assert chart.time_line.value() == 4 and chart.farm_line.value() == 4
    assert [float(v) for a in chart.time_mark.getData() for v in a] == pytest.approx([4, 0.4])  # (ranks, hours)
    assert [float(v) for a in chart.farm_mark.getData() for v in a] == pytest.approx([4, 1.6])
    assert chart.time_plot.getAxis("left").labelText == "hours"
    assert chart.farm_plot.getAxis("left").labelText == "rank-hours"
    assert chart.time_plot.titleLabel.text == "time to the same quality"
    assert chart.sentence.text().startswith("4 ranks: a model as good as 3,600 steps on 1 rank, in 0.4 h, for 1.6")
    assert not chart.basis.isVisibleTo(chart)  # this advisor gives no recommendation_basis
    short = advice()  # 36 steps: 36 s on 1 rank, charted in seconds
    chart.show_advice(short, 36)
    assert list(chart.time_curve.getData()[1]) == pytest.approx([36, 20, 14.4, 36 / 2.6])
    assert chart.time_plot.getAxis("left").labelText == "seconds"


def test_chart_shows_the_recommendation_basis_when_the_advisor_gives_it(qtbot):
    chart = AdvisorChart()
    qtbot.addWidget(chart)
    basis = "The critical batch was measured by the quality probe (McCandlish et al. 2018)."
    chart.show_advice(advice(recommendation_basis=basis, basis="critical_batch"), STEPS)
    assert chart.basis.text() == basis and chart.basis.isVisibleTo(chart)
    inside = advice()
    inside["recommended"]["recommendation_basis"] = basis
    chart.show_advice(inside, STEPS)
    assert chart.basis.text() == basis


def test_no_data_is_a_clear_placeholder(qtbot):
    chart = AdvisorChart()
    qtbot.addWidget(chart)
    chart.show_advice(advice(), STEPS)
    assert chart.show_advice(None, STEPS) is None and chart.series is None
    assert chart.placeholder.text().startswith("No chart: the advisor printed no JSON line")
    assert chart.placeholder.isVisibleTo(chart) and not chart.plots.isVisibleTo(chart)
    assert all(x is None or len(x) == 0 for x in (chart.time_curve.getData()[0], chart.farm_curve.getData()[0],
                                                  chart.time_mark.getData()[0]))  # nothing left drawn
    assert chart.sentence.text() == "" and not chart.sentence.isVisibleTo(chart)
    chart.show_advice({"recommended": {"world_size": 2, "sync_interval": 1}, "predictions": []}, STEPS)
    assert chart.placeholder.text().startswith("No chart: the advisor's JSON has no usable per-rank predictions")

"""benchmarks/bench_recipe.py default-recipe (benchmarks/lib/default_recipe.py): recipe names with an lr factor and
the cells file of a GPU run (the figures themselves come from running the benchmark)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainer.core.recipe import DEFAULT_LR

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from lib import default_recipe as bdr  # noqa: E402

CELLS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.mark.parametrize("name, opt, factor", [("adam", "adam", 1.0), ("muon", "muon", 2.0), ("muon@16", "muon", 16.0),
                                               ("adam@0.5", "adam", 0.5)])
def test_a_recipe_name_sets_the_optimizer_and_its_lr_over_the_sizes_adam_lr(name, opt, factor):
    r = bdr.recipe(name, "large", 4, 1000)  # global batch 32: 250 updates at sqrt(4) x the lr
    assert (r.optimizer, r.batch, r.steps) == (opt, 32, 250)
    assert r.lr == pytest.approx(DEFAULT_LR["large"] * factor * 2)
    assert r.beta2 == (0.9 if opt == "muon" else 0.999)


@pytest.mark.parametrize("name, says", [("sgd", "must be one of adam, muon"), ("muon@", "positive number"),
                                        ("muon@x", "positive number"), ("adam@-1", "positive number")])
def test_a_bad_recipe_name_is_refused_with_the_name(name, says):
    with pytest.raises(SystemExit, match=says) as e:
        bdr.parse_recipe(name)
    assert repr(name) in str(e.value)


def test_cells_run_in_file_order_and_a_bad_line_names_its_number(tmp_path):
    f = tmp_path / "lane.txt"
    f.write_text("# a comment\ncarphone large 32 1000 muon@16\n\nbikes-blur-noise small 8 400 adam\n")
    a = bdr.argparse.Namespace(cells=f)
    assert bdr.grid(a) == [("carphone", "large", 32, 1000, "muon@16"), ("bikes-blur-noise", "small", 8, 400, "adam")]
    f.write_text("carphone large 32 1000 muon\ncarphone large 12 1000 muon\n")
    with pytest.raises(SystemExit, match=r"lane.txt:2: .*multiple of 8"):
        bdr.grid(a)


@pytest.mark.parametrize("name", ["gpu_default_recipe.cells", "gpu_default_recipe_lr.cells",
                                  "gpu_default_recipe_lr2.cells"])
def test_the_gpu_lanes_parse(tmp_path, name):
    """Every lane line of the shipped cells files is a valid cell (the script splits them by their first field)."""
    lines = [ln.split() for ln in (CELLS / name).read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert lines and all(len(f) == 6 and f[0].startswith("L") for f in lines)
    (tmp_path / "all.txt").write_text("\n".join(" ".join(f[1:]) for f in lines))
    assert len(bdr.grid(bdr.argparse.Namespace(cells=tmp_path / "all.txt"))) == len(lines)


def test_table_puts_lr_search_rows_in_a_second_table():
    row = {"clip": "carphone", "size": "large", "batch": 8, "steps": 1000, "ms_per_step": 10.0}
    rows = [dict(row, recipe="adam", gain=1.0, lr=1e-4), dict(row, recipe="muon", gain=1.5, lr=2e-4),
            dict(row, recipe="muon@16", gain=3.0, lr=1.6e-3)]
    first, second = bdr.table(rows).split("\n\n")
    assert "| carphone | large | 8 | 1000 | +1.00 dB | +1.50 dB | +0.50 dB |" in first
    assert "| carphone | large | 8 | 1000 | muon@16 | 1.60e-03 | +3.00 dB | 10 |" in second
    assert second.index("| muon |") < second.index("| muon@16 |")  # by optimizer, then lr

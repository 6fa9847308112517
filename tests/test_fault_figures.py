"""scripts/fault_figures.py: medians per fault kind from the recovery tests' JSON-lines figures."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fault_figures.py"


def load():
    spec = importlib.util.spec_from_file_location("fault_figures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_has_one_row_per_fault_with_the_medians_of_its_runs():
    lines = [json.dumps({"fault": f, "steps_lost": n, "seconds_to_training": s})
             for f, n, s in [("kill", 3, 10.0), ("sigterm", 0, 2.0), ("kill", 9, 30.0), ("kill", 5, 12.5)]]
    rows = load().table(lines).splitlines()
    assert rows[2:] == ["| kill | 3 | 5 | 12.5 |", "| sigterm | 1 | 0 | 2.0 |"]


def test_a_malformed_line_is_named():
    with pytest.raises(ValueError, match="line 2"):
        load().table([json.dumps({"fault": "a", "steps_lost": 1, "seconds_to_training": 1}), '{"fault": "b"}'])

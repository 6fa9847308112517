"""The suite's own scheduling table (tests/conftest.py: HEAVY_FIRST) stays true to the tree."""

from __future__ import annotations

from tests.conftest import HEAVY_FIRST, ROOT, heavy_first_key


def test_every_heavy_first_path_exists_and_is_listed_once():
    missing = [prefix for prefix in HEAVY_FIRST if not (ROOT / prefix).exists()]
    assert not missing, f"HEAVY_FIRST names paths that are gone: {missing}"
    assert len(set(HEAVY_FIRST)) == len(HEAVY_FIRST)


def test_heavy_files_sort_first_in_table_order_and_others_keep_theirs():
    ids = ["tests/trainer/test_config.py::test_a", "tests/trainer/test_train.py::test_b",
           "tests/multihost/test_multihost.py::test_c", "tests/gui/test_widgets.py::test_d",
           "tests/cue_plugin/test_elastic.py::test_e"]
    assert sorted(ids, key=heavy_first_key) == [ids[2], ids[4], ids[1], ids[0], ids[3]]


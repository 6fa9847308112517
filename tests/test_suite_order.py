"""The suite's own scheduling table (tests/conftest.py: HEAVY_FIRST) stays true to the tree."""

from __future__ import annotations

from tests.conftest import HEAVY_FIRST, ROOT, heavy_first_key


def test_every_heavy_first_path_exists_and_is_listed_once():
    missing = [prefix for prefix in HEAVY_FIRST if not (ROOT / prefix).exists()]
    assert not missing, f"HEAVY_FIRST names paths that are gone: {missing}"
    assert len(set(HEAVY_FIRST)) == len(HEAVY_FIRST)


def test_heavy_files_sort_first_in_table_order_and_others_keep_theirs():
    ids = ["tests/trainer/test_config.py::test_a", "tests/trainer/learn/test_train.py::test_b",
           "tests/multihost/test_multihost.py::test_c", "tests/gui/test_widgets.py::test_d",
           "tests/cue_plugin/test_elastic.py::test_e"]
    assert sorted(ids, key=heavy_first_key) == [ids[2], ids[4], ids[1], ids[0], ids[3]]



CRASHING = """
import os, threading, time
import pytest

@pytest.mark.parametrize("i", range(4))
def test_before(i):
    time.sleep(0.1)

def abort_on_a_worker_thread():
    os.abort()  # stands for a C++ abort in a worker (issue 20: one was seen; stop 33's CI another)

def test_crash():
    time.sleep(0.3)
    worker = threading.Thread(target=abort_on_a_worker_thread, name="like-a-gloo-thread")
    worker.start()
    worker.join()

@pytest.mark.parametrize("i", range(4))
def test_after(i):
    time.sleep(0.1)
"""


def test_a_crashed_xdist_worker_fails_the_run_instead_of_hanging_it():
    """Under this suite's group scheduling, xdist's replacement of a crashed worker left the session waiting
    forever; the suite now ends with the crash reported (conftest: maxworkerrestart 0)."""
    import shutil
    import subprocess
    import sys
    import uuid

    folder = ROOT / "tests" / f"_crash_probe_{uuid.uuid4().hex[:8]}"  # under tests/: this conftest applies
    folder.mkdir()
    try:
        (folder / "__init__.py").write_text("")
        (folder / "test_probe.py").write_text(CRASHING)
        done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q",
                               str(folder.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(folder)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "test_crash - worker 'gw" in done.stdout and "crashed" in done.stdout
    assert "1 failed" in done.stdout  # and the session ended (before: it waited until the timeout above)
    # The worker's faulthandler dump is printed at the end (tests/faults.py), before the short summary, with the
    # error's name and the crashing thread's stack, and without the extension modules' list
    out = done.stdout
    section = out.index("fatal error in pytest-xdist worker gw")
    assert out.index("slowest") < section < out.index("short test summary info"), out[-3000:]
    dump = out[section:out.index("short test summary info")]
    assert "Fatal Python error: Aborted" in dump, dump
    current = dump[dump.index("Current thread"):]
    assert "in abort_on_a_worker_thread" in current.split("\n\n")[0], dump
    assert "Extension modules" not in dump

"""tests/faults.py: a crashed xdist worker's faulthandler dump, condensed for the end of the run."""

from __future__ import annotations

from tests.faults import condense

DUMP = """Fatal Python error: Aborted

Thread 0x00007f0000000002 (most recent call first):
  File "/x/gang.py", line 30 in _run
  File "/usr/lib/python3.11/threading.py", line 975 in run
  File "/usr/lib/python3.11/threading.py", line 1038 in _bootstrap_inner
  File "/usr/lib/python3.11/threading.py", line 995 in _bootstrap

Current thread 0x00007f0000000001 (most recent call first):
  File "/x/a.py", line 3 in c
  File "/x/a.py", line 2 in b
  File "/x/a.py", line 1 in a

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""


def test_condense_keeps_the_error_and_the_current_thread_and_cuts_the_others():
    out = condense(DUMP, other_frames=2)
    assert out.startswith("Fatal Python error: Aborted\n\nThread 0x00007f0000000002")
    assert "line 30 in _run" in out and "line 975 in run" in out and "_bootstrap" not in out
    assert "  ... 2 more frames" in out
    assert out.endswith('Current thread 0x00007f0000000001 (most recent call first):\n  File "/x/a.py", line 3 in c\n'
                        '  File "/x/a.py", line 2 in b\n  File "/x/a.py", line 1 in a')
    assert "Extension modules" not in out


def test_condense_keeps_a_short_thread_whole():
    assert "_bootstrap" in condense(DUMP, other_frames=4) and "more frames" not in condense(DUMP, other_frames=4)

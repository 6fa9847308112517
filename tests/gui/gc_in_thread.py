"""A pytest plugin for ``test_gui_tests_leave_no_qt_object_for_another_thread``: when the session ends,
run Python's cyclic GC on a fresh thread, as a gRPC or dispatcher thread of a later test would.

Load it with ``-p tests.gui.gc_in_thread``. A Qt object still waiting for the GC at that point is deleted
off the GUI thread there, and the process segfaults (exit -11); otherwise it prints
``collected on a worker thread: N``.
"""

from __future__ import annotations

import gc
import threading


def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ARG001 - pytest hook signature
    counts: list[int] = []
    worker = threading.Thread(target=lambda: counts.append(gc.collect()), name="gc-like-a-grpc-worker")
    worker.start()
    worker.join()
    print(f"\ncollected on a worker thread: {counts[0]}", flush=True)

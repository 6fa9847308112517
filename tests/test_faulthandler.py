"""The suite runs with faulthandler on, in pytest's process and in every Python child it starts."""

from __future__ import annotations

import faulthandler
import os
import subprocess
import sys


def test_faulthandler_is_on_here_and_in_children() -> None:
    assert faulthandler.is_enabled()
    assert os.environ.get("PYTHONFAULTHANDLER") == "1"
    crash = "import faulthandler, threading\nt = threading.Thread(target=faulthandler._sigsegv)\nt.start(); t.join()"
    proc = subprocess.run([sys.executable, "-c", crash], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == -11  # SIGSEGV
    assert "Fatal Python error: Segmentation fault" in proc.stderr
    assert "Current thread" in proc.stderr or "Thread 0x" in proc.stderr  # the crashing thread's stack is dumped

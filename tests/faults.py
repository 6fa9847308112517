"""A crashed pytest-xdist worker's fatal-error dump, printed at the end of the run, where CI's log tail shows it.

pytest's faulthandler plugin writes a worker's dump (every thread's stack on SIGSEGV, SIGFPE, SIGABRT, SIGBUS,
SIGILL) to the worker's stderr, in the middle of the run's output, most recent thread first and the main thread
last, then a 2,000-character list of extension modules. CI keeps the last few thousand characters of a run: of
stop 33's crash (a worker died in ``tests/trainer/gang/test_compression.py``) it kept only the main thread's
bottom frames, not the error's name nor the thread that crashed.

Here each worker's faulthandler writes to a file of its own in a folder the controller makes
(:data:`FOLDER_VARIABLE`, inherited by the workers it starts); at the end of the run the controller prints
each non-empty file condensed (:func:`condense`): the error line, the crashing thread's whole stack, the other
threads' top frames. A run without xdist workers is left as pytest makes it (its dump is the run's last output).
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO

import pytest

#: The folder (set by the controller for its workers) where each worker's faulthandler writes ``<workerid>.log``.
FOLDER_VARIABLE = "CUETRAIN_TEST_FAULT_DIR"
_FOLDER = pytest.StashKey[Path]()
_DUMP = pytest.StashKey[IO[str]]()
OTHER_THREAD_FRAMES = 4  # frames kept of each thread that did not crash (the most recent ones)


def make_folder(config: pytest.Config) -> None:
    """Controller: make the dump folder and hand it to the workers xdist is about to start (their environment)."""
    folder = Path(tempfile.mkdtemp(prefix="cuetrain-faults-"))
    os.environ[FOLDER_VARIABLE] = str(folder)
    config.stash[_FOLDER] = folder


def redirect_worker(config: pytest.Config) -> None:
    """Worker: faulthandler writes to ``<folder>/<workerid>.log`` instead of stderr (after pytest's plugin enabled
    it on stderr: this must run after ``_pytest.faulthandler.pytest_configure``)."""
    folder = os.environ.get(FOLDER_VARIABLE)
    if not folder or not Path(folder).is_dir():
        return
    dump = open(Path(folder) / f"{config.workerinput['workerid']}.log", "w", encoding="utf-8")  # noqa: SIM115
    config.stash[_DUMP] = dump  # open until the process ends: faulthandler keeps only its file descriptor
    faulthandler.enable(file=dump, all_threads=True)


def condense(dump: str, other_frames: int = OTHER_THREAD_FRAMES) -> str:
    """A faulthandler dump without its extension-module list, threads other than the current one cut to their
    ``other_frames`` most recent frames (Python's format: blocks separated by blank lines, a thread's block
    headed "Current thread 0x..." or "Thread 0x...", one "  File ..." line per frame)."""
    kept: list[str] = []
    for block in dump.strip("\n").split("\n\n"):
        lines = block.splitlines()
        if not lines or lines[0].startswith("Extension modules:"):
            continue
        if lines[0].startswith("Thread 0x") and len(lines) > 1 + other_frames:
            lines = [*lines[:1 + other_frames], f"  ... {len(lines) - 1 - other_frames} more frames"]
        kept.append("\n".join(lines))
    return "\n\n".join(kept)


def report(config: pytest.Config, terminal: pytest.TerminalReporter) -> None:
    """Controller: print each worker's non-empty dump, condensed; then remove the folder."""
    folder = config.stash.get(_FOLDER, None)
    if folder is None:
        return
    for path in sorted(folder.glob("*.log")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if text.strip():
            terminal.write_sep("=", f"fatal error in pytest-xdist worker {path.stem} (faulthandler)")
            terminal.write_line(condense(text))
    shutil.rmtree(folder, ignore_errors=True)

"""Logging for every entry point (CLI, demo, farm frames), and the two line formats a rank prints.

Levels: ours at INFO, third-party at WARNING. Libraries such as ``onnx_ir``/``onnxscript`` (about 13 INFO
lines per ONNX export), ``torch`` and ``urllib3`` log at INFO through the root logger; an artist's terminal
and a frame's log should show only our progress and anyone's warnings.

A rank writes two kinds of lines to its output, both defined here and nowhere else:

- log records, :func:`rank_format` (``2026-01-01 12:00:00,000 INFO [rank 0] trainer.gang.formation: ...``);
- progress lines, :func:`progress_line` (``[Step:50/3000] loss=0.031 lr=0.002 images/s=120.5``), which
  render-farm adaptors parse (a frame's log in CueGUI shows one per ``--log-interval``).

:func:`is_detail` tells a local run's terminal (:mod:`trainer.agent.progress`) which of those lines only the
log files need: INFO and DEBUG records and progress lines. Everything else (warnings, errors, tracebacks,
``cuetrain: error:`` lines) is shown.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from pathlib import Path
from typing import Iterator

#: Our logger trees; everything else is third-party.
OUR_LOGGERS = ("cuetrain", "trainer", "cue_plugin", "gui", "__main__")

_CONSOLE = "cuetrain-console"  # the name of the stderr handler configure_logging adds
_DETAIL = re.compile(r"^(\[rank \d+\] )?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO) |\[Step:\d+/\d+\] )")


def configure_logging(fmt: str = "%(asctime)s %(levelname)s %(name)s: %(message)s",
                      console_level: int = logging.INFO) -> None:
    """Log to stderr: the root (third-party) at WARNING, :data:`OUR_LOGGERS` at INFO. Idempotent.

    ``console_level`` above INFO (``cuetrain local`` and ``demo`` without ``-v``) keeps INFO records off the
    terminal; :func:`log_file` still receives them.
    """
    root = logging.getLogger()
    if not root.handlers:  # as logging.basicConfig: a process that configured logging already keeps its handlers
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(logging.Formatter(fmt))
        console.set_name(_CONSOLE)
        root.addHandler(console)
    for handler in root.handlers:
        if handler.get_name() == _CONSOLE:
            handler.setLevel(console_level)
    root.setLevel(logging.WARNING)
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)


@contextlib.contextmanager
def log_file(path: Path, mode: int = 0o640,
             fmt: str = "%(asctime)s %(levelname)s %(name)s: %(message)s") -> Iterator[None]:
    """While open, also write our INFO records (and everyone's warnings) to ``path`` (appended; its folder must
    exist), created with ``mode`` (a run directory's files: 0640, ``trainer.record.rundir.FILE_MODE``)."""
    os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode))
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(fmt))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()


def rank_format(rank: int) -> str:
    """The log record format of rank ``rank`` (a ``logging`` format string)."""
    return f"%(asctime)s %(levelname)s [rank {rank}] %(name)s: %(message)s"


def progress_line(step: int, steps: int, loss: float, lr: float, images_per_s: float) -> str:
    """The progress line a rank prints every ``--log-interval`` steps (no newline)."""
    return f"[Step:{step}/{steps}] loss={loss:.6f} lr={lr:.3g} images/s={images_per_s:.1f}"


def is_detail(line: str) -> bool:
    """True for a line that only the log files need: an INFO/DEBUG record or a progress line of
    :func:`rank_format` / :func:`progress_line`, with or without the supervisor's ``[rank N]`` prefix."""
    return _DETAIL.match(line) is not None


def print_progress(line: str) -> None:
    """Print a :func:`progress_line` on stdout (render-farm adaptors parse it), above a tqdm progress bar when
    stderr is a terminal."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        tqdm.write(line, file=sys.stdout)
    else:
        print(line, flush=True)

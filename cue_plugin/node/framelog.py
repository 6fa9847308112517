"""Pace a farm frame's stdout so that RQD logs every line (the frame log CueGUI shows).

RQD 1.37 (``rqd/rqcore.py``, ``FrameAttendantThread.runLinux``) polls the frame's stdout pipe and calls
``readline()`` once per ``POLLIN`` wake-up on a *buffered* reader. When several lines sit in the pipe at
one wake-up, ``readline()`` reads them all into its buffer and returns the first; the rest are returned
only by later wake-ups (one per new write) and are lost when the frame exits. ``python -u`` or
``stdbuf -oL`` do not help: they flush per line, but lines written close together still meet in the pipe.

:class:`PacedLines` keeps RQD's reader at exactly one line per read: it writes one line per ``write()``
and, before the next, waits until the pipe is empty again (Linux ``FIONREAD`` on the pipe, as
``ioctl(2)``/``pipe(7)`` document: bytes not yet read). Once the pipe is empty RQD's ``readline()`` has
the whole line and logs it in the same loop iteration, even if the frame exits right after, so
:meth:`PacedLines.drain` before exit loses nothing. When the byte count cannot be read, a fixed gap
(``gap_s``) between lines is used instead. Stdout that is not a pipe (a terminal, a file) is written
without pacing.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
import struct
import termios
import time
from dataclasses import dataclass
from typing import IO

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PacingConfig:
    """How lines are paced.

    Attributes:
        max_wait_s: longest wait [s] for the reader to empty the pipe before a line is written anyway (a
            stalled reader must not stall the frame).
        gap_s: pause [s] after each line when the pipe's unread byte count cannot be read.
        poll_s: how often [s] the unread byte count is checked while waiting.
    """

    max_wait_s: float = 0.5
    gap_s: float = 0.002
    poll_s: float = 0.0005


def _is_pipe(fd: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        return False


def unread_bytes(fd: int) -> int | None:
    """Bytes written to the pipe ``fd`` and not yet read (``FIONREAD``); ``None`` when it cannot be told."""
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return None


class PacedLines:
    """Writes text to ``stream`` one line per write, each once the reader has taken the previous one.

    Not thread-safe: callers serialise writes (:class:`trainer.agent.supervise.RankLogs` holds a lock).

    Args:
        stream: a text stream (the frame's ``sys.stdout``).
        config: pacing limits (defaults: :class:`PacingConfig`).
    """

    def __init__(self, stream: IO[str], config: PacingConfig | None = None) -> None:
        self._stream = stream
        self._config = config or PacingConfig()
        try:
            self._fd: int | None = stream.fileno()
        except (AttributeError, OSError, ValueError):
            self._fd = None
        self._paced = self._fd is not None and _is_pipe(self._fd)
        self._partial = ""
        self.late_lines = 0  # lines written after max_wait_s without the reader catching up

    @property
    def paced(self) -> bool:
        """True when the stream is a pipe and lines are paced."""
        return self._paced

    def write(self, text: str) -> None:
        """Write ``text``; complete lines go out one per write, a trailing partial line waits for its end."""
        text = self._partial + text
        lines = text.splitlines(keepends=True)
        self._partial = lines.pop() if lines and not lines[-1].endswith(("\n", "\r")) else ""
        for line in lines:
            self._write_line(line)

    def flush(self) -> None:
        """Nothing to do: complete lines are flushed as they are written."""

    def drain(self) -> None:
        """Write a pending partial line and wait until the reader has taken everything (call before exit)."""
        if self._partial:
            self._write_line(self._partial + "\n")
            self._partial = ""
        self._wait_empty()

    def _write_line(self, line: str) -> None:
        self._wait_empty()
        self._stream.write(line)
        self._stream.flush()

    def _wait_empty(self) -> None:
        """Wait until the pipe holds no unread byte (at most ``max_wait_s``); a fixed gap when unknown."""
        if not self._paced:
            return
        deadline = time.monotonic() + self._config.max_wait_s
        while True:
            unread = unread_bytes(self._fd)  # type: ignore[arg-type] - paced implies a descriptor
            if unread is None:
                time.sleep(self._config.gap_s)
                return
            if unread == 0:
                return
            if time.monotonic() >= deadline:
                self.late_lines += 1
                return
            time.sleep(self._config.poll_s)

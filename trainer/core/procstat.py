"""What Linux says about a process's I/O and memory (``/proc``), read the way the farm reads it.

* :func:`io_counters`: ``/proc/self/io`` (proc(5)): ``rchar`` counts every byte this process got from
  ``read``/``pread`` (page cache hits included), ``read_bytes`` the bytes it made the kernel fetch from a
  block device. For a shot on a file server, ``rchar`` over the decode is what the host pulled over the
  network (NFS traffic does not show in ``read_bytes``).
* :func:`stat_rss_bytes` / :func:`frame_rss_bytes`: the resident set size as OpenCue's RQD sees a frame.
  RQD 1.37 (``rqd/rqmachine.py``, ``Machine.rssUpdate`` and ``collect_linux_pids_and_sessions``) reads
  field 24 of ``/proc/PID/stat`` (``rss``, pages: anonymous + file-backed + shared memory pages mapped in
  the process) of every process whose session id is the frame's pid (RQD starts each frame with
  ``os.setsid``), adds the sessions of the frame's direct children, sums them, converts pages to KiB
  with the page size, and keeps the maximum as the frame's ``maxRss`` every ``RSS_UPDATE_INTERVAL``
  (10) seconds. So the page cache behind ``pread`` is not counted, but every page of a file a process
  has touched through ``mmap`` is, once per process that maps it.

Linux only; elsewhere the functions return zeros.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096  # bytes


def io_counters() -> dict[str, int]:
    """``/proc/self/io`` as ints (``rchar``, ``wchar``, ``read_bytes``, ``write_bytes``, ...) [bytes, counts];
    empty when the file cannot be read."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if value.strip().isdigit():
            out[name.strip()] = int(value)
    return out


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (``getrusage`` ``ru_maxrss``, KiB on Linux) [bytes]."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _stat_fields(pid: int | str) -> list[str] | None:
    """``/proc/PID/stat`` split into fields, the command name (which may hold spaces) as one field."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    head, _, tail = text.rpartition(")")
    return [head.split(" ", 1)[0], head.split("(", 1)[-1], *tail.split()]


def stat_rss_bytes(pid: int) -> int:
    """RSS of one process from ``/proc/PID/stat`` field 24 [bytes] (0 when it is gone)."""
    fields = _stat_fields(pid)
    return int(fields[23]) * PAGE if fields else 0


def frame_rss_bytes(frame_pid: int) -> int:
    """A frame's RSS as RQD 1.37 computes it (module doc): the ``/proc/PID/stat`` rss of every process in
    the session ``frame_pid`` and in the sessions of its direct children, summed [bytes]."""
    sessions: dict[str, list[int]] = {}
    children: list[str] = []
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(entry)
        if fields is None:
            continue
        sessions.setdefault(fields[5], []).append(int(entry))
        if fields[3] == str(frame_pid):
            children.append(entry)
        rss[int(entry)] = int(fields[23])
    pids = set(sessions.get(str(frame_pid), []))
    for child in children:
        pids.update(sessions.get(child, []))
    return sum(rss.get(p, 0) for p in pids) * PAGE

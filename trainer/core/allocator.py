"""Process-level tuning of the trainer on CPU hosts.

glibc serves allocations above ``M_MMAP_THRESHOLD`` (dynamic, starting at 128 KiB) with fresh
``mmap`` calls and returns them on free, so every activation tensor of every step costs page faults
(measured here: 5,000-7,000 minor faults per step of the small model, about 15% of step time).
Raising the mmap and trim thresholds to 64/128 MiB keeps those pages in the heap. This is what the
``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` variables do (glibc manual, "Memory Allocation
Tunables"), set at run time through ``mallopt(3)`` because the variables must exist before the
process starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 64 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024


def tune_allocator() -> bool:
    """Raise glibc's mmap/trim thresholds (see module doc). Returns False where there is no glibc."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        ok = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1 and ok
    except (OSError, AttributeError):  # musl, macOS: no mallopt
        return False
    log.debug("glibc mallopt thresholds raised: %s", ok)
    return ok

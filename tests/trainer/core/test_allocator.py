"""glibc allocator tuning is applied on Linux/glibc (the CI and farm platform) and changes what malloc does."""

import json
import platform
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from trainer.core.allocator import MMAP_THRESHOLD_BYTES, tune_allocator

ON_GLIBC = platform.libc_ver()[0] == "glibc"

# Run in a fresh process: glibc's dynamic mmap threshold rises after a large mmapped block is freed,
# so a long-lived test process (torch loaded) may already serve big blocks from the heap.
# mallinfo2 (glibc >= 2.33): hblks = blocks served by mmap, arena = bytes of the main heap.
PROBE = r"""
import ctypes, ctypes.util, json
from trainer.core.allocator import tune_allocator

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]

def block(size):
    before = libc.mallinfo2().hblks
    p = libc.malloc(size)
    mmapped = libc.mallinfo2().hblks - before
    libc.free(p)
    return {"mmapped": mmapped, "heap_after_free": libc.mallinfo2().arena}

size = 48 << 20  # an activation-sized block: above glibc's largest dynamic threshold (32 MiB)
out = {"default": block(size), "tuned": tune_allocator()}
out["after"] = block(size)
print(json.dumps(out))
"""


@pytest.mark.skipif(not ON_GLIBC, reason="mallopt thresholds exist only in glibc")
def test_tuned_allocator_keeps_large_blocks_in_the_heap():
    """48 MiB: mmapped (and returned on free) by default; after tune_allocator, served from the heap
    (below the 64 MiB mmap threshold) and kept there after free (below the 128 MiB trim threshold)."""
    r = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["tuned"] is True
    assert out["default"]["mmapped"] == 1 and out["default"]["heap_after_free"] < 48 << 20
    assert out["after"]["mmapped"] == 0
    assert out["after"]["heap_after_free"] >= 48 << 20
    assert MMAP_THRESHOLD_BYTES > 48 << 20


def test_mallopt_reports_success_only_on_glibc():
    assert tune_allocator() is ON_GLIBC

"""glibc allocator tuning is applied on Linux/glibc (the CI and farm platform)."""

import platform

from trainer.tuning import tune_allocator


def test_mallopt_thresholds_are_accepted_on_glibc():
    libc, _ = platform.libc_ver()
    assert tune_allocator() is (libc == "glibc")

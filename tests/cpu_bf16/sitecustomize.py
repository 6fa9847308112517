"""Test hook: force what this CPU reports about fast bfloat16, so ``--precision auto`` resolves the other way.

``CUETRAIN_TEST_CPU_BF16=1`` makes ``torch.cpu._is_avx512_bf16_supported`` and ``_is_amx_tile_supported`` (what
``trainer.learn.precision.cpu_has_fast_bf16`` asks) return True, ``=0`` makes them return False; unset, nothing
changes. The product code is not edited: tests/conftest.py puts this folder first on the PYTHONPATH of every
trainer, frame and CLI process the tests start (``CHILD_PYTHONPATH``), where Python's ``site`` imports it at
start-up (https://docs.python.org/3/library/site.html), and calls :func:`install` in the pytest process.

It does not import torch (every child Python would pay for it): a meta path finder patches ``torch.cpu`` right
after the module is first imported, or at once when it already is.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType

VARIABLE = "CUETRAIN_TEST_CPU_BF16"
_CHECKS = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")


def forced() -> bool | None:
    """True/False when ``CUETRAIN_TEST_CPU_BF16`` forces the answer, None when unset.

    Raises:
        ValueError: the variable is set to something other than 0 or 1.
    """
    raw = os.environ.get(VARIABLE, "").strip()
    if raw not in ("", "0", "1"):
        raise ValueError(f"{VARIABLE}={raw!r} is not 0 or 1 (1: auto trains in bf16, 0: in fp32 on a CPU)")
    return None if raw == "" else raw == "1"


def _patch(module: ModuleType, value: bool) -> None:
    for name in _CHECKS:
        setattr(module, name, lambda: value)


class _Finder(importlib.abc.MetaPathFinder):
    """Patches ``torch.cpu`` once its module has run."""

    def __init__(self, value: bool) -> None:
        self.value = value

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001 - the importlib protocol
        if fullname != "torch.cpu":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        loader, value = spec.loader, self.value

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec):  # noqa: ANN001
                return loader.create_module(spec)

            def exec_module(self, module):  # noqa: ANN001
                loader.exec_module(module)
                _patch(module, value)

        spec.loader = _Loader()
        return spec


def install() -> None:
    """Apply ``CUETRAIN_TEST_CPU_BF16`` to this process (nothing when it is unset)."""
    value = forced()
    if value is None:
        return
    if "torch.cpu" in sys.modules:
        _patch(sys.modules["torch.cpu"], value)
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(value))


install()

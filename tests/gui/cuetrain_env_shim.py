"""CUETRAIN_PYTHON for the out-of-process GUI test: ``cuetrain`` as the cuetrain environment runs it, with one
test seam. The test suite runs as root and ``OpenCueFarm`` refuses root submission (RQD refuses uid-0 frames);
the farm tests pass ``allow_root=True``, and this shim does the same for the GUI's subprocesses.

Called as ``SHIM -m cuetrain ARGS...`` (what :func:`gui.farm_process.cuetrain_command` builds).
"""

from __future__ import annotations

import functools
import sys

if __name__ == "__main__":
    if sys.argv[1:3] != ["-m", "cuetrain"]:
        sys.exit(f"cuetrain_env_shim: expected '-m cuetrain ...', got {sys.argv[1:]}")
    from cue_plugin.submit import opencue_farm
    from cuetrain.cli import main

    opencue_farm.OpenCueFarm.__init__ = functools.partialmethod(opencue_farm.OpenCueFarm.__init__, allow_root=True)
    sys.exit(main(sys.argv[3:]))

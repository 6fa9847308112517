"""An inference frame on its render node (layer ``infer``, job spec from :mod:`cue_plugin.submit.infer`).

RQD runs ``python -u -m cue_plugin.infer_layer --model M --input IN --output OUT --first S --last E`` (that
entry module calls :func:`main`). The frame maps RQD's reservation to ``CUDA_VISIBLE_DEVICES``/``OMP_NUM_THREADS``
as training frames do, then becomes ``cuetrain infer`` (``trainer.export.infer.infer_sequence``).
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from cue_plugin.node.frame import device_env
from trainer.core.envvars import read_cue_env, read_farm_env


def main(argv: Sequence[str] | None = None) -> int:
    """Frame entry point: RQD's reservation -> ``CUDA_VISIBLE_DEVICES``/``OMP_NUM_THREADS``, then this process
    becomes ``python -u -m trainer.cli infer ARGS`` (``os.execve``: the same process for RQD, which tracks and
    kills it; the front door's parsing, errors and exit codes; and no import of ``trainer.cli`` from here, so
    the CLI has no import circle back into it).

    Raises:
        OSError: the interpreter cannot be executed (Python then exits 1 with the traceback).
    """
    env = {**os.environ, **device_env(read_cue_env(), read_farm_env().omp_num_threads)}  # before torch starts
    args = list(sys.argv[1:] if argv is None else argv)
    os.execve(sys.executable, [sys.executable, "-u", "-m", "trainer.cli", "infer", *args], env)
    return 1  # not reached: execve returns only by raising

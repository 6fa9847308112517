"""How many rank processes of a local run (``cuetrain local``) are alive on this machine.

A farm run's ranks are counted by the farm (``describe``); a local run has no farm, so the Runs panel
counts its rank processes itself: every process whose command line is a rank's, ``... -m trainer ...
--run-dir DIR`` (``trainer.agent.supervise.TRAINER_COMMAND``, what :mod:`trainer.agent.launch` starts per rank; also
``-m trainer.cli train`` of earlier versions), counts for ``DIR``. Linux only (``/proc``); elsewhere
nothing is counted and the panel shows ``-/N``. Pure Python: runs on the poll worker.
"""

from __future__ import annotations

import os
from collections import Counter

PROC = "/proc"


def _is_rank(argv: list[str]) -> bool:
    """True for a rank's command line: the module after the first ``-m`` is ``trainer`` (or ``trainer.cli``
    followed by ``train``)."""
    if "-m" not in argv:
        return False
    module = argv[argv.index("-m") + 1:][:2]
    return module[:1] == ["trainer"] or module == ["trainer.cli", "train"]


def _run_dir_of(argv: list[str], cwd: str) -> str | None:
    """The ``--run-dir`` of a rank's command line (absolute), else None."""
    if not _is_rank(argv):
        return None
    for i, arg in enumerate(argv):
        if arg == "--run-dir" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--run-dir="):
            value = arg.split("=", 1)[1]
        else:
            continue
        return os.path.normpath(os.path.join(cwd, os.path.expanduser(value)))
    return None


def count_local_ranks(proc_root: str = PROC) -> Counter[str] | None:
    """Live rank processes per run directory (absolute, normalised); None when ``proc_root`` is not there.

    Processes that vanish or cannot be read while scanning are skipped.
    """
    try:
        pids = [p for p in os.listdir(proc_root) if p.isdigit()]
    except OSError:
        return None
    counts: Counter[str] = Counter()
    for pid in pids:
        try:
            with open(os.path.join(proc_root, pid, "cmdline"), "rb") as f:
                argv = f.read().decode("utf-8", "replace").split("\0")
            if not _is_rank(argv):
                continue
            run_dir = _run_dir_of(argv, os.readlink(os.path.join(proc_root, pid, "cwd")))
        except OSError:
            continue
        if run_dir:
            counts[run_dir] += 1
    return counts

"""``python -m cue_plugin.frame``: the entry point of every training frame (code: :mod:`cue_plugin.node.frame`).

It stays at this path because the job XML of every submitted job names it (``-m cue_plugin.frame``,
written by :mod:`cue_plugin.submit.builder`), and so do the golden job specs in ``tests/cue_plugin/golden``:
a job submitted before a release must still start after it.
"""

from __future__ import annotations

import sys

from cue_plugin.node.frame import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())

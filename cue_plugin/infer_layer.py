"""``python -m cue_plugin.infer_layer``: the entry point of every inference frame (code:
:mod:`cue_plugin.node.infer_frame`; the layer's job spec: :mod:`cue_plugin.submit.infer`).

It stays at this path because the job XML of every submitted job with an ``infer`` layer names it
(``-m cue_plugin.infer_layer``), and so do the golden job specs in ``tests/cue_plugin/golden``: a job
submitted before a release must still start after it.
"""

from __future__ import annotations

import sys

from cue_plugin.node.infer_frame import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())

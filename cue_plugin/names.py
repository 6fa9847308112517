"""Names both sides of the farm agree on: the submitting client writes them into a job, the render node reads them.

The submit side (:mod:`cue_plugin.submit`) and the node side (:mod:`cue_plugin.node`) both import this
module and nothing of each other, so neither side pulls in the other's code. Standard library only;
no side effects at import.
"""

from __future__ import annotations

#: Layer of the training frames; with the job name it locates frame 0 in Cuebot (cuebot rendezvous) and it
#: is the layer frame 0 fails when its gang cannot form (``cue_plugin.node.layer_failure``).
TRAIN_LAYER = "train"
#: Layer of the inference frames (the depend and CueGUI show it; ``cue_plugin.submit.infer``).
INFER_LAYER = "infer"
#: How ranks find frame 0: ``file`` (the run directory) or ``cuebot`` (a pycue lookup of frame 0's host).
RENDEZVOUS_MODES = ("file", "cuebot")
#: Gang restarts the frames' node agents make per job before giving up (``--max-restarts``) [count].
DEFAULT_MAX_RESTARTS = 3
#: Seconds frame 0 waits for every frame before an elastic gang shrinks (``--elastic-window-s``) [s].
DEFAULT_ELASTIC_WINDOW_S = 120.0

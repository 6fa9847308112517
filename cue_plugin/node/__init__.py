"""What runs on a render node inside a frame: the node agent (``frame``, ``frame_member``, ``agent``), the
rendezvous, gang membership, the rank supervisor and the paced frame log.

Started by RQD through ``python -m cue_plugin.frame`` (training) or ``python -m cue_plugin.infer_layer``
(inference). Imports nothing of :mod:`cue_plugin.submit`.
"""

"""The headless trainer every farm frame runs (``python -m trainer TRAIN_ARGS``), in rooms.

Each room is a subpackage; a room imports only the rooms :data:`ROOMS` lists for it, so imports point
down and never across. ``tests/test_import_graph.py`` reads the import graph and holds every module to it.

==========  ==============================================================================================
room        what it holds
==========  ==============================================================================================
``core``    configuration, environment variables, exit codes, signals and timeouts, ports, addresses (stdlib)
``record``  the run directory and ``run.json``, shared by trainer, farm and GUI (stdlib)
``gang``    the gang: rendezvous, process group, the stop vote, gradient compression (torch.distributed)
``data``    frames in: image I/O, colour, the shot, the host's decoded copy, crops, the data phase
``export``  models out: TorchScript, ONNX, the libtorch operator floor, the Nuke script, inference
``learn``   the training loop: networks, optimizers, schedule, EMA, precision, noise scale, rank 0's writer
``agent``   supervising rank processes: the node agent, the rank supervisor, ``cuetrain local`` (no torch)
``advise``  ``cuetrain advise``: how many machines, from a measured probe and the scaling model
==========  ==============================================================================================

The modules at this level are entry points and may import any room: :mod:`trainer.cli` (the trainer's
commands: ``train``, ``local``, ``infer``, ``demo``, ``advise``), :mod:`trainer.__main__` (one rank) and
:mod:`trainer.demo`. ``trainer`` never imports ``cue_plugin``, ``gui`` or ``cuetrain``; the ``cuetrain``
console script (package ``cuetrain``) dispatches to all three. Importing ``trainer`` or a stdlib-only room
(``core``, ``record``, ``agent``) does not import torch, so the GUI and the farm can read them.
"""

#: room -> the rooms it may import (besides itself). Lower rooms first.
ROOMS: dict[str, tuple[str, ...]] = {
    "core": (),
    "record": ("core",),
    "gang": ("core", "record"),
    "data": ("core", "record", "gang"),
    "export": ("core", "record", "data"),
    "learn": ("core", "record", "gang", "data", "export"),
    "agent": ("core", "record"),
    "advise": ("core", "record", "gang", "data", "export", "learn"),
}

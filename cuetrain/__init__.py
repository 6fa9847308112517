"""The front door: the ``cuetrain`` console script, which dispatches to ``trainer``, ``cue_plugin`` and ``gui``.

Each of those packages runs in its own kind of process (a rank imports torch, the farm commands import
opencue, the window imports Qt); only this package knows all three, and it imports each one only for the
command that needs it (:mod:`cuetrain.cli`).
"""

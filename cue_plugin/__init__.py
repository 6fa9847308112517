"""cuetrain on OpenCue, one subpackage per process.

- :mod:`cue_plugin.submit`: the submitting client (``cuetrain submit|status|cancel|retry|submit-infer``, the GUI's
  farm backend): job specs, job XML, farm templates, the pycue backend.
- :mod:`cue_plugin.node`: what runs on a render node inside a frame: the node agent, rendezvous, the rank
  supervisor, the frame log.
- :mod:`cue_plugin.names`: the names both sides agree on (layer names, rendezvous modes, agent defaults).
- ``cue_plugin.frame`` and ``cue_plugin.infer_layer``: the frame entry points that job XMLs name.
"""

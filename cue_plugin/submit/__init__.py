"""The submitting client: job specs, the job XML, farm templates, the OpenCue backend and the farm commands.

Runs on an artist's workstation or in the GUI's child process; imports pycue and pyoutline only inside the
functions that talk to Cuebot or build a job. Imports nothing of :mod:`cue_plugin.node`.
"""

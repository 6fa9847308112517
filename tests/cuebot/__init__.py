"""A Python test double of Cuebot (OpenCue's scheduler) and a harness for real RQD processes.

    from tests.cuebot.double import CuebotDouble
    from tests.cuebot.rqd_harness import RqdProcess
    from tests.cuebot.fixtures import cuebot_farm, use_pycue

Modules: records (farm state and protobufs), jobspec (spec XML -> records), dispatcher (frames ->
RQD), job_servicers / farm_servicers (the gRPC services), double (CuebotDouble), rqd_harness
(RqdProcess), fixtures (pytest fixtures and pycue/pyoutline/CueGUI helpers).
"""

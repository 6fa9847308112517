"""The job specs cuetrain writes, checked by hand against what Cuebot accepts *unchanged*.

The golden files in ``golden/`` were first written by the code under test; this file is the
independent review. Checked against OpenCue's sources (AcademySoftwareFoundation/OpenCue, commit
1cea9a8 of 2026-08-12, and their history):

- Structure: ``cuebot_dtd/cjsl-1.15.dtd`` is Cuebot's ``public/dtd/cjsl-1.15.dtd`` copied verbatim
  (Apache-2.0, the spec pyoutline declares); every golden spec and every built-in template's spec
  must validate against it (element order, required attributes, NMTOKEN names).
- Memory (``JobSpec.determineMinimumMemory``; ``<memory>Nm</memory>`` is N x 1024 KB): the cap was
  ``Dispatcher.MEM_RESERVED_MAX`` = 30 GB until OpenCue #1381 (June 2024), where a larger request
  raised inside a try and the layer silently got ``MEM_RESERVED_DEFAULT`` (3.2 GB); since #1381 the
  cap is 50 GB (a property since #1570) and a larger request only logs "Setting memory ... to:
  <cap>", then the request is kept (the clamp is overwritten by ``layer.minimumMemory =
  minMemory``). So a request is taken as written by every Cuebot only at <= 30 GiB (30720 MiB):
  ``gpu-large`` asked 96 GiB and ``gpu-medium`` 48 GiB; both templates now ask 30 GiB. Below
  ``mem_reserved_min`` (256 MiB) Cuebot raises the request.
- Retries (``JobSpec.FRAME_RETRIES_MAX`` = 1, unchanged since 2018): ``maxretries`` above 1 is
  lowered to 1 without a word; the GPU templates asked 2 and now ask 1.
- Cores (``determineMinimumCores``): "16.0" -> 1600 core points; more than
  ``Dispatcher.CORE_POINTS_RESERVED_MAX`` (2400) is lowered since #1381, fewer than 10 becomes 100.
- GPU memory (``determineMinimumGpuMemory``): above ``mem_gpu_reserved_max`` (100 GiB) the layer
  silently gets the minimum (0).
- Tags: split on ``|``, each must match ``JobSpec.NAME_REGEX`` (word characters or ".", >= 3).
- Not checkable in a spec: a service name Cuebot does not know (``cuetrain``, ``cuetrain-gpu``) falls
  back to its ``default`` service (logged as a warning); the spec's cores, memory, GPUs and tags
  still apply, as they override the service's values. Farm admins create the two services.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from lxml import etree

from cue_plugin.submit import builder, templates
from tests.cue_plugin.conftest import make_config

HERE = Path(__file__).parent
GOLDEN = sorted((HERE / "golden").glob("*.xml"))
DTD = HERE / "cuebot_dtd" / "cjsl-1.15.dtd"

GB_KB = 1024 * 1024  # CueUtil.GB, in KB
MEM_RESERVED_MAX_ALL_VERSIONS_KB = 30 * GB_KB  # Dispatcher.MEM_RESERVED_MAX before #1381
MEM_RESERVED_MIN_KB = 262144
MEM_GPU_RESERVED_MAX_KB = 100 * GB_KB
FRAME_RETRIES_MIN, FRAME_RETRIES_MAX = 0, 1
CORE_POINTS_RESERVED_MIN, CORE_POINTS_RESERVED_MAX = 10, 2400
NAME_REGEX = re.compile(r"^(?:[\w.]){3,}$")


def memory_kb(text: str) -> int:
    """Cuebot's ``JobSpec.convertMemoryInput``: "Nm" -> N x 1024 KB, "Ng" or "N" -> N GB."""
    text = text.lower()
    if "m" in text:
        return int(float(text[:text.rindex("m")]) * 1024)
    return int(text.rstrip("g")) * GB_KB


def core_points(text: str) -> int:
    """Cuebot's ``determineMinimumCores`` before clamping: "1.5" cores -> 150 points, "150" -> 150."""
    return int(float(text) * 100 + .5) if "." in text else int(text)


def template_specs() -> list[tuple[str, str]]:
    out = []
    for name in templates.list_templates():
        job = templates.make_job(make_config(batch_size=64), template=name, show="demo", shot="sh010", user="artist")
        out.append((f"template {name}", builder.dry_run(job, python="/opt/cuetrain/bin/python", token="0" * 32)))
    return out


def all_specs() -> list[tuple[str, str]]:
    return [(f"golden {p.name}", p.read_text()) for p in GOLDEN] + template_specs()


def test_there_are_golden_specs_to_review():
    assert {p.name for p in GOLDEN} >= {"cpu_test.xml", "gpu_large_awkward.xml"}


@pytest.mark.parametrize("what,spec", [pytest.param(w, s, id=w) for w, s in all_specs()])
def test_spec_is_valid_cjsl_and_within_cuebots_limits(what, spec):
    dtd = etree.DTD(str(DTD))
    root = etree.fromstring(spec.encode(), etree.XMLParser(load_dtd=False, no_network=True, resolve_entities=False))
    assert dtd.validate(root), f"{what}: {dtd.error_log.filter_from_errors()}"
    assert root.getroottree().docinfo.system_url.endswith("/cjsl-1.15.dtd")

    job = root.find("job")
    retries = int(job.findtext("maxretries"))
    assert FRAME_RETRIES_MIN <= retries <= FRAME_RETRIES_MAX, f"{what}: Cuebot lowers maxretries {retries} to 1"
    for layer in job.iter("layer"):
        memory = memory_kb(layer.findtext("memory"))
        assert MEM_RESERVED_MIN_KB <= memory <= MEM_RESERVED_MAX_ALL_VERSIONS_KB, \
            f"{what}: memory {layer.findtext('memory')} = {memory} KB is outside what every Cuebot keeps"
        assert CORE_POINTS_RESERVED_MIN <= core_points(layer.findtext("cores")) <= CORE_POINTS_RESERVED_MAX, what
        if layer.find("gpu_memory") is not None:
            assert memory_kb(layer.findtext("gpu_memory")) <= MEM_GPU_RESERVED_MAX_KB, what
            assert int(layer.findtext("gpus")) >= 1, f"{what}: GPU memory without a GPU"
        tags = (layer.findtext("tags") or "").replace(" ", "").split("|")
        assert all(NAME_REGEX.match(t) for t in tags if t), f"{what}: tags {tags}"
        assert layer.get("type") == "Render"
        if layer.get("name") == "train":
            assert layer.findtext("chunk") == "1"  # one frame = L ranks, never a chunk of frames
        else:  # the infer layer (cue_plugin.submit.infer): chunks of the shot's frames per farm frame
            assert layer.get("name") == "infer" and int(layer.findtext("chunk")) >= 1
        assert NAME_REGEX.match(job.get("name")) and NAME_REGEX.match(layer.get("name")), what


def test_a_spec_breaking_the_dtd_is_caught():
    """The DTD check is live: a layer without its required <range>, or with <chunk> before it, fails."""
    spec = (HERE / "golden" / "cpu_test.xml").read_text()
    in_order = "<range>0-1</range>\n        <chunk>1</chunk>"
    assert in_order in spec
    parser = etree.XMLParser(load_dtd=False, no_network=True)
    dtd = etree.DTD(str(DTD))
    assert dtd.validate(etree.fromstring(spec.encode(), parser))
    for bad in (spec.replace(in_order, "<chunk>1</chunk>"),
                spec.replace(in_order, "<chunk>1</chunk>\n        <range>0-1</range>")):
        assert not dtd.validate(etree.fromstring(bad.encode(), parser))

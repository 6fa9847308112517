"""trainer.record.netcheck: the one network-compatibility check (--init-from, --resume, the GUI's Start from)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import CHILD_PYTHONPATH
from trainer.record.netcheck import Mismatch, network_mismatches, network_of, run_network


def test_network_of_fills_what_older_metadata_leaves_out():
    assert network_of({"model_size": "small", "step": 7}) == {"architecture": "v1", "model_size": "small", "scale": 1,
                                                             "channels": 3, "target_channels": 3, "step": 7}
    ckpt_like = {"model_size": "large", "architecture": "v2", "config": {"scale": 4}, "model_config": {"channels": 1}}
    assert network_of(ckpt_like)["scale"] == 4 and network_of(ckpt_like)["channels"] == 1
    assert network_of(ckpt_like)["target_channels"] == 1  # out_channels 0 or absent: as many as it reads
    matte_ckpt = {"model_config": {"channels": 4, "out_channels": 1}}
    assert (network_of(matte_ckpt)["channels"], network_of(matte_ckpt)["target_channels"]) == (4, 1)
    model_json = {"channels": 3, "channels_in": ["R", "G", "B"], "channels_out": ["R", "G", "B", "A"]}
    assert (network_of(model_json)["channels"], network_of(model_json)["target_channels"]) == (3, 4)
    assert set(network_of(None).values()) == {None}  # no metadata: nothing compared, the shapes decide


def test_mismatches_name_each_difference_and_skip_unknowns():
    there = {"architecture": "v1", "model_size": "small", "scale": 1, "channels": 3}
    assert list(map(str, network_mismatches(there, run_network("v3", "small", 2)))) == [
        "architecture v1 there, v3 here", "scale 1 there, 2 here"]
    assert network_mismatches({**there, "model_size": None}, run_network("v1", "large", 1)) == []
    assert network_mismatches(there, run_network(None, None, None, None)) == []  # nothing known here


def test_a_removed_architecture_never_fits_and_says_what_to_do():
    found = network_mismatches(network_of({"architecture": "v2", "model_size": "small"}),
                               run_network(None, "small", 1))  # even where the run's architecture is unknown
    assert found == [Mismatch("architecture", "v2", None)] and found[0].removed
    assert "v2 (the space-to-depth stem" in str(found[0]) and "--architecture v3" in str(found[0])
    assert not Mismatch("architecture", "v1", "v3").removed


def test_netcheck_imports_no_torch():
    code = "import sys, trainer.record.netcheck\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH})
    assert out.stdout.strip() == "False"

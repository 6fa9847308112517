"""model_nuke.nk (trainer.export.nuke_script): parsed back with a small TCL-ish tokenizer, node by node and knob by knob."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer.learn.model import CopyCatUNetV1, ModelConfigV1
from trainer.export.nuke_script import NUKE_SCRIPT_NAME, nk_quote, nuke_script
from trainer.learn.run_writer import export_model
from trainer.record.rundir import RunPaths

RGB = "rgba.red, rgba.green, rgba.blue"


def tokens(text: str) -> list[str]:
    """Split .nk text as TCL does: words by whitespace, "..." with backslash escapes, { and } as tokens."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "#" and (not out or text[i - 1] == "\n"):
            i = text.find("\n", i) if "\n" in text[i:] else len(text)
        elif c.isspace():
            i += 1
        elif c in "{}":
            out.append(c)
            i += 1
        elif c == '"':
            word, i = [], i + 1
            while text[i] != '"':
                if text[i] == "\\":
                    i += 1
                word.append(text[i])
                i += 1
            out.append("".join(word))
            i += 1
        else:
            j = i
            while j < len(text) and not text[j].isspace() and text[j] not in "{}":
                j += 1
            out.append(text[i:j])
            i = j
    return out


def parse_nodes(text: str) -> list[tuple[str, dict[str, str]]]:
    """``Class { knob value ... }`` blocks in file order, as (class, {knob: value})."""
    toks, nodes, i = tokens(text), [], 0
    while i < len(toks):
        cls, brace = toks[i], toks[i + 1]
        if brace != "{":
            raise ValueError(f"expected '{{' after {cls!r}, got {brace!r}")
        knobs, i = {}, i + 2
        while toks[i] != "}":
            knobs[toks[i]] = toks[i + 1]
            i += 2
        nodes.append((cls, knobs))
        i += 1
    return nodes


def test_nuke_script_fills_catfilecreator_and_inference_for_a_run_dir_with_spaces(tmp_path):
    run = tmp_path / "shot 010 [v2] $x"
    pt = run / "model.pt"
    nodes = parse_nodes(nuke_script(pt, run.name))
    assert [cls for cls, _ in nodes] == ["CatFileCreator", "Inference"]
    creator, inference = nodes[0][1], nodes[1][1]
    cat = (run / "model.cat").as_posix()
    assert {k: creator[k] for k in ("torchScriptFile", "catFile", "channelsIn", "channelsOut", "modelId",
                                     "outputScale", "inputs")} == {
        "torchScriptFile": pt.as_posix(), "catFile": cat, "channelsIn": RGB, "channelsOut": RGB,
        "modelId": "shot 010 [v2] $x", "outputScale": "1", "inputs": "0"}
    assert inference["modelFile"] == cat
    assert "inputs" not in inference  # default one input: the node above it on the stack (the CatFileCreator)


def test_nk_quote_escapes_tcl_specials_and_leaves_plain_values_bare():
    assert nk_quote("/show/a_b/model.pt") == "/show/a_b/model.pt"
    assert nk_quote("a b") == '"a b"'
    assert nk_quote('x"$[y]\\') == '"x\\"\\$\\[y\\]\\\\"'
    assert nk_quote("") == '""'
    with pytest.raises(ValueError, match="model_id"):
        nuke_script(Path("/x/model.pt"), "")


def test_export_model_writes_model_nuke_nk_beside_model_pt(tmp_path):
    paths = RunPaths.of(tmp_path / "my run")
    paths.create()
    net = CopyCatUNetV1(ModelConfigV1(base_channels=4, depth=1, blocks=1))
    export_model(paths, net, {"step": 0}, onnx=False)
    nk = paths.root / NUKE_SCRIPT_NAME
    assert nk == paths.model_nuke and nk.is_file() and paths.model.is_file()
    creator = dict(parse_nodes(nk.read_text()))["CatFileCreator"]
    assert creator["torchScriptFile"] == paths.model.absolute().as_posix()
    assert creator["modelId"] == "my run"
    assert not list(paths.root.glob("*.tmp*"))  # atomic write leaves no temp file


@pytest.mark.parametrize("scale", [1, 2, 4])
def test_output_scale_is_the_runs_upres_factor(scale):
    creator = dict(parse_nodes(nuke_script(Path("/show/run/model.pt"), "run", scale)))["CatFileCreator"]
    assert creator["outputScale"] == str(scale)


@pytest.mark.parametrize("scale", [0, 3, 8, True, 2.0])
def test_a_scale_nuke_does_not_get_from_cuetrain_is_refused(scale):
    with pytest.raises(ValueError, match="is not one of 1, 2, 4"):
        nuke_script(Path("/x/model.pt"), "run", scale)


def test_export_model_of_an_upres_run_records_the_scale(tmp_path):
    import json

    from trainer.learn.model import build_model

    paths = RunPaths.of(tmp_path / "up")
    paths.create()
    export_model(paths, build_model("small", "v3", scale=2), {"step": 0, "scale": 2}, onnx=False)
    meta = json.loads(paths.model_meta.read_text())
    assert meta["scale"] == 2 and meta["exports"]["model.pt"]["output"]["shape"] == [1, 3, "2*H", "2*W"]
    assert dict(parse_nodes(paths.model_nuke.read_text()))["CatFileCreator"]["outputScale"] == "2"
    net = CopyCatUNetV1(ModelConfigV1(base_channels=4, depth=1, blocks=1))
    export_model(paths, net, {"step": 0}, onnx=False)  # a meta without "scale": a same-size model
    assert json.loads(paths.model_meta.read_text())["scale"] == 1
    assert dict(parse_nodes(paths.model_nuke.read_text()))["CatFileCreator"]["outputScale"] == "1"

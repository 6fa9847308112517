"""``model_nuke.nk``: a Nuke script that turns a run's ``model.pt`` into a ``.cat`` and runs it.

Rank 0 writes it beside ``model.pt`` at export (``trainer.learn.run_writer.export_model``, atomically). Opened
in NukeX, it holds two nodes:

- a ``CatFileCreator`` filled in for ``model.pt``: ``torchScriptFile`` (the TorchScript file),
  ``catFile`` (``model.cat`` beside it), ``channelsIn``/``channelsOut`` (the model's Input and output
  channels, ``model.json`` ``channels_in``/``channels_out``, in the order of its (1, C, H, W) contract,
  ``trainer.export.formats``, as Nuke names them, :func:`nuke_channel`: ``rgba.red, rgba.green, rgba.blue``
  for a colour model, ``rgba.alpha`` for a matte, ``matte.alpha`` for an EXR layer's ``matte.A``),
  ``modelId`` (the run's name) and ``outputScale``, the run's upres factor (``model.json`` ``scale``, ``TrainConfig.scale``): 1 when
  the model returns the input's resolution, 2 or 4 when it returns frames that many times wider and taller
  (the guide's "Output Scale": the ratio of the output's resolution to the input's). Pressing its
  "Create .cat file and Inference" button writes ``model.cat``;
- an ``Inference`` node, fed by the CatFileCreator, whose ``modelFile`` reads that ``.cat``.

Sources: Foundry's .cat File Creation Reference Guide, "A Simple Example" (the CatFileCreator knobs
TorchScript File, Cat File, Channels In, Channels Out, Model Id, Output Scale and the Inference
node's Model File) and its Appendix (the channel names ``rgba.red``, ``rgba.green``, ``rgba.blue``,
``rgba.alpha``, and other layers' channels as ``layer.channel``):
https://learn.foundry.com/nuke/developers/15.0/catfilecreationreferenceguide/ and
https://learn.foundry.com/nuke/developers/14.0/catfilecreationreferenceguide/appendix.html . The
knobs' script names (``torchScriptFile``, ``catFile``, ``channelsIn``, ``channelsOut``, ``modelId``,
``modelFile``) are those Nuke 14.0v5 saved in a public .nk (``pedroCabrera/CatteryNodes``,
``CatFileCreators.nk``); ``outputScale`` is the script name public Nuke Python scripts set and then
press ``createCatFile`` with (``cat_file_creator['outputScale'].setValue(...)``, the same repository's
``*/…NukeCatCreator.py`` for five models); a .nk saves it only when it is not its default, 1. Not checked
in a running Nuke here (no Nuke on this machine).

.nk syntax: a node is ``Class {`` + one ``knob value`` per line + ``}``; a value with spaces or
TCL specials is double-quoted, with ``\\``, ``"``, ``$``, ``[`` and ``]`` backslash-escaped (Nuke's
files are TCL: ``$`` and ``[`` would otherwise substitute). Paths use forward slashes on every OS.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from trainer.core.channels import RGB
from trainer.core.config import SCALES

#: File name of the script inside a run directory (the Runs panel lists it beside model.pt).
NUKE_SCRIPT_NAME = "model_nuke.nk"
#: Channels a colour model reads and writes: its (1, 3, H, W) RGB contract (trainer.export.formats).
RGB_CHANNELS = "rgba.red, rgba.green, rgba.blue"
#: A file's channel name (the last part of ``layer.X``) -> Nuke's channel name (the guide's Appendix).
NUKE_CHANNEL_NAMES = {"R": "red", "G": "green", "B": "blue", "A": "alpha"}
_PLAIN = re.compile(r"^[A-Za-z0-9_./:+-]+$")


def nk_quote(value: str) -> str:
    """``value`` as a .nk knob value: bare when it is plain, else TCL double-quoted and escaped."""
    if value and _PLAIN.match(value):
        return value
    escaped = re.sub(r'([\\"$\[\]])', r"\\\1", value)
    return f'"{escaped}"'


def nuke_channel(name: str) -> str:
    """A file's channel name as Nuke names it (module doc): ``R`` -> ``rgba.red``, ``G`` -> ``rgba.green``,
    ``B`` -> ``rgba.blue``, ``A`` -> ``rgba.alpha``; an EXR layer's ``layer.R`` ... ``layer.A`` -> ``layer.red``
    ... ``layer.alpha``; anything else (``layer.Z``, ``depth.Z``, a bare ``Y``) as it is."""
    layer, _, last = name.rpartition(".")
    if last not in NUKE_CHANNEL_NAMES:
        return name
    return f"{layer or 'rgba'}.{NUKE_CHANNEL_NAMES[last]}"


def nuke_channels(names: Sequence[str]) -> str:
    """A ``channelsIn``/``channelsOut`` value: :func:`nuke_channel` of each name, ``", "``-separated, in order."""
    return ", ".join(nuke_channel(n) for n in names)


def nuke_script(model_pt: Path, model_id: str, scale: int = 1, channels_in: Sequence[str] = RGB,
                channels_out: Sequence[str] = RGB) -> str:
    """The text of ``model_nuke.nk`` for the TorchScript file ``model_pt`` (absolute path taken).

    The ``.cat`` goes beside it as ``<stem>.cat``. ``model_id`` is shown by Nuke as the model's id
    (the run's name); ``scale`` is the model's upres factor, written as ``outputScale``; ``channels_in`` and
    ``channels_out`` are the model's channel names as the files name them (``model.json`` ``channels_in`` /
    ``channels_out``; R, G, B by default), written as Nuke names them (:func:`nuke_channel`).

    Raises:
        ValueError: ``model_id`` is empty, ``scale`` is not one of :data:`trainer.core.config.SCALES`, or a
            channel list is empty.
    """
    if not model_id:
        raise ValueError("model_id is empty; pass the run's name (the run directory's name)")
    if isinstance(scale, bool) or not isinstance(scale, int) or scale not in SCALES:
        raise ValueError(f"scale={scale!r} is not one of {', '.join(map(str, SCALES))}; pass the run's --scale "
                         "(model.json 'scale')")
    if not channels_in or not channels_out:
        raise ValueError(f"channels_in={tuple(channels_in)!r}, channels_out={tuple(channels_out)!r}: the model's "
                         "channel names are needed (model.json channels_in/channels_out; R, G, B for colour)")
    pt = Path(model_pt).absolute()
    cat = pt.with_suffix(".cat")
    knobs_creator = [("inputs", "0"), ("torchScriptFile", pt.as_posix()), ("catFile", cat.as_posix()),
                     ("channelsIn", nuke_channels(channels_in)), ("channelsOut", nuke_channels(channels_out)),
                     ("modelId", model_id),
                     ("outputScale", str(scale)), ("name", "CatFileCreator_cuetrain"), ("xpos", "0"), ("ypos", "-60")]
    knobs_inference = [("modelFile", cat.as_posix()), ("name", "Inference_cuetrain"), ("xpos", "0"),
                       ("ypos", "0")]
    lines = ["# written by cuetrain (trainer.export.nuke_script): press 'Create .cat file and Inference' on",
             "# CatFileCreator_cuetrain in NukeX to write the .cat the Inference node reads."]
    for cls, knobs in (("CatFileCreator", knobs_creator), ("Inference", knobs_inference)):
        lines.append(f"{cls} {{")
        lines.extend(f" {name} {nk_quote(value)}" for name, value in knobs)
        lines.append("}")
    return "\n".join(lines) + "\n"

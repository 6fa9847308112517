"""The model files a run leaves for the hosts: ``model.pt`` (TorchScript) and ``model.onnx``.

**The TorchScript contract** (``model.pt``, what Nuke's CatFileCreator and ``cuetrain infer`` load)::

    forward(x: Tensor) -> Tensor
    x: (1, Cin, H, W) float32, any H >= 1 and W >= 1, the Input channels ``model.json`` ``channels_in`` names
       in that order (R, G, B for a colour model), values in the model's working space (``model.json``
       ``colour``; scene-linear or 0..1 display values as the training data held them)
    returns: (1, Cout, sH, sW) float32, the channels ``model.json`` ``channels_out`` names in that order (R, G,
             B for a colour model; A for a matte: 0..1; R, G, B, A for colour + alpha); colour in the same
             space; s is the model's upres factor (``model.json`` ``scale``: 1 = the input's size, 2 or 4 =
             upres, ``trainer.learn.model``)

A colour model (the RGB default) has Cin = Cout = 3; a matte model Cin = 3 and Cout = 1
(``trainer.core.channels.ChannelPlan``).

The file is a CPU, eval-mode ``torch.jit.script`` module. Loading it needs only ``torch``
(``torch.jit.load``): no cuetrain, numpy or OpenImageIO (tests/trainer/export/test_export.py loads it in
an isolated interpreter that has nothing else on its path). A batch larger than 1 works too.

**The ONNX file** (``model.onnx``, for Houdini's ONNX Inference SOP/COP and other ONNX Runtime
hosts): opset :data:`ONNX_OPSET`, one input ``x`` of shape ``(1, Cin, H, W)`` and one output ``y`` of
shape ``(1, Cout, sH, sW)`` (channels as for model.pt; the input's shape at scale 1 for a colour model), float32, with ``H`` and ``W`` dynamic (named ``H``
and ``W`` in the graph; the output's dimensions ``H`` and ``W``, or ``2*H`` and ``2*W`` at scale 2). It is
made with ``torch.onnx.export(..., dynamo=True)``, torch's supported exporter since 2.9, which
needs the ``onnxscript`` package (the ``onnx`` extra of cuetrain). The legacy TorchScript-based
exporter (``dynamo=False``) needs no onnxscript but is deprecated, and tracing records the model's
pad-to-a-multiple-of-``2**depth`` branch as a constant, so it is not used. Opset 18 is the lowest
the exporter emits natively (asking for 17 makes it try a down-conversion that fails for ``Pad``);
ONNX Runtime 1.14+ runs opset 18. Every node is in the default ONNX domain (no ``com.microsoft``
or custom ops; tested), and ``model.json`` records the opset as ``onnx_opset``.

Which ONNX Runtime Houdini 20.0 / 20.5 ship (for their ONNX Inference SOP/COP) was **not found**
in a stored source (SideFX's node pages sop/onnx.html and cop/onnx.html name no version; the 20.5
third-party licence page's table was not retrievable). Opset 18 is kept as the conservative choice: it is
the lowest this exporter writes, so no lower opset is available to pick. See docs/hosts.md, "Houdini: the
ONNX Inference nodes".

Exporting to ONNX takes 5-15 s on a 2-core CPU (small model), so it can be turned off
(``CUETRAIN_EXPORT_ONNX=0``, see ``trainer.core.envvars``); ``model.json`` ``exports`` says which files were
written. ``cuetrain local`` and ``cuetrain demo`` write it after the run, in a process of their own
(:mod:`trainer.export.deferred`); ``model.json`` ``exports_pending`` lists it meanwhile.
"""

from __future__ import annotations

import copy
import io
import logging
import re
import warnings
from typing import Any

import torch

from trainer.core.channels import ChannelPlan

log = logging.getLogger(__name__)

#: ONNX opset of ``model.onnx`` (>= 17 as Houdini's ONNX Inference node needs; 18: see module docstring).
ONNX_OPSET = 18
#: Example input size the exporter traces with; not a multiple of 4 so the padding path is recorded.
_EXAMPLE_HW = (37, 50)


class ExportError(RuntimeError):
    """A model could not be exported; the message says which file and why."""


def torchscript_bytes(model: torch.nn.Module) -> bytes:
    """``model`` (any device) as a TorchScript file's bytes: CPU, eval mode, contract above.

    Raises:
        ExportError: ``torch.jit.script`` refused the model.
    """
    net = copy.deepcopy(model).cpu().eval()
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings():  # torch 2.10+ deprecates TorchScript; the hosts still load it
            warnings.simplefilter("ignore", DeprecationWarning)
            torch.jit.save(torch.jit.script(net), buf)
    except Exception as exc:  # torch.jit raises many types for unscriptable code
        raise ExportError(f"cannot script the model for model.pt: {exc}") from exc
    return buf.getvalue()


def onnx_available() -> str | None:
    """None when ONNX export can run here, else the reason (a missing package and how to install it)."""
    import importlib.util

    missing = [name for name in ("onnx", "onnxscript") if importlib.util.find_spec(name) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (pip install 'cuetrain[onnx]')"
    return None


def onnx_bytes(model: torch.nn.Module, channels_in: int | None = None) -> bytes:
    """``model`` as an ONNX file's bytes: input ``x`` (1, Cin, H, W) float32 -> output ``y`` (1, Cout, sH, sW), H
    and W dynamic (s: the model's upres factor). ``channels_in`` is Cin (None: the network's ``in_channels``,
    else 3).

    Raises:
        ExportError: onnx/onnxscript are missing, or torch.onnx could not export the model.
    """
    reason = onnx_available()
    if reason:
        raise ExportError(f"cannot write model.onnx: {reason}")
    net = copy.deepcopy(model).cpu().eval()
    cin = channels_in if channels_in is not None else int(getattr(model, "in_channels", 3))
    example = torch.rand(1, cin, *_EXAMPLE_HW)
    with torch.no_grad():
        scale = int(net(example).shape[-2]) // _EXAMPLE_HW[0]  # the upres factor, for the output's dim names
    dynamic = torch.export.Dim.DYNAMIC
    _quiet_exporter_logs()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # FutureWarnings from torch.export internals
            program = torch.onnx.export(net, (example,), None, input_names=["x"], output_names=["y"],
                                        opset_version=ONNX_OPSET, dynamic_shapes={"x": {2: dynamic, 3: dynamic}},
                                        dynamo=True, verbose=False, report=False)
    except Exception as exc:  # torch.export/onnxscript raise many types
        raise ExportError(f"cannot export the model to ONNX: {type(exc).__name__}: {exc}") from exc
    proto = program.model_proto
    _name_dynamic_dims(proto, scale)
    return proto.SerializeToString()


def _name_dynamic_dims(proto: Any, scale: int = 1) -> None:
    """Rename the exporter's symbolic sizes (``s0``, ``s53``) of input ``x`` to ``H`` and ``W`` everywhere,
    inside expressions too (an upres model's output ``2*s53`` becomes ``2*H``); the output ``y``'s height and
    width are then named as the contract says (:func:`output_shape`): a network whose output adds nothing of the
    input's size (a matte) leaves the exporter an equal but longer expression, ``Min(H, 4*((H + ...)//4))``."""
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    rename = {name: new for name, new in ((dims[2].dim_param, "H"), (dims[3].dim_param, "W")) if name}
    if not rename:
        return
    symbol = re.compile("|".join(rf"\b{re.escape(name)}\b" for name in rename))
    for info in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        for dim in info.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_param = symbol.sub(lambda match: rename[match.group(0)], dim.dim_param)
    out_dims = proto.graph.output[0].type.tensor_type.shape.dim
    for dim, name in zip(out_dims[2:], output_shape(scale)[2:]):
        if dim.dim_param:
            dim.dim_param = str(name)


def _quiet_exporter_logs() -> None:
    """torch.onnx logs a progress line per stage and a warning per missing torchvision op; keep them at DEBUG."""
    for name in ("torch.onnx", "torch.onnx._internal.exporter._registration", "onnxscript"):
        logging.getLogger(name).setLevel(logging.ERROR)


def output_shape(scale: int = 1, channels: int = 3) -> list[int | str]:
    """The output shape a model of upres ``scale`` and ``channels`` (Cout) output channels records:
    ``[1, 3, "H", "W"]``, or ``[1, 3, "2*H", "2*W"]`` (``[1, 1, ...]`` for a matte)."""
    return [1, channels, "H", "W"] if scale == 1 else [1, channels, f"{scale}*H", f"{scale}*W"]


def _tensors(scale: int, plan: ChannelPlan | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The input and output entries of a description: shape, dtype and the channel names in order."""
    plan = plan or ChannelPlan()
    return ({"shape": [1, len(plan.inputs), "H", "W"], "dtype": "float32", "channels": list(plan.inputs)},
            {"shape": output_shape(scale, len(plan.targets)), "dtype": "float32", "channels": list(plan.targets)})


def onnx_description(scale: int = 1, channels: ChannelPlan | None = None) -> dict[str, Any]:
    """What ``model.json`` ``exports["model.onnx"]`` records for a model of upres ``scale`` and channel plan
    ``channels`` (None: RGB in and out): opset, and input ``x`` / output ``y`` with shape, dtype and channels."""
    inp, out = _tensors(scale, channels)
    return {"opset": ONNX_OPSET, "input": {"name": "x", **inp}, "output": {"name": "y", **out}}


def torchscript_description(scale: int = 1, channels: ChannelPlan | None = None) -> dict[str, Any]:
    """What ``model.json`` ``exports["model.pt"]`` records (the contract in the module docstring) for a model of
    upres ``scale`` and channel plan ``channels`` (None: RGB in and out)."""
    from trainer.export.compat import MIN_LIBTORCH

    inp, out = _tensors(scale, channels)
    return {"format": "torchscript", "signature": "forward(x: Tensor) -> Tensor", "min_libtorch": MIN_LIBTORCH,
            "input": inp, "output": out}

"""Which network a recorded model is, and whether it fits a run's: the one compatibility check (stdlib only).

A checkpoint dict, a ``model.json`` and a run's settings each describe a network by five values: architecture,
model size, scale, Input channel count and target channel count (:func:`network_of`). Weights fit a run's network
only when all five agree, so every place that asks "can these weights start or continue this run?" compares them
here (:func:`network_mismatches`): ``--init-from`` on submit and at start (``trainer.record.initsource``,
``trainer.learn.init_from``), ``--resume`` (``trainer.learn.run_writer.check_run_checkpoint``) and the GUI's
Start-from choice (``gui.head_start.start_mismatch``, which must not import torch). Each caller words the result for its
reader; what a resume needs beyond the network (the same channel *names*, the same optimizer) stays with it.

An architecture the trainer no longer builds (:data:`REMOVED_ARCHITECTURES`) never fits: its mismatch says so and
what to do, instead of asking for an ``--architecture`` that does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

#: Metadata a model.json or checkpoint that has it but omits a key means (older cuetrain): architecture v1
#: (checkpoints written before architectures were named), scale 1 (same size), channels 3 (RGB); target channels as
#: many as the Input's (every network before channels were named returned what it read).
META_DEFAULTS: dict[str, Any] = {"architecture": "v1", "scale": 1, "channels": 3}
#: Architecture -> why the trainer no longer builds it and what to do with a run of it (issue 49).
REMOVED_ARCHITECTURES: dict[str, str] = {
    "v2": ("v2 (the space-to-depth stem of the time-to-quality study, never a default) is no longer trained; its "
           "model.pt still runs (cuetrain infer, Nuke): train a new run with --architecture v3 (or leave "
           "--architecture out) instead of continuing or starting from it"),
}
#: The compared values: key in :func:`network_of`'s dict -> how a message names it.
COMPARED: dict[str, str] = {"architecture": "architecture", "model_size": "model size", "scale": "scale",
                            "channels": "channels", "target_channels": "target channels"}


@dataclass(frozen=True)
class Mismatch:
    """One way two networks differ: ``key`` (a :data:`COMPARED` key), the recorded value ``there`` and the run's
    value ``here``. ``str()`` is ``"scale 1 there, 2 here"``; for a removed architecture, the reason and fix."""

    key: str
    there: Any
    here: Any

    @property
    def removed(self) -> bool:
        """True when ``there`` is an architecture the trainer no longer builds (:data:`REMOVED_ARCHITECTURES`)."""
        return self.key == "architecture" and self.there in REMOVED_ARCHITECTURES

    def __str__(self) -> str:
        if self.removed:
            return f"architecture {REMOVED_ARCHITECTURES[self.there]}"
        return f"{COMPARED[self.key]} {self.there} there, {self.here} here"


def network_of(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """The network a model's metadata (a ``model.json`` or a checkpoint dict) describes: ``architecture``,
    ``model_size``, ``scale``, ``channels`` (Input channels), ``target_channels`` (output channels) and ``step``; a
    key the metadata lacks takes :data:`META_DEFAULTS` (``model_size`` and ``step`` None; ``target_channels`` as many
    as ``channels``). No metadata at all (None): every value None (unknown).

    Scale is read from ``scale``, else the recorded ``config``'s; channels from ``channels`` (model.json: the Input
    channel count or a ``ChannelPlan.to_dict()``), else ``model_config``'s; target channels from ``channels_out``
    (model.json: their names), else ``model_config``'s ``out_channels`` (0: as many as ``channels``).
    """
    if meta is None:
        return {"architecture": None, "model_size": None, "scale": None, "channels": None, "target_channels": None,
                "step": None}
    config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
    model_config = meta.get("model_config") if isinstance(meta.get("model_config"), dict) else {}
    recorded = meta.get("channels")
    if isinstance(recorded, dict):  # a ChannelPlan.to_dict() ({"in": [...], "out": [...]}), as model.json holds it
        recorded = len(recorded.get("in") or ()) or None
    channels = _as_int(recorded or model_config.get("channels") or META_DEFAULTS["channels"])
    names_out = meta.get("channels_out")
    out = len(names_out) if isinstance(names_out, list) and names_out else model_config.get("out_channels") or channels
    return {"architecture": meta.get("architecture") or META_DEFAULTS["architecture"],
            "model_size": meta.get("model_size"),
            "scale": _as_int(meta.get("scale") or config.get("scale") or META_DEFAULTS["scale"]),
            "channels": channels, "target_channels": _as_int(out), "step": meta.get("step")}


def _as_int(value: Any) -> Any:
    """``value`` as an int when it is one (``2``, ``"2"``), else as recorded (a mismatch then shows it)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def run_network(architecture: str | None, model_size: str | None, scale: int | None, channels: int | None = 3,
                target_channels: int | None = None) -> dict[str, Any]:
    """A run's network in :func:`network_of`'s form. ``channels``, ``target_channels``: its Input and output channel
    counts (``len(TrainConfig.channels.inputs)``, ``len(...targets)``; ``target_channels`` None: as many as
    ``channels``) [channels]; a None value is unknown and not compared."""
    return {"architecture": architecture, "model_size": model_size, "scale": scale, "channels": channels,
            "target_channels": channels if target_channels is None else target_channels}


def network_mismatches(there: Mapping[str, Any], here: Mapping[str, Any]) -> list[Mismatch]:
    """Each way the recorded network ``there`` (:func:`network_of`) differs from the run's ``here``
    (:func:`run_network`), in :data:`COMPARED` order; a value either side does not know (None, absent) is not
    compared (the weights' shapes decide), except a removed architecture there, which never fits."""
    found = []
    for key in COMPARED:
        a, b = there.get(key), here.get(key)
        if key == "architecture" and a in REMOVED_ARCHITECTURES:
            found.append(Mismatch(key, a, b))
        elif a is not None and b is not None and a != b:
            found.append(Mismatch(key, a, b))
    return found

"""Which channels a run learns from and learns to make: ``--input-channels`` and ``--target-channels``.

Channel names are the files' own (OpenImageIO's ``ImageSpec.channelnames``): ``R``, ``G``, ``B``, ``A`` in PNG,
TIFF and EXR, and ``layer.R`` ... ``layer.A`` for an EXR layer (``matte.A``). A run's :class:`ChannelPlan` says, for
each Ground Truth channel the network outputs, how it is made:

- a channel the Input also has (``R`` from ``R``) is a *correction*: the network returns the input channel plus
  a learnt residual (repair, beauty work: what cuetrain always did, ``trainer.learn.model``);
- a new alpha channel (``A``, ``matte.A``, ``alpha``; :func:`is_alpha`) is a *matte*: the network returns a value
  in 0..1 (a sigmoid) and trains it with the matte loss (``trainer.learn.loss``);
- any other new channel is predicted as it is (no residual, no bound).

The task names the artist sees (:data:`TASKS`): ``colour`` (targets = inputs: RGB in, RGB out), ``matte`` (RGB in,
alpha out: roto and garbage mattes, CopyCat's main production use) and ``colour+alpha`` (RGB in, RGBA out). Anything
else is ``other``.

No torch here: the farm and the GUI build plans too.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The default ``--input-channels`` and ``--target-channels``: colour in, colour out.
RGB = ("R", "G", "B")
#: Task name -> (input channels, target channels), as the submit dialog offers them.
TASKS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "colour": (RGB, RGB),
    "matte": (RGB, ("A",)),
    "colour+alpha": (RGB, (*RGB, "A")),
}
_ALPHA_NAMES = {"a", "alpha"}


class ChannelError(ValueError):
    """A channel list is malformed; the message names the option, the value and the fix."""


def is_alpha(name: str) -> bool:
    """True for an alpha channel name: ``A``, ``alpha`` (any case), or an EXR layer's ``layer.A`` / ``layer.alpha``."""
    return name.rsplit(".", 1)[-1].lower() in _ALPHA_NAMES


def parse_channels(text: str, option: str = "--target-channels") -> tuple[str, ...]:
    """``"R,G,B"`` -> ``("R", "G", "B")``: comma-separated names, spaces around them ignored.

    Raises:
        ChannelError: empty, an empty name (``R,,B``) or a name given twice (names ``option``).
    """
    names = tuple(n.strip() for n in str(text).split(","))
    if not text or not all(names):
        raise ChannelError(f"{option}={text!r} must be channel names separated by commas, e.g. R,G,B or A or matte.A")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ChannelError(f"{option}={text!r} names {', '.join(dupes)} twice; list each channel once")
    return names


@dataclass(frozen=True)
class ChannelPlan:
    """The channels of a run and what the network does with each (module doc).

    Attributes:
        inputs: Input channels the network reads, in order [names].
        targets: Ground Truth channels the network outputs, in order [names].
    """

    inputs: tuple[str, ...] = RGB
    targets: tuple[str, ...] = RGB

    @classmethod
    def parse(cls, input_channels: str, target_channels: str) -> "ChannelPlan":
        """A plan from the two option strings. Raises ChannelError: see :func:`parse_channels`."""
        return cls(parse_channels(input_channels, "--input-channels"), parse_channels(target_channels))

    @property
    def residual(self) -> tuple[int, ...]:
        """Per target channel, the index of the Input channel of the same name it corrects, or -1 (a new channel)."""
        return tuple(self.inputs.index(t) if t in self.inputs else -1 for t in self.targets)

    @property
    def matte(self) -> tuple[bool, ...]:
        """Per target channel, True for a matte: a new alpha channel, bounded to 0..1 and trained with the matte loss."""
        return tuple(r < 0 and is_alpha(t) for t, r in zip(self.targets, self.residual))

    @property
    def task(self) -> str:
        """``colour``, ``matte``, ``colour+alpha`` (:data:`TASKS`, matched on the channel roles, so ``matte.A`` from
        ``R,G,B`` is a matte too) or ``other``."""
        colour = [r >= 0 for r in self.residual]
        if all(colour) and self.targets == self.inputs:
            return "colour"
        if all(self.matte):
            return "matte"
        if self.targets[:len(self.inputs)] == self.inputs and all(self.matte[len(self.inputs):]) \
                and len(self.targets) > len(self.inputs):
            return "colour+alpha"
        return "other"

    @property
    def is_default(self) -> bool:
        """True for RGB in, RGB out: the network, its exports and its files are exactly what they were before
        channels could be named."""
        return self.inputs == RGB and self.targets == RGB

    def to_dict(self) -> dict[str, object]:
        """What ``model.json`` and ``run.json`` record: channel names in and out, and the task."""
        return {"in": list(self.inputs), "out": list(self.targets), "task": self.task}

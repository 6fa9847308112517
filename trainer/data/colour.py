"""Colour management through OpenColorIO: train in a working space, give frames back in the plates' space.

Plates are usually scene-linear EXRs with values far above 1. An L1 loss on linear values spends
almost all of its weight on the highlights (an error of 0.1 on a value of 8 counts as much as an
error of 0.1 on a value of 0.05, which is a visible shadow error), so artists train CopyCat in a
log space by hand. ``--colorspace`` names the plates' colour space and ``--working-space`` the space
the network sees; both are OCIO colour space names of :data:`DEFAULT_CONFIG`, a config built into
the ``opencolorio`` wheel (works offline; no ``$OCIO`` is needed or read).

* Training: Input and Ground Truth are converted ``colorspace -> working_space`` once, after
  loading (``trainer.learn.train``); crops, loss and contact sheets are in the working space.
* ``model.json`` records ``colour`` (config, colorspace, working_space); ``cuetrain infer`` and the
  farm's ``infer`` layer convert each frame ``colorspace -> working_space``, run the model, and
  convert ``working_space -> colorspace`` before writing.
* Display space (for PSNR and review): the config's ``sRGB - Display`` with the view
  ``ACES 1.0 - SDR Video`` (a tone-mapped view; highlights above 1 stay distinguishable).

No colour spaces given (the default) means no conversion at all, as before.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from trainer.core.config import ConfigError

#: The OCIO config: the CG config built into opencolorio >= 2.4 (ACES 1.3 colour spaces).
DEFAULT_CONFIG = "ocio://cg-config-v2.2.0_aces-v1.3_ocio-v2.4"
#: Display and view used for display-space images (PSNR, review).
DISPLAY, VIEW = "sRGB - Display", "ACES 1.0 - SDR Video"


class ColourError(ConfigError):
    """An unknown colour space or a missing OpenColorIO; the message names it and the fix."""


@dataclass(frozen=True)
class ColourSpec:
    """Which colour spaces a model works in.

    Attributes:
        colorspace: the plates' colour space (e.g. ``Linear Rec.709 (sRGB)``, ``ACEScg``); "" = none.
        working_space: the space the network trains and infers in (e.g. ``ACEScct``); "" = none.
        config: the OCIO config (a ``ocio://`` built-in name or a file path).
    """

    colorspace: str = ""
    working_space: str = ""
    config: str = DEFAULT_CONFIG

    @property
    def active(self) -> bool:
        """True when frames are converted (both spaces given and different)."""
        return bool(self.colorspace and self.working_space and self.colorspace != self.working_space)

    def to_dict(self) -> dict[str, str]:
        """What ``model.json`` ``colour`` records."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "ColourSpec":
        """The spec ``model.json`` recorded (no conversion when ``data`` is None or empty)."""
        data = data or {}
        return cls(colorspace=str(data.get("colorspace") or ""), working_space=str(data.get("working_space") or ""),
                   config=str(data.get("config") or DEFAULT_CONFIG))

    def check(self) -> None:
        """Raise ColourError unless both spaces are given or neither, and both exist in the config."""
        if bool(self.colorspace) != bool(self.working_space):
            raise ColourError("--colorspace and --working-space go together: give both (e.g. --colorspace "
                              "'Linear Rec.709 (sRGB)' --working-space ACEScct) or neither")
        if self.active:
            _processor(self.config, self.colorspace, self.working_space)

    def to_working(self, rgb: np.ndarray) -> np.ndarray:
        """(H, W, 3) in ``colorspace`` -> (H, W, 3) float32 in ``working_space`` (a copy)."""
        return _apply(self.config, self.colorspace, self.working_space, rgb) if self.active else _f32(rgb)

    def from_working(self, rgb: np.ndarray) -> np.ndarray:
        """(H, W, 3) in ``working_space`` -> (H, W, 3) float32 in ``colorspace`` (a copy)."""
        return _apply(self.config, self.working_space, self.colorspace, rgb) if self.active else _f32(rgb)


def colour_channels(names: Sequence[str]) -> tuple[int, ...]:
    """Indices of the colour channels among channel ``names``, in R, G, B order: the first channel named ``R``, ``G``
    and ``B`` (or ``layer.R`` ...), or () when one of the three is missing. Only these are colour-managed (and
    graded by ``--augment-grade``): alpha, a matte or any other channel keeps its values.

    ``("R", "G", "B")`` -> (0, 1, 2); ``("R", "G", "B", "A")`` -> (0, 1, 2); ``("A",)`` -> ();
    ``("beauty.R", "beauty.G", "beauty.B", "matte.A")`` -> (0, 1, 2).
    """
    last = [n.rsplit(".", 1)[-1] for n in names]
    found = [last.index(c) for c in "RGB" if c in last]
    return tuple(found) if len(found) == 3 else ()


def to_working_channels(spec: ColourSpec, pixels: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """(H, W, C) with channel ``names`` -> (H, W, C) float32 with only its colour channels (:func:`colour_channels`)
    converted to the working space; a copy. For C = 3 named R, G, B exactly :meth:`ColourSpec.to_working`."""
    return _convert_channels(spec.to_working, spec.active, pixels, names)


def from_working_channels(spec: ColourSpec, pixels: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """:func:`to_working_channels`'s inverse: the colour channels of (H, W, C) ``pixels`` (channel ``names``) from
    the working space back to the footage's (:meth:`ColourSpec.from_working`); a float32 copy."""
    return _convert_channels(spec.from_working, spec.active, pixels, names)


def _convert_channels(convert: Callable[[np.ndarray], np.ndarray], active: bool, pixels: np.ndarray,
                      names: Sequence[str]) -> np.ndarray:
    idx = list(colour_channels(names))
    if idx == [0, 1, 2] and pixels.shape[2] == 3:
        return convert(pixels)
    out = _f32(pixels)
    if idx and active:
        out[..., idx] = convert(out[..., idx])
    return out


def to_display(rgb: np.ndarray, colorspace: str, config: str = DEFAULT_CONFIG) -> np.ndarray:
    """(H, W, 3) in ``colorspace`` -> (H, W, 3) float32 display values (:data:`DISPLAY`, :data:`VIEW`), ~0..1.

    Raises:
        ColourError: unknown colour space, or opencolorio missing.
    """
    return _apply(config, colorspace, f"{DISPLAY}/{VIEW}", rgb)


def _f32(rgb: np.ndarray) -> np.ndarray:
    return np.array(rgb, dtype=np.float32, copy=True)


def _apply(config: str, src: str, dst: str, rgb: np.ndarray) -> np.ndarray:
    out = np.ascontiguousarray(rgb, dtype=np.float32).copy()
    if out.ndim != 3 or out.shape[2] != 3:
        raise ValueError(f"colour conversion needs an (H, W, 3) image, got shape {out.shape}")
    _processor(config, src, dst).applyRGB(out)
    return out


@functools.lru_cache(maxsize=16)
def _processor(config: str, src: str, dst: str) -> Any:
    """OCIO's CPU processor ``src -> dst`` (``dst`` may be ``display/view``), cached per process."""
    try:
        import PyOpenColorIO as ocio
    except ImportError:
        raise ColourError("colour management needs OpenColorIO: pip install 'cuetrain[colour]'") from None
    try:
        cfg = ocio.Config.CreateFromFile(config)
    except ocio.Exception as exc:
        raise ColourError(f"cannot load the OCIO config {config!r}: {exc}") from None
    names = list(cfg.getColorSpaceNames())
    display = dst == f"{DISPLAY}/{VIEW}"
    for name in [src] if display else [src, dst]:
        if name not in names:
            raise ColourError(f"colour space {name!r} is not in {config}; use one of: {', '.join(names)}")
    if display:
        transform = ocio.DisplayViewTransform(src=src, display=DISPLAY, view=VIEW)
        return cfg.getProcessor(transform).getDefaultCPUProcessor()
    return cfg.getProcessor(src, dst).getDefaultCPUProcessor()


def working_pairs(pairs: list[tuple[np.ndarray, np.ndarray]], spec: ColourSpec) -> list[tuple[np.ndarray, np.ndarray]]:
    """Training frames ``[(input, target)]`` ((H, W, 3) float16) converted to the working space, float16.

    Returns ``pairs`` itself when ``spec`` converts nothing.

    Raises:
        ColourError: unknown colour space (checked before any frame is converted), opencolorio missing.
    """
    if not spec.active:
        return pairs
    spec.check()
    return [(spec.to_working(a).astype(np.float16), spec.to_working(b).astype(np.float16)) for a, b in pairs]

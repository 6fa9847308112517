"""The upscale factor, as the GUI shows and proposes it. Pure Python (stdlib; no Qt, no torch).

- :func:`scale_text`, :func:`record_scale`: ``1x`` / ``upres 2x`` for a run's ``config.scale``
  (``trainer.core.config.SCALES``).
- :func:`propose_scale`: the factor two plates' sizes imply (Ground Truth over Input), or 1 and a warning.

What a host's selection fills in (folders, factor, task) is :mod:`gui.prefill`; the "Start from" choices and
what a run started from are :mod:`gui.head_start`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainer.core.config import SCALES
from trainer.record.runrecord import RunRecord


def scale_text(scale: Any) -> str:
    """``1x`` for a same-size run, ``upres 2x`` / ``upres 4x`` for upres, ``-`` when unknown."""
    if not isinstance(scale, int) or isinstance(scale, bool) or scale < 1:
        return "-"
    return "1x" if scale == 1 else f"upres {scale}x"


def record_scale(record: RunRecord) -> int | None:
    """``config.scale`` of a ``run.json`` record: 1 when the config predates ``--scale``, None without a config."""
    if not record.config:
        return None
    scale = record.config.get("scale", 1)
    return scale if isinstance(scale, int) and not isinstance(scale, bool) else None


# ------------------------------------------------------------------ the factor from two plates
@dataclass(frozen=True)
class ScaleProposal:
    """A proposed ``--scale`` [1] and, when the sizes fit no factor, why (``warning``; "" when they fit)."""

    scale: int
    warning: str = ""


def propose_scale(input_size: tuple[int, int], target_size: tuple[int, int]) -> ScaleProposal:
    """The factor ``target / input`` when width and height agree on it and it is one of ``SCALES``.

    Args:
        input_size: the Input plate's (width, height) [pixels].
        target_size: the Ground Truth plate's (width, height) [pixels].

    Returns:
        ``ScaleProposal(f)`` for f in (1, 2, 4); otherwise ``ScaleProposal(1, warning)`` naming both sizes.
    """
    (iw, ih), (tw, th) = input_size, target_size
    sizes = f"Input {iw}x{ih}, Ground Truth {tw}x{th}"
    if min(iw, ih, tw, th) <= 0:
        return ScaleProposal(1, f"cannot read both plates' sizes ({sizes}); proposing 1x: set the factor by hand")
    if tw % iw == 0 and th % ih == 0 and tw // iw == th // ih and tw // iw in SCALES:
        return ScaleProposal(tw // iw)
    factors = ", ".join(f"{s}x" for s in SCALES)
    return ScaleProposal(1, f"the plates' sizes match no upscale factor ({sizes}; the Ground Truth must be "
                            f"{factors} the Input in both width and height); proposing 1x: check the Reads' formats")

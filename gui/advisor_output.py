"""What ``cuetrain advise`` prints, read for the submit dialog without Qt or torch: its request flags, its
recommendation, its progress records and its confidence statement (:mod:`gui.advisor_view` shows them).

The advisor (``trainer.advise.advisor``) prints tables, then with ``--json`` one closing JSON line; with
``--progress json`` it also prints one ``{"progress": {...}}`` line per measurement as it goes
(``trainer.advise.progress``), read here as data (:func:`parse_progress`), never from log text.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

log = logging.getLogger(__name__)

DEFAULT_BANDWIDTH_GBPS = 10.0  # as trainer.advise.costmodel's default; not imported from there (it may pull in torch)
PROGRESS_KEY = "progress"  # trainer.advise.progress.PROGRESS_KEY: the key of a progress record's JSON line
# "recommended: 4 rank(s), sync interval 2: 812.3 images/s, ..." (trainer.advise.costmodel.recommendation_line)
_RECOMMENDED = re.compile(r"^[ \t]*recommended:[ \t]*(\d+)[ \t]*ranks?(?:\(s\))?[ \t]*,[ \t]*sync[ _-]interval[ \t]*(\d+)",
                          re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class AdviseRequest:
    """The dialog's values the advisor probes with; :meth:`arguments` are ``cuetrain advise``'s flags."""

    input_dir: str
    target_dir: str
    model_size: str
    crop_size: int
    batch_size: int
    steps: int
    max_world_size: int = 8
    bandwidth_gbps: float = DEFAULT_BANDWIDTH_GBPS
    ranks_per_frame: int = 1  # ranks sharing one host: the advisor predicts multiples of it
    noise_scale: float | None = None  # crops, measured by an earlier run of this run directory (time to quality)
    quality_probe: bool = False  # measure the critical batch now (cuetrain advise --quality-probe), not noise_scale

    def arguments(self) -> list[str]:
        per_frame = ["--ranks-per-frame", str(self.ranks_per_frame)] if self.ranks_per_frame > 1 else []
        if self.quality_probe:
            per_frame.append("--quality-probe")
        elif self.noise_scale is not None:
            per_frame += ["--noise-scale", f"{self.noise_scale:.4g}"]
        return ["--input", self.input_dir, "--target", self.target_dir, "--model-size", self.model_size,
                "--crop-size", str(self.crop_size), "--batch-size", str(self.batch_size), "--steps", str(self.steps),
                "--max-world-size", str(self.max_world_size), "--bandwidth-gbps", f"{self.bandwidth_gbps:g}",
                "--progress", "json", *per_frame, "--json"]


@dataclass(frozen=True)
class Recommendation:
    """The advised world size and sync interval, and the line they were read from."""

    world_size: int
    sync_interval: int
    line: str


def parse_recommendation(text: str) -> Recommendation | None:
    """The last ``recommended: N rank(s), sync interval K`` line in ``text``; ``None`` when there is none."""
    found = None
    for found in _RECOMMENDED.finditer(text):
        pass
    if found is None:
        return None
    line = text[found.start():].splitlines()[0].strip()
    return Recommendation(int(found.group(1)), int(found.group(2)), line)


def parse_output(out: str) -> tuple[str, Recommendation | None]:
    """The advisor's table text and its recommendation: from the closing JSON line of ``--json``
    (``{"recommended": {"world_size", "sync_interval", "line", ...}, "predictions": [...]}``), else from
    the text's ``recommended:`` line."""
    lines = out.rstrip().splitlines()
    if lines and lines[-1].lstrip().startswith("{"):
        try:
            chosen = json.loads(lines[-1])["recommended"]
            rec = Recommendation(int(chosen["world_size"]), int(chosen["sync_interval"]), str(chosen.get("line", "")))
        except (ValueError, KeyError, TypeError):
            rec = None
        text = "\n".join(lines[:-1])
        return text, rec or parse_recommendation(text)
    return out, parse_recommendation(out)


@dataclass(frozen=True)
class Progress:
    """One progress record of ``cuetrain advise --progress json`` (``trainer.advise.progress.record``).

    Attributes:
        phase: ``steps``, ``outputs`` or ``quality``; label: what it measures, for the bar.
        done, total: measurements done and planned [count] (``total`` may grow: the quality probe's is an estimate).
        elapsed_s, budget_s: time since the probe started and its budget [s].
    """

    phase: str
    label: str
    done: int
    total: int
    elapsed_s: float
    budget_s: float


def parse_progress(line: str) -> Progress | None:
    """The :class:`Progress` of one stdout line ``{"progress": {...}}``; None for any other line."""
    if not line.lstrip().startswith('{"' + PROGRESS_KEY):
        return None
    try:
        rec = json.loads(line)[PROGRESS_KEY]
        return Progress(str(rec["phase"]), str(rec.get("label") or rec["phase"]), int(rec["done"]),
                        int(rec["total"]), float(rec.get("elapsed_s", 0.0)), float(rec.get("budget_s", 0.0)))
    except (ValueError, KeyError, TypeError):
        log.warning("the advisor's progress line does not parse: %.80s", line)
        return None


def confidence_text(advice: dict | None) -> tuple[str, bool]:
    """The advisor's ``confidence`` statement from its ``--json`` dict, and whether the answer is rough
    (``("", False)`` without one)."""
    conf = (advice or {}).get("confidence")
    if not isinstance(conf, dict) or not isinstance(conf.get("statement"), str):
        return "", False
    return f"How sure: {conf['statement']}", conf.get("level") == "rough" or bool(conf.get("truncated"))


def error_line(stderr: str, exit_code: int) -> str:
    """What went wrong, for the dialog: stderr's last non-empty line (argparse's or the exception's)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"the advisor exited with code {exit_code}"

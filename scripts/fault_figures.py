"""Medians of the recovery tests' measured figures, as the Markdown table in docs/failure_handling.md.

Usage (run the recovery tests N times with the figures file set, then aggregate)::

    export CUETRAIN_FAULT_FIGURES=/tmp/fault_figures.jsonl
    flock /tmp/cuetrain-heavy.lock .venv/bin/python -m pytest -q tests/cue_plugin/test_e2e_recovery.py
    .venv/bin/python scripts/fault_figures.py /tmp/fault_figures.jsonl

Each line of the file is ``{"fault": str, "steps_lost": int [steps], "seconds_to_training": float [s]}``
(written by ``report()`` in tests/cue_plugin/test_e2e_recovery.py). Output: one row per fault, in first-seen
order, with the run count and the medians (``statistics.median``).
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def table(lines: list[str]) -> str:
    """Markdown table of per-fault medians from JSON lines; raises ValueError naming a malformed line."""
    rows: dict[str, list[tuple[int, float]]] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            rows.setdefault(rec["fault"], []).append((int(rec["steps_lost"]), float(rec["seconds_to_training"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"line {n} is not a fault figure record ({exc}): {line.strip()!r}") from exc
    out = ["| fault | runs | steps lost (median) | fault -> training again, s (median) |", "|---|---|---|---|"]
    for fault, figs in rows.items():
        lost = statistics.median(f[0] for f in figs)
        secs = statistics.median(f[1] for f in figs)
        out.append(f"| {fault} | {len(figs)} | {lost:g} | {secs:.1f} |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: fault_figures.py FIGURES.jsonl", file=sys.stderr)
        return 2
    print(table(Path(argv[0]).read_text(encoding="utf-8").splitlines()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

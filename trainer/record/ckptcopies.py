"""Two verified copies of every checkpoint: a resume loses at most one checkpoint interval when one file is damaged.

Rank 0 writes each checkpoint twice, each atomically: ``checkpoints/step_NNNNNN.pt``, then
``checkpoints/copy/step_NNNNNN.pt`` (``trainer.learn.background``). A file can still be damaged after its rename:
truncated by a storage server that lost unflushed data, or by a script or a person. With one copy, ``--resume``
fell back to the checkpoint before it and lost up to two intervals (the fault soak measured 45 steps at an interval
of 25, docs/failure_handling.md). With two, it takes the same step from the other copy.

A copy is verified before it is loaded (:func:`damage`): ``torch.save`` writes a ZIP archive (PyTorch's
serialization format since 1.6, ``torch/serialization.py``), and every ZIP entry carries the CRC-32 of its
bytes (PKWARE APPNOTE.TXT, section 4.4.7). ``torch.load`` does not check it, so a flipped byte would load silently
as wrong weights; :meth:`zipfile.ZipFile.testzip` reads every entry and checks it. The check reads the file once
more (a few MB for these networks: milliseconds). This module imports no torch.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from trainer.record.rundir import RunPaths


def newest_first(paths: RunPaths) -> list[tuple[int, Path]]:
    """Every checkpoint file of the run, newest step first, each step's first copy before its second; a step with
    only one copy left (the other pruned, lost or never written) is listed with that one. Reads only."""
    first, second = dict(paths.list_checkpoints()), dict(paths.list_checkpoint_copies())
    return [(step, p) for step in sorted(set(first) | set(second), reverse=True)
            for p in (first.get(step), second.get(step)) if p is not None]


def damage(path: Path) -> str | None:
    """Why the checkpoint file at ``path`` cannot be trusted, or None when it is a complete ZIP archive whose every
    entry matches its CRC-32 (see the module docstring). Never raises: a missing or unreadable file is a reason."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as exc:  # truncated, not a zip, unreadable
        return f"{type(exc).__name__}: {exc}"
    return None if bad is None else f"entry {bad} fails its CRC-32 check (the file was damaged after it was written)"


def prune(paths: RunPaths, keep: int) -> list[Path]:
    """Remove both copies of every checkpoint but the newest ``keep`` steps [files kept per copy]; return the paths
    removed. Called only after a newer checkpoint landed, so the newest step always stays."""
    steps = sorted({s for s, _ in newest_first(paths)}, reverse=True)[keep:]
    removed = []
    for step in steps:
        for p in (paths.checkpoint(step), paths.checkpoint_copy(step)):
            try:
                p.unlink()
            except FileNotFoundError:
                continue
            removed.append(p)
    return removed

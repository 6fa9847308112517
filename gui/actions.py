"""Desktop actions on a run: open its folder, open CueGUI. Small, so the panel stays thin."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import subprocess
import sys

from qtpy.QtCore import QUrl
from qtpy.QtGui import QDesktopServices

log = logging.getLogger(__name__)


def open_folder(path: str) -> bool:
    """Open ``path`` in the desktop file browser; False when it does not exist or cannot be opened."""
    if not os.path.isdir(path):
        return False
    return bool(QDesktopServices.openUrl(QUrl.fromLocalFile(path)))


def cuegui_command() -> list[str] | None:
    """The command that starts CueGUI, or ``None`` when it is not installed.

    ``cuegui`` on PATH first; else the ``cuegui`` package run by a Python interpreter (inside a DCC
    ``sys.executable`` is the DCC itself, so a ``python3`` on PATH is used there).
    """
    exe = shutil.which("cuegui")
    if exe:
        return [exe]
    if importlib.util.find_spec("cuegui") is None:
        return None
    python = sys.executable if os.path.basename(sys.executable).startswith("python") else shutil.which("python3")
    return [python, "-m", "cuegui"] if python else None


def launch_cuegui() -> str:
    """Start CueGUI detached; returns "" on success or why it could not start."""
    cmd = cuegui_command()
    if cmd is None:
        return "CueGUI is not found: put its cuegui command on PATH (CueGUI lives in its own environment, see README)"
    try:
        subprocess.Popen(cmd, start_new_session=True, stdin=subprocess.DEVNULL,  # noqa: S603 - fixed command
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError as exc:
        return f"cannot start CueGUI ({' '.join(cmd)}): {exc.strerror}"
    log.info("started %s", " ".join(cmd))
    return ""

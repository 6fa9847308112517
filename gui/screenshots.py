"""Screenshot of the Runs panel for docs and tests: :func:`save_panel_screenshot`.

Works without a display: when no ``QApplication`` exists yet and no display is set, Qt's offscreen
platform is used.
"""

from __future__ import annotations

import logging
import os
from typing import Sequence

from qtpy.QtWidgets import QApplication

from gui.controller import RunsController
from gui.runs_panel import RunsPanel

log = logging.getLogger(__name__)


def _application() -> QApplication:
    app = QApplication.instance()
    if app is None:
        if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        app = QApplication(["cuetrain-screenshot"])
    return app


def save_panel_screenshot(run_dirs: Sequence[str], path: str, size: tuple[int, int] = (1280, 820),
                          selected: int = 0) -> None:
    """Build the Runs panel with ``run_dirs``, poll once, select ``run_dirs[selected]`` (its latest contact
    sheet and model files), save a PNG to ``path``. A run still training on this machine shows its live rank
    processes in the Ranks column.

    The farm is not asked (no backend is made); settings are not touched.

    Raises:
        OSError: the PNG cannot be written.
    """
    app = _application()
    controller = RunsController(settings=None)
    for run_dir in run_dirs:
        controller.add_run(run_dir)
    controller.poll_now(include_farm=False)
    panel = RunsPanel(controller)
    panel.resize(*size)
    panel.show()
    if run_dirs:
        chosen = controller.runs()[selected].run_dir
        panel.select_run(chosen)
        panel.sheet.choose(chosen)
    app.processEvents()
    panel.sheet.wait_for_image()
    panel.graph.plot.enableAutoRange()
    app.processEvents()
    ok = panel.grab().save(str(path), "PNG")
    panel.shutdown()
    controller.shutdown()
    panel.close()
    panel.deleteLater()
    controller.deleteLater()
    app.processEvents()
    if not ok:
        raise OSError(f"cannot write screenshot {path}")
    log.info("saved %s", path)

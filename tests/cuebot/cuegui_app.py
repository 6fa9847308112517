"""Real CueGUI widgets in CueGUI's own environment (``.venv-cuegui``), driven from a test as a subprocess.

CueGUI 1.37 pins PySide6==6.5.3 (compiled against NumPy 1.x) and lives in its own environment, as studios
install it; the test process (NumPy 2, a current PySide6) runs the Cuebot double and starts this script:

    .venv-cuegui/bin/python -m tests.cuebot.cuegui_app CUEBOT_ADDRESS JOB_ID OUT_DIR [--plugin] [--wait TEXT ...]

It opens CueGUI's job monitor and frame monitor (and, with ``--plugin``, the cuetrain "Training Runs"
plugin loaded through ``cuegui.Plugins``) offscreen against the double, waits until every ``--wait`` text
shows in a view (or ``--timeout-s``), saves screenshots into OUT_DIR and prints one JSON object:
``{"jobs": rows, "frames": rows, "plugin": {...}}`` (rows: lists of cell texts). Exit 1 on a timeout, with
what was shown.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
faulthandler.enable()  # a crash in Qt prints the Python stack


def row_texts(tree) -> list[list[str]]:
    """Every row of a CueGUI tree as its column texts."""
    model = tree.model()
    return [[str(model.index(row, column).data()) for column in range(model.columnCount())]
            for row in range(model.rowCount())]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="cuegui_app")
    parser.add_argument("cuebot")
    parser.add_argument("job_id")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--plugin", action="store_true", help="also open the Training Runs plugin")
    parser.add_argument("--wait", action="append", default=[], help="text to wait for in any view")
    parser.add_argument("--timeout-s", type=float, default=30.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    import opencue
    from qtpy import QtWidgets

    from tests.cuebot.cuegui_setup import cuegui_application, cuegui_session, dispose

    opencue.Cuebot.setHosts([args.cuebot])
    app = cuegui_application()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    import cuegui.FrameMonitorTree
    import cuegui.JobMonitorTree

    with cuegui_session(Path(tempfile.mkdtemp(prefix="cuegui-settings-"))):
        job = opencue.api.getJob(args.job_id)
        jobs_view = cuegui.JobMonitorTree.JobMonitorTree(None)
        frames_view = cuegui.FrameMonitorTree.FrameMonitorTree(None)
        jobs_view.resize(1100, 120)
        frames_view.resize(1100, 160)
        jobs_view.addJob(job)
        frames_view.setJob(job)
        plugin = None
        if args.plugin:
            from tests.cuebot.cuegui_plugin_host import open_plugin

            plugin = open_plugin(app, job)
            deadline = time.monotonic() + 15
            while plugin.jobs_view.topLevelItemCount() == 0 and time.monotonic() < deadline:
                app.processEvents()
                time.sleep(0.05)
            plugin.select_first_job()
        views = [jobs_view, frames_view]

        def texts() -> str:
            shown = json.dumps([row_texts(v) for v in views])
            return shown + (json.dumps(plugin.shown()) if plugin is not None else "")

        deadline = time.monotonic() + args.timeout_s
        while not all(text in texts() for text in args.wait) and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.05)
        for _ in range(20):  # let the last updates paint
            app.processEvents()
            time.sleep(0.02)
        if plugin is not None:
            plugin.grab(args.out_dir / "cuegui_training_runs.png")
        jobs_view.grab().save(str(args.out_dir / "cuegui_job.png"))
        frames_view.grab().save(str(args.out_dir / "cuegui_frames.png"))
        result = {"jobs": row_texts(jobs_view), "frames": row_texts(frames_view), "waited_for": args.wait,
                  "shown": all(text in texts() for text in args.wait)}
        if plugin is not None:
            result["plugin"] = plugin.shown()
            plugin.close()
        dispose(jobs_view, frames_view)
    QtWidgets.QApplication.processEvents()
    print(json.dumps(result), flush=True)
    return 0 if result["shown"] else 1


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    # Skip the interpreter's teardown: with the plugin's thread pools and pyqtgraph's items, destroying Qt
    # objects in garbage-collection order crashes PySide6 6.5.3 at exit (after the result is out).
    os._exit(code)

"""The smallest real CueGUI setup for widgets under test, offscreen, next to a Cuebot double.

What CueGUI 1.37's own startup (cuegui.Main.startup) does that its widgets rely on:
- `cuegui.app()` returns the application, whose CueGuiApplication class signals the widgets
  connect to (request_update, job_not_found, ...). The suite's QApplication stays a plain
  one (pytest-qt's): a CueGuiApplication's `quit` is a signal that shadows
  QApplication.quit(), so `QTimer.singleShot(.., app.quit)` in other tests would never end
  their event loop. The signals are attached to the plain application instead, all but `quit`
  (used by CueGUI's MainWindow and graph widgets only), and it is registered as cuegui.app();
- `app.threadpool`: tree widgets fetch on it and apply on the GUI thread (without it they
  fetch on the GUI thread); `app.action_runner` runs menu actions;
- `app.settings`: a QSettings; Startup copies cuetopia.ini to ~/.config/.cuetopia/, here it is
  copied into a temporary directory instead of the home directory;
- `cuegui.Style.init()`: color/icon theme and font, read from the settings. It restyles the
  whole QApplication (dark palette, style sheet, font), so `cuegui_session` restores them.
Constants (cuegui.yaml) are read at import and need nothing. pycue must point at the double
(fixtures.use_pycue) before the widgets make their first call.
"""

from __future__ import annotations

import os
import contextlib
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from qtpy import QtCore, QtWidgets

ROOT = Path(__file__).resolve().parents[2]
CHILD_PYTHONPATH = os.pathsep.join([str(ROOT / "tests" / "cpu_bf16"), str(ROOT)])  # as tests.conftest
#: CueGUI's own environment (scripts/setup.sh): CueGUI 1.37 pins PySide6==6.5.3, built for NumPy 1.x.
CUEGUI_PYTHON = ROOT / ".venv-cuegui" / "bin" / "python"


def run_cuegui_app(cuebot: str, job_id: str, out_dir: Path, wait: list[str], *, plugin: bool = False,
                   env: dict[str, str] | None = None, timeout_s: float = 45) -> dict:
    """Run tests/cuebot/cuegui_app.py in CueGUI's environment against the Cuebot double at ``cuebot``.

    Returns its JSON (``jobs`` and ``frames`` rows, ``plugin``, ``shown``: every ``wait`` text appeared).

    Raises:
        FileNotFoundError: ``.venv-cuegui`` is missing (run scripts/setup.sh).
        RuntimeError: the script failed without a result (its stderr is in the message).
    """
    if not CUEGUI_PYTHON.exists():
        raise FileNotFoundError(f"{CUEGUI_PYTHON} is missing: run scripts/setup.sh (it makes CueGUI's environment)")
    command = [str(CUEGUI_PYTHON), "-m", "tests.cuebot.cuegui_app", cuebot, job_id, str(out_dir),
               "--timeout-s", str(timeout_s - 15), *(f"--wait={text}" for text in wait)]
    if plugin:
        command.append("--plugin")
    home = tempfile.mkdtemp(prefix="cuegui-home-")  # CueGUI writes ~/.config/.cuetopia
    full_env = {"PATH": "/usr/bin:/bin", "HOME": home, "QT_QPA_PLATFORM": "offscreen",
                "PYTHONPATH": CHILD_PYTHONPATH, **(env or {})}
    try:
        proc = subprocess.run(command, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout_s)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    lines = proc.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        raise RuntimeError(f"CueGUI app failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}")
    result = json.loads(lines[-1])
    result["stderr"] = proc.stderr
    return result


def _adopt(app: QtWidgets.QApplication) -> None:
    """Give a plain QApplication CueGuiApplication's signals (but `quit`) and attributes."""
    import cuegui.App

    signals = {name: value for name, value in vars(cuegui.App.CueGuiApplication).items()
               if isinstance(value, QtCore.Signal) and not hasattr(app, name)}
    holder = type("CueGuiSignals", (QtCore.QObject,), dict(signals))(app)
    for name in signals:
        setattr(app, name, getattr(holder, name))
    for name in ("settings", "threadpool", "action_runner"):
        setattr(app, name, None)
    app.threads, app.closingApp = [], False


def cuegui_application() -> QtWidgets.QApplication:
    """The running QApplication (created if there is none), registered as cuegui.app()."""
    import cuegui.App

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(["cuetrain-tests"])
    if not hasattr(app, "request_update"):
        _adopt(app)
    setattr(cuegui.App, "__QAPPLICATION_SINGLETON", app)  # what create_app would have stored
    return app


def stop_workers(app, timeout_s: float = 5) -> None:
    """Stop the thread pool's workers (cuegui.Main.closingTime does it with one wake-up; a
    worker about to wait can miss it, so wake them until they are all gone)."""
    deadline = time.monotonic() + timeout_s
    for thread in app.threads:
        thread.stop()
    for thread in app.threads:
        while not thread.wait(50) and time.monotonic() < deadline:
            app.threadpool._q_empty.wakeAll()
    app.threads.clear()
    app.threadpool._done.clear()  # results not delivered yet belong to disposed widgets


def dispose(*widgets: QtWidgets.QWidget) -> None:
    """Close and delete CueGUI widgets now. Closing alone is not enough: AbstractTreeWidget's
    closeEvent misses its one-second tick timer, which would keep polling Cuebot."""
    for widget in widgets:
        widget.close()
        widget.deleteLater()
    QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.DeferredDelete)


@contextlib.contextmanager
def cuegui_session(settings_dir: Path, app_name: str = "Cuetopia"):
    """cuegui.app() with settings, thread pool, action runner and style; undone on exit."""
    import cuegui.ActionRunner
    import cuegui.Constants
    import cuegui.Style
    import cuegui.ThreadPool

    app = cuegui_application()
    saved = (app.palette(), app.styleSheet(), app.font())
    settings_dir.mkdir(parents=True, exist_ok=True)
    ini = settings_dir / f"{app_name.lower()}.ini"
    shutil.copy(Path(cuegui.Constants.DEFAULT_INI_PATH) / ini.name, ini)
    app.settings = QtCore.QSettings(str(ini), QtCore.QSettings.IniFormat)
    app.threadpool = cuegui.ThreadPool.ThreadPool(3, parent=app)
    app.action_runner = cuegui.ActionRunner.ActionRunner(parent=app)
    cuegui.Style.init()
    try:
        yield app
    finally:
        app.action_runner.shutdown()
        stop_workers(app)
        app.threadpool = app.action_runner = app.settings = None
        app.setPalette(saved[0])
        app.setStyleSheet(saved[1])
        app.setFont(saved[2])

"""A DCC-like GUI process for tests: the Render menu in a QMainWindow, the submit dialog, the Runs controller.

    python -m tests.gui.dcc_session INPUT TARGET RUN_DIR

Drives Render > Train on Render Farm: fills the dialog, submits, follows the run (describe), cancels it
and describes it again, all through the default farm (:class:`gui.farm_process.ProcessFarm`: ``cuetrain
--json`` subprocesses of ``CUETRAIN_PYTHON``). Prints one JSON line: what the dialog and the controller
showed, and which of grpc, opencue, outline, torch this process imported.
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

FORBIDDEN = ("grpc", "opencue", "opencue_proto", "outline", "torch")


def wait(app, condition, timeout_s: float = 90.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.02)
    return bool(condition())


def main(input_dir: str, target_dir: str, run_dir: str) -> dict:
    from qtpy.QtWidgets import QApplication, QMainWindow

    from gui.menu import handler_of, install_menu

    app = QApplication.instance() or QApplication(["dcc"])
    window = QMainWindow()
    window.show()
    handler = handler_of(install_menu(window.menuBar()))
    dialog = handler.open_dialog()
    controller = handler.controller
    seen: dict = {"progress": [], "finished": [], "failed": [], "acted": []}
    controller.submit_progressed.connect(seen["progress"].append)
    controller.submit_finished.connect(lambda h: seen["finished"].append(h.job_name))
    controller.submit_failed.connect(seen["failed"].append)
    controller.action_finished.connect(lambda run, message: seen["acted"].append(message))
    controller.action_failed.connect(lambda run, message: seen["acted"].append("failed: " + message))
    dialog.input_edit.setText(input_dir)
    dialog.target_edit.setText(target_dir)
    dialog.run_dir_edit.setText(run_dir)
    dialog.batch_spin.setValue(4)
    dialog.world_spin.setValue(2)
    dialog.steps_spin.setValue(5)
    dialog.show_edit.setText("cuetrain")
    dialog.shot_edit.setText("sh010")
    seen["submit_started"] = dialog.try_submit()
    seen["busy_text"] = dialog.submit_button.text()
    seen["dialog_errors"] = dialog.errors.text()
    if not seen["submit_started"]:
        return seen
    wait(app, lambda: seen["finished"] or seen["failed"])
    seen["dialog_errors"] = dialog.errors.text()
    seen["dialog_visible"] = dialog.isVisible()
    controller.poll_now()
    run = controller.run(run_dir)
    seen["state_before"] = run.status.state.value if run and run.status else None
    seen["ranks_before"] = run.ranks_text if run else None
    controller.cancel(run_dir)
    wait(app, lambda: seen["acted"])
    controller.poll_now()
    seen["state_after"] = run.status.state.value if run and run.status else None
    seen["farm_error"] = run.farm_error if run else None
    controller.shutdown()
    seen["imported"] = sorted(name for name in sys.modules if name.split(".")[0] in FORBIDDEN)
    return seen


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))

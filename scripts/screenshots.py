"""Regenerate every screenshot the README shows, from real runs, so that none can go stale silently.

Usage (from the repository root, after ``bash scripts/setup.sh``; a few minutes on a 2-core VM)::

    .venv/bin/python scripts/screenshots.py [--out docs] [--steps 400] [--skip-cuegui] [--only-advisor]

What it does, each step in its own process where torch is involved (the GUI never imports torch):

1. Two real training runs of ``cuetrain demo`` on the carphone clip (2 ranks, local launch): a short
   one (``--steps`` / 3), then the main one (``--steps``), in a temporary folder.
2. ``docs/gui_runs_panel.png``, grabbed while the main run trains (past half its steps): the Runs panel
   following both runs, the main run's live rank processes in the Ranks column (``2/2``), the finished
   short run selected (labelled contact sheet, the model files line and "Open Model Folder"), offscreen
   (:func:`gui.screenshots.save_panel_screenshot`). Then the main run is waited for.
3. ``docs/gui_submit_dialog.png``: the submit dialog's five sections filled in with the demo's folders, "Advanced"
   unfolded (every field shows). ``docs/gui_submit_dialog_advisor.png``: the same dialog as it opens ("Advanced"
   folded) with the advisor's chart under Farm (time to the same quality and farm hours against ranks) and its
   sentence from a real ``cuetrain advise --quality-probe`` ("Time to quality" ticked); the tables stay folded
   under "Details". ``--only-advisor`` makes these two alone: the demo's frames are extracted (no training), a
   minute or three.
4. ``docs/cuegui_job.png``, ``docs/cuegui_frames.png``, ``docs/cuegui_training_runs.png``: real CueGUI
   against the Cuebot double with a real 2-rank job run by two real RQDs, through
   ``tests/gui/test_cuegui_plugin.py`` with ``CUETRAIN_UPDATE_DOCS=1`` (needs ``.venv-cuegui``;
   ``--skip-cuegui`` leaves those three as they are).

Exit status: 0 when every screenshot was written; 1 (with the failing step named) otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("screenshots")


def demo_command(run_dir: Path, steps: int) -> list[str]:
    """``cuetrain demo`` (2 ranks) into ``run_dir`` (its frames under ``run_dir/data``) for ``steps`` steps."""
    return [sys.executable, "-m", "cuetrain", "demo", "--run-dir", str(run_dir), "--steps", str(steps)]


def train(run_dir: Path, steps: int) -> None:
    """One real :func:`demo_command` run; raises CalledProcessError when it fails."""
    subprocess.run(demo_command(run_dir, steps), cwd=ROOT, check=True)


def runs_panel_while_training(main_run: Path, short_run: Path, steps: int, out: Path,
                              timeout_s: float = 1800.0) -> None:
    """Start the main demo run (``steps``), grab the Runs panel (``out``, PNG) once it is past half its steps and
    still training (both runs listed, the finished ``short_run`` selected), then wait for the run to finish.

    Raises:
        CalledProcessError: the main run failed.
        RuntimeError: it did not reach half its steps within ``timeout_s`` seconds, or finished before.
    """
    from gui.screenshots import save_panel_screenshot
    from trainer.record.rundir import RunPaths, read_metrics

    cmd = demo_command(main_run, steps)
    proc = subprocess.Popen(cmd, cwd=ROOT)
    try:
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None and time.monotonic() < deadline:
            rows = read_metrics(RunPaths.of(main_run)) if (main_run / "metrics.jsonl").exists() else []
            if rows and rows[-1].get("step", 0) >= steps // 2:
                break
            time.sleep(1.0)
        if proc.poll() is not None or time.monotonic() >= deadline:
            if proc.poll() is None:
                proc.terminate()  # the trainer checkpoints and exits 75 within its grace
            raise RuntimeError(f"the main run did not train past step {steps // 2} while it could be grabbed "
                               f"(exit {proc.poll()}); raise --steps")
        save_panel_screenshot([str(main_run), str(short_run)], str(out), selected=1)
    finally:
        code = proc.wait()
    if code:
        raise subprocess.CalledProcessError(code, cmd)


def extract_demo_frames(data_dir: Path) -> None:
    """The demo's PNG sequences under ``data_dir`` (``trainer.demo.extract``, in its own process), without training."""
    code = f"from pathlib import Path; from trainer.demo import extract; extract(Path({str(data_dir)!r}))"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def _filled_dialog(data_dir: Path, run_dir: Path):
    """A submit dialog (and its controller) filled in for the demo data (``data_dir/train/{input,target}``)."""
    from gui.controller import RunsController
    from gui.submit_dialog import SubmitDialog

    controller = RunsController(settings=None)
    dialog = SubmitDialog(controller)
    dialog.input_edit.setText(str(data_dir / "train" / "input"))
    dialog.target_edit.setText(str(data_dir / "train" / "target"))
    dialog.run_dir_edit.setText(str(run_dir))
    return dialog, controller


def _grab(dialog, controller, out: Path) -> None:
    """Save ``dialog`` at its full size hint (taller than the offscreen screen allows by default) to ``out``.

    Raises:
        RuntimeError: the PNG cannot be written.
    """
    from gui.screenshots import _application

    app = _application()
    for _ in range(10):  # let the chart and the notes take their room before the grab
        app.processEvents()
        time.sleep(0.05)
    dialog.setMinimumSize(dialog.sizeHint().expandedTo(dialog.minimumSize()))
    dialog.adjustSize()
    app.processEvents()
    ok = dialog.grab().save(str(out), "PNG")
    dialog.advisor.shutdown()
    dialog.close()
    controller.shutdown()
    if not ok:
        raise RuntimeError(f"cannot write {out}")


def submit_dialog_sections(data_dir: Path, run_dir: Path, out: Path) -> None:
    """The submit dialog's five sections for the demo data, show ``demo`` shot ``sh010``, "Advanced" unfolded.

    Raises:
        RuntimeError: the PNG cannot be written.
    """
    from gui.screenshots import _application

    _application()
    dialog, controller = _filled_dialog(data_dir, run_dir)
    dialog.show_edit.setText("demo")
    dialog.shot_edit.setText("sh010")
    dialog.show()
    dialog.advanced_section.set_expanded(True)
    _grab(dialog, controller, out)


def submit_dialog(data_dir: Path, run_dir: Path, out: Path, timeout_s: float = 300.0) -> None:
    """The submit dialog filled in for the demo data (``data_dir/train/{input,target}``), with the advisor's chart
    from a real probe (its tables folded under "Details").

    Raises:
        RuntimeError: the probe did not finish within ``timeout_s`` seconds or failed (its message).
    """
    from gui.screenshots import _application

    app = _application()
    dialog, controller = _filled_dialog(data_dir, run_dir)
    dialog.advisor.set_expanded(True)
    dialog.advisor.quality_box.setChecked(True)  # the time-to-quality table too (trainer.advise.critical_batch)
    dialog.show()
    if not dialog.advisor.advise():
        raise RuntimeError(f"the advisor did not start: {dialog.advisor.status.text()}")
    deadline = time.monotonic() + timeout_s
    while dialog.advisor.runner.is_running() and time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.05)
    if dialog.advisor.runner.is_running():
        dialog.advisor.shutdown()
        raise RuntimeError(f"the advisor probe gave no result in {timeout_s:.0f} s")
    if dialog.advisor.recommendation is None:
        log.warning("the advisor made no recommendation: %s", dialog.advisor.status.text())
    _grab(dialog, controller, out)


def cuegui(out_dir: Path) -> None:
    """The three CueGUI screenshots, through the real-CueGUI test (it writes them into docs/)."""
    if out_dir.resolve() != (ROOT / "docs").resolve():
        raise RuntimeError("the CueGUI screenshots go to docs/ only (the test writes them there); use --skip-cuegui")
    env = dict(os.environ, CUETRAIN_UPDATE_DOCS="1")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "tests/gui/test_cuegui_plugin.py"], cwd=ROOT, env=env, check=True)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="folder for the PNGs (docs)")
    parser.add_argument("--steps", type=int, default=400, help="steps of the main demo run (400)")
    parser.add_argument("--skip-cuegui", action="store_true", help="leave the three CueGUI screenshots as they are")
    parser.add_argument("--only-advisor", action="store_true",
                        help="only docs/gui_submit_dialog.png and gui_submit_dialog_advisor.png, on the demo's frames "
                             "without training")
    parser.add_argument("--advisor-timeout-s", type=float, default=300.0,
                        help="longest wait for the advisor's quality probe in seconds (300; raise it on a busy host)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if args.steps < 3:
        parser.error(f"--steps {args.steps}: need at least 3 (the short run trains steps / 3)")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cuetrain-screenshots-") as tmp:
        work = Path(tmp)
        main_run, short_run = work / "runs" / "demo", work / "runs" / "demo_short"
        data = work / "data" if args.only_advisor else main_run / "data"  # the demo's frames
        nxt, advisor_png = work / "runs" / "next", args.out / "gui_submit_dialog_advisor.png"
        dialogs = [("submit dialog", lambda: submit_dialog_sections(data, nxt, args.out / "gui_submit_dialog.png")),
                   ("submit dialog with the advisor",
                    lambda: submit_dialog(data, nxt, advisor_png, args.advisor_timeout_s))]
        steps = [("short training run", lambda: train(short_run, args.steps // 3)),
                 ("main training run and the Runs panel while it trains",
                  lambda: runs_panel_while_training(main_run, short_run, args.steps, args.out / "gui_runs_panel.png")),
                 *dialogs]
        if args.only_advisor:
            steps = [("demo frames", lambda: extract_demo_frames(data)), *dialogs]
        elif not args.skip_cuegui:
            steps.append(("CueGUI", lambda: cuegui(args.out)))
        for name, step in steps:
            log.info("%s...", name)
            try:
                step()
            except (subprocess.CalledProcessError, RuntimeError, OSError) as exc:
                log.error("%s failed: %s", name, exc)
                return 1
    log.info("screenshots written to %s", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The GUI's farm: every call runs ``cuetrain ... --json`` in the cuetrain environment, out of process.

A DCC's Python is not cuetrain's: Nuke 15 ships Python 3.10 (Maya 2025 and Houdini 20.5: 3.11) with its own
gRPC, so pycue cannot be imported there. OpenCue's own Nuke submitter does the same for the same reason
(``cuesubmit/plugins/nuke/CueNukeSubmitLauncher.py`` starts a separate Python). So the GUI process
imports only qtpy, pyqtgraph, numpy and cuetrain's pure modules; :class:`ProcessFarm` implements the
:class:`cue_plugin.submit.spec.Farm` surface by running

    CUETRAIN_PYTHON -m cuetrain submit --job-json - --json      (the job on stdin)
    CUETRAIN_PYTHON -m cuetrain status|cancel|retry JOB --json
    CUETRAIN_PYTHON -m cuetrain submit-infer --model RUN_DIR/model.pt --input IN --output OUT ... --json

and reading one JSON object from stdout (:mod:`cue_plugin.submit.jsonout`). Calls block, so they run on the
controller's worker threads, never on the GUI thread. ``CUETRAIN_PYTHON`` is read in
:func:`trainer.core.envvars.cuetrain_python`; :func:`cuetrain_command` is the one place the GUI turns it into
a command (the advisor uses it too).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from cue_plugin.submit import jsonout
from cue_plugin.submit.spec import FarmError, JobHandle, JobStatus, TrainingJob
from trainer.core.envvars import cuetrain_python

log = logging.getLogger(__name__)

#: The checkout holding ``gui``; put on the child's PYTHONPATH so ``-m cuetrain`` also works from a checkout.
PROJECT_ROOT = Path(__file__).resolve().parents[1]
#: How long one farm call may take [s] (a Cuebot that does not answer fails the call, not the GUI).
CALL_TIMEOUT_S = 120.0

Progress = Callable[[str], None]


def python_interpreter() -> str:
    """The cuetrain environment's Python: ``CUETRAIN_PYTHON``, else this interpreter when it is a Python
    (``cuetrain gui``), else ``python3`` on PATH (inside a DCC ``sys.executable`` is the DCC)."""
    configured = cuetrain_python()
    if configured:
        return configured
    if os.path.basename(sys.executable).lower().startswith("python"):
        return sys.executable
    return shutil.which("python3") or sys.executable


def cuetrain_command(*arguments: str) -> list[str]:
    """``[python, "-m", "cuetrain", *arguments]`` (the front door, :mod:`cuetrain.cli`) in the cuetrain environment."""
    return [python_interpreter(), "-m", "cuetrain", *arguments]


def child_environment(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a cuetrain subprocess: the host's, minus the host Python's own paths
    (``PYTHONHOME``, and a ``PYTHONPATH`` meant for the DCC's Python version), plus :data:`PROJECT_ROOT`."""
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONHOME", None)
    env["PYTHONPATH"] = str(PROJECT_ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class ProcessFarm:
    """:class:`cue_plugin.submit.spec.Farm` through ``cuetrain --json`` subprocesses (see module doc).

    Args:
        cuebot: Cuebot hosts passed as ``--cuebot`` (default: the child's CUEBOT_HOSTS / opencue.yaml).
        timeout_s: limit per call [s].
        env: extra environment variables for the child (tests).
    """

    def __init__(self, cuebot: Sequence[str] = (), timeout_s: float = CALL_TIMEOUT_S,
                 env: dict[str, str] | None = None) -> None:
        self._cuebot = list(cuebot)
        self._timeout_s = timeout_s
        self._env = dict(env or {})

    def dry_run(self, job: TrainingJob) -> str:
        """The job spec XML (``cuetrain submit --dry-run``)."""
        return str(self._call(["submit", "--dry-run"], stdin=jsonout.job_to_json(job))["spec"])

    def submit(self, job: TrainingJob) -> JobHandle:
        """Submit ``job``; see :meth:`submit_with_progress`."""
        return self.submit_with_progress(job, None)

    def submit_with_progress(self, job: TrainingJob, progress: Progress | None) -> JobHandle:
        """Submit ``job``; ``progress`` gets a line per step (the child's log lines as they arrive).

        Raises:
            FarmError: the environment cannot be started, or the farm refused (the child's message).
        """
        data = self._call(["submit"], stdin=jsonout.job_to_json(job), progress=progress)
        return jsonout.handle_from(data["submitted"])

    def submit_infer(self, model: str, input_dir: str, output_dir: str, show: str, shot: str,
                     template: str = "", chunk: int | None = None) -> JobHandle:
        """Submit an inference job for an existing ``model`` (RUN_DIR/model.pt): ``cuetrain submit-infer --model M
        --input IN --output OUT [--template T] [--chunk N] --show S --shot S --json``; ``chunk`` in input frames per
        farm frame (None: cuetrain's default).

        Raises:
            FarmError: the environment cannot be started, or cuetrain/the farm refused (its message).
        """
        arguments = ["submit-infer", "--model", model, "--input", input_dir, "--output", output_dir]
        if template:
            arguments += ["--template", template]
        if chunk is not None:
            arguments += ["--chunk", str(int(chunk))]
        data = self._call([*arguments, "--show", show, "--shot", shot])
        return jsonout.handle_from(data["submitted"])

    def describe(self, handle: JobHandle) -> JobStatus:
        """The job's status (``cuetrain status JOB --json``)."""
        return jsonout.status_from(self._call(["status", _job_arg(handle)])["status"])

    def cancel(self, handle: JobHandle) -> None:
        """Kill the job (idempotent: ``cuetrain cancel JOB --json``)."""
        self._call(["cancel", _job_arg(handle)])

    def retry(self, handle: JobHandle) -> int:
        """Retry the job's dead frames; returns how many (``cuetrain retry JOB --json``)."""
        return int(self._call(["retry", _job_arg(handle)])["retried"])

    def _call(self, arguments: list[str], stdin: str | None = None, progress: Progress | None = None) -> dict[str, Any]:
        """Run one command and return its JSON object.

        Raises:
            FarmError: the child could not start, timed out, printed no JSON, or reported ``{"error": ...}``.
        """
        hosts = [a for host in self._cuebot for a in ("--cuebot", host)]
        if stdin is not None:
            arguments = [*arguments, "--job-json", "-"]
        command = cuetrain_command(*arguments, *hosts, "--json")
        env = child_environment({**os.environ, **self._env})
        log.info("farm call: %s", " ".join(command))
        if progress is not None:
            progress(f"starting cuetrain ({command[0]})")
        try:
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=env, text=True, cwd=str(PROJECT_ROOT))
        except OSError as exc:
            raise FarmError(f"cannot start the cuetrain environment's Python {command[0]}: {exc.strerror}; "
                            "set CUETRAIN_PYTHON to the python of the environment cuetrain is installed in") from exc
        out, err = self._communicate(proc, stdin, progress)
        return _result(command, proc.returncode, out, err)

    def _communicate(self, proc: subprocess.Popen[str], stdin: str | None,
                     progress: Progress | None) -> tuple[str, str]:
        """Feed stdin, relay stderr lines to ``progress`` as they come, collect stdout (bounded by the timeout)."""
        assert proc.stdin is not None and proc.stderr is not None and proc.stdout is not None  # PIPEs above
        if progress is None:
            try:
                return proc.communicate(stdin, timeout=self._timeout_s)
            except subprocess.TimeoutExpired as exc:
                proc.kill()
                proc.communicate()
                raise FarmError(f"cuetrain did not answer within {self._timeout_s:g} s") from exc
        timer = threading.Timer(self._timeout_s, proc.kill)  # the stderr loop below has no timeout of its own
        timer.start()
        try:
            proc.stdin.write(stdin or "")
            proc.stdin.close()
            err_lines = []
            for line in proc.stderr:  # the child's log lines; its stdout holds one short JSON line
                err_lines.append(line)
                if line.strip():
                    progress(line.strip())
            out = proc.stdout.read()
            proc.wait()
        finally:
            timer.cancel()
        if proc.returncode == -signal.SIGKILL:
            raise FarmError(f"cuetrain did not answer within {self._timeout_s:g} s")
        return out, "".join(err_lines)


def _job_arg(handle: JobHandle) -> str:
    """What ``cuetrain status|cancel|retry`` takes: the job id, else its name, else the run directory."""
    return handle.job_id or handle.job_name or handle.run_dir


def _result(command: list[str], code: int, out: str, err: str) -> dict[str, Any]:
    """The JSON object of a finished call, or FarmError with the child's message."""
    lines = [line for line in out.splitlines() if line.startswith("{")]
    try:
        data = json.loads(lines[-1]) if lines else None
    except ValueError:
        data = None
    if isinstance(data, dict) and "error" in data:
        raise FarmError(str(data["error"]))
    if code != 0 or not isinstance(data, dict):
        tail = [line.strip() for line in err.splitlines() if line.strip()]
        why = tail[-1] if tail else f"exit code {code}, no output"
        raise FarmError(f"{' '.join(command[2:4])} failed: {why} (cuetrain environment: {command[0]})")
    return data

"""``cuetrain local``: run a gang of N ranks on this machine, each exactly as a farm frame would.

A local run is one "frame" holding every rank: the ranks are started by the same supervisor a farm
frame uses for its ranks-per-frame (:func:`trainer.agent.supervise.run_ranks`). Each rank is a separate
``python -m trainer`` process that gets the COPYCAT variables (main address 127.0.0.1, a
free port, its rank, the world size, the sync interval, a per-gang token; the port is
reserved for the gang's life, :mod:`trainer.core.ports`) in its environment, the
same contract a farm frame gives its ranks. Output lines are relayed with a ``[rank N]`` prefix and
also written to ``RUN_DIR/logs/rank_N.log``.

If a rank fails, the others are stopped (SIGTERM, then SIGKILL strictly after the trainer's checkpoint
grace, :mod:`trainer.core.timeouts`) and, by the farm frame's own rules and loop (:class:`trainer.agent.nodeagent.NodeAgent`, :class:`LocalGang`) and up
to ``max_restarts`` times, the whole gang is started again with ``--resume`` so it continues from the
latest complete checkpoint (OpenCue retries frames one by one; the gang restarts whole). A gang that
exits with a code a restart cannot help (2: bad input, ...) or that was stopped by SIGTERM/Ctrl-C is not
restarted.

The ranks leave ``model.onnx`` to a detached process started once the gang succeeded (:func:`start_onnx_export`,
:mod:`trainer.export.deferred`): a local run ends when ``model.pt`` is written, not 5-15 s of ONNX export later.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import subprocess
import sys
from typing import Mapping

from trainer.core.config import ConfigError
from trainer.core.envvars import copycat_env, environ_with, read_export_onnx
from trainer.core.exitcodes import describe
from trainer.core.logsetup import log_file
from trainer.record.lease import RunLease
from trainer.record.rundir import FILE_MODE, RunDirError, RunPaths, atomic_write_json, read_json
from trainer.core.timeouts import GRACE
from trainer.core.ports import PortReservation
from trainer.agent.progress import Console
from trainer.agent.nodeagent import Ended, Generation, NodeAgent, WorkerState, judge_exit
from trainer.agent.supervise import TRAINER_COMMAND, GangExit, RankLogs, rank_envs, run_ranks  # tests patch launch's name

log = logging.getLogger(__name__)

STOP_GRACE_S = GRACE.kill_after_s()  # seconds from SIGTERM to SIGKILL for the default --stop-grace-s
#: Writes a finished run's model.onnx from its model.pt (``cuetrain export``, ``trainer.export.deferred``); started
#: detached once the gang succeeded, ``--run-dir RUN`` appended. Not a rank's command line (``gui/localranks.py``).
EXPORT_COMMAND = (sys.executable, "-m", "trainer.cli", "export", "--background")
#: ``model.json``'s list of files still being written: ``trainer.export.deferred.PENDING_KEY`` (this room does not
#: import ``export``; tests/trainer/agent/test_onnx_later.py holds the two equal).
PENDING_KEY = "exports_pending"


def _run_gang(train_argv: list[str], world_size: int, sync_interval: int, logs: RankLogs, threads: int,
              extra_env: Mapping[str, str] | None = None) -> GangExit:
    """Start every rank once (a freshly reserved port and a new token per start) and wait; returns how the
    gang ended. The port stays reserved until the gang exits (:mod:`trainer.core.ports`): rank 0's store binds
    it, no other program can."""
    token = secrets.token_hex(16)  # per gang: a stray process cannot join (trainer.gang.formation)
    with PortReservation(0) as reservation:
        port = reservation.port
        base = environ_with({**copycat_env("127.0.0.1", port, 0, world_size, sync_interval, token=token),
                             "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1", **(extra_env or {})})
        envs = rank_envs(base, 0, world_size)
        log.info("starting %d ranks (main address 127.0.0.1:%d, %d thread(s) each)", world_size, port, threads)
        return run_ranks([*TRAINER_COMMAND, *train_argv], list(enumerate(envs)), logs,
                         stop_grace_s=GRACE.kill_after_for(train_argv), new_session=True)


class LocalGang:
    """The node agent's role for ``cuetrain local`` (:class:`trainer.agent.nodeagent.GangRole`): one generation =
    every rank started here once; each restart adds ``--resume``; no backoff (nothing shared to spare)."""

    counts_restarts = True

    def __init__(self, train_argv: list[str], world_size: int, sync_interval: int, logs: RankLogs,
                 threads: int, max_restarts: int, extra_env: Mapping[str, str] | None = None) -> None:
        self.argv, self.world_size, self.sync_interval = list(train_argv), world_size, sync_interval
        self.logs, self.threads, self.max_restarts = logs, threads, max_restarts
        self.extra_env = dict(extra_env or {})  # added to every rank's environment
        self.restarts = 0

    def form(self, previous: Ended | None) -> Generation:
        if previous is not None:
            self.restarts += previous.state is WorkerState.FAILED
            if "--resume" not in self.argv:
                self.argv.append("--resume")
        number = 1 if previous is None else previous.generation.number + 1
        return Generation(number, resume="--resume" in self.argv, restarts=self.restarts)

    def run(self, generation: Generation) -> GangExit:
        return _run_gang(self.argv, self.world_size, self.sync_interval, self.logs, self.threads, self.extra_env)

    def judge(self, generation: Generation, result: GangExit) -> tuple[WorkerState, int]:
        return judge_exit(generation, result, self.logs.paths)

    def stopped(self, ended: Ended) -> int:
        result = ended.result
        said = f": rank {result.failure.rank}: {result.failure.message}" if result.failure else ""
        log.error("the gang exited with code %d (%s)%s%s; not restarting", result.code, describe(result.code),
                  " after SIGTERM" if result.terminated else "", said)
        return result.code

    def budget_spent(self, ended: Ended, max_restarts: int) -> int:
        log.error("the gang exited with code %d (%s) and --max-restarts %d is spent", ended.code,
                  describe(ended.code), max_restarts)
        return ended.code

    def pause(self, ended: Ended) -> float:
        if ended.state is WorkerState.FAILED:
            log.warning("restarting the gang from the latest checkpoint (restart %d of %d)", self.restarts + 1,
                        self.max_restarts)
        else:
            log.info("the gang stopped at a checkpoint to change size; starting it again")
        return 0.0


def launch_local(train_argv: list[str], world_size: int, run_dir: str, *, sync_interval: int = 1,
                 max_restarts: int = 0, threads_per_rank: int | None = None,
                 progress_steps: int | None = None) -> int:
    """Run ``world_size`` ranks here; restart the whole gang with ``--resume`` up to ``max_restarts`` times.

    Args:
        train_argv: ``cuetrain train`` arguments (must include ``--run-dir run_dir``).
        world_size: ranks to start [processes].
        run_dir: the run directory (per-rank logs and this supervisor's ``local.log`` go to its ``logs/``).
        sync_interval: ``COPYCAT_SYNC_INTERVAL`` [steps].
        max_restarts: gang restarts after a failure [count].
        threads_per_rank: ``OMP_NUM_THREADS`` per rank (default: CPU cores // world size, at least 1).
        progress_steps: the run's ``--steps``: show one progress bar and only the ranks' warnings, errors and
            tracebacks on the terminal (:class:`trainer.agent.progress.Console`); None: every rank line, as a
            farm frame's log has them. The log files get every line either way.

    With ``CUETRAIN_EXPORT_ONNX`` on (the default) the ranks skip ``model.onnx`` and, once the gang succeeded, a
    detached process writes it (:data:`EXPORT_COMMAND`, :mod:`trainer.export.deferred`): the run returns when
    ``model.pt``, ``model_nuke.nk`` and ``model.json`` are written, 5-15 s of CPU sooner on 2 cores.

    Returns: 0 on success, else the failing rank's exit code.

    It holds the run directory's lease (``trainer.record.lease``) for the whole gang, restarts included.

    Raises:
        ConfigError: ``world_size`` < 1 or ``max_restarts`` < 0.
        LeaseHeld: a live run holds the run directory (exit code 2; nothing written).
        EnvError: ``CUETRAIN_EXPORT_ONNX`` is not 0 or 1 (found before any rank starts).
        KeyboardInterrupt: Ctrl-C, after every rank was stopped.
    """
    if world_size < 1 or max_restarts < 0:
        raise ConfigError(f"--world-size {world_size} must be >= 1 and --max-restarts {max_restarts} >= 0")
    paths = RunPaths.of(run_dir)
    threads = threads_per_rank or max(1, (os.cpu_count() or 1) // world_size)
    onnx_later = read_export_onnx()  # the ranks write model.pt only; model.onnx follows off the critical path
    with contextlib.ExitStack() as stack:
        lease = stack.enter_context(RunLease(paths, "cuetrain local"))  # a live run there: LeaseHeld, nothing written
        paths.create()
        stack.enter_context(log_file(paths.local_log, FILE_MODE))  # this supervisor's INFO records
        console = None if progress_steps is None else stack.enter_context(Console(paths, progress_steps))
        logs = RankLogs(paths, prefix=True, stream=console)
        stack.callback(logs.close)
        role = LocalGang(train_argv, world_size, sync_interval, logs, threads, max_restarts,
                         {"CUETRAIN_RUN_LEASE": lease.lease.holder, **({"CUETRAIN_EXPORT_ONNX": "0"} if onnx_later
                                                                       else {})})
        code = NodeAgent(role, max_restarts).run()
        if code == 0 and onnx_later:
            start_onnx_export(paths, lease)
        return code


def start_onnx_export(paths: RunPaths, lease: RunLease | None = None) -> int | None:
    """Start :data:`EXPORT_COMMAND` for the run in ``paths``, detached (its own session, so it outlives this
    process and a closed terminal; output appended to ``logs/export.log``), after marking ``model.onnx`` pending in
    ``model.json`` (:data:`PENDING_KEY`; the export clears it); returns its pid, None when it could not be started
    (logged: the run keeps ``model.pt``, as when the ONNX export fails). ``lease``, the run directory's, is handed to
    the export (``CUETRAIN_RUN_LEASE``; :meth:`trainer.record.lease.RunLease.hand_over`), so no other run writes
    there until ``model.onnx`` is written; it stays this process's when the export cannot start."""
    export_log = paths.logs / "export.log"
    try:
        atomic_write_json(paths.model_meta, {**read_json(paths.model_meta), PENDING_KEY: ["model.onnx"]})
        with open(export_log, "ab") as out:
            os.chmod(export_log, FILE_MODE)
            env = None if lease is None else environ_with({"CUETRAIN_RUN_LEASE": lease.lease.holder})
            proc = subprocess.Popen([*EXPORT_COMMAND, "--run-dir", str(paths.root)], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        if lease is not None:
            lease.hand_over()
    except (OSError, RunDirError) as exc:
        log.warning("model.onnx not written: cannot start its export (%s)", exc)
        return None
    log.info("model.onnx: written in the background by pid %d (%s)", proc.pid, export_log)
    return proc.pid

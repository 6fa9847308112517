"""The soak's ``cuetrain local`` path: one supervisor (the node agent) with 2 ranks, and the faults it can take.

The supervisor runs as ``python -m trainer.cli local --max-restarts R`` in a session of its own (a stand-in for a farm
frame's process group); its ranks are each in their own session (``trainer.agent.launch``). The soak plays the
operator (or the farm's retry): when the supervisor itself exits for a fault that ends it (killed, preempted, run.json
unwritable), the soak undoes what it did and starts the same command again with ``--resume``. A full run directory
ends nothing: rank 0 rides it out (``trainer.record.storage``) and trains on.

Root-only kinds: the run directory lives on a tmpfs of the soak's own (``mount -t tmpfs -o size=...``), which can be
filled (disk full) and whose files take ``chattr +i`` (tmpfs supports the immutable flag since Linux 6.0; plain
``chmod`` does not stop root, the soak's user). Without root the run directory is a plain folder and those kinds are
not drawn.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import psutil

from lib.soak_plan import Fault, RunConfig, stop_hold_s
from trainer.core.exitcodes import ExitCode

log = logging.getLogger("soak")

TMPFS_SIZE_MB = 48  # the run directory's own filesystem [MB]: 3 checkpoints of 3 MB, logs, held-out outputs
HOLD_S = 3.0  # seconds a disk-full or unwritable run.json lasts before the soak undoes it
SECOND_SUBMIT_WAIT_S = 5.0  # seconds the soak waits for a second submit to be refused before it stops it [s]


def root_unavailable() -> str | None:
    """None when the root-only kinds can run here (root, ``mount``, ``chattr``), else why not."""
    if os.geteuid() != 0:
        return "not root: no tmpfs of the soak's own, so disk_full and runjson_immutable are not drawn"
    missing = [tool for tool in ("mount", "umount", "chattr") if shutil.which(tool) is None]
    return f"{', '.join(missing)} missing: disk_full and runjson_immutable are not drawn" if missing else None


@contextlib.contextmanager
def run_filesystem(folder: Path, own_fs: bool, keep: Path | None = None):
    """``folder/run`` on a tmpfs of ``TMPFS_SIZE_MB`` mounted at ``folder`` (``own_fs``), else a plain folder; a
    tmpfs's run directory is copied to ``keep`` (when given) before it is unmounted."""
    folder.mkdir(parents=True, exist_ok=True)
    if own_fs:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE_MB}m,mode=0750", "cuetrain-soak",
                        str(folder)], check=True)
    try:
        yield folder / "run"
    finally:
        if own_fs:
            subprocess.run(["chattr", "-R", "-i", str(folder)], check=False, capture_output=True)
            if keep is not None and (folder / "run").is_dir():
                shutil.copytree(folder / "run", keep, dirs_exist_ok=True)
            subprocess.run(["umount", "-l", str(folder)], check=False)


def _child_env() -> dict[str, str]:
    from common import child_pythonpath

    return {**os.environ, "PYTHONPATH": child_pythonpath(), "OMP_NUM_THREADS": "1", "CUETRAIN_EXPORT_ONNX": "0"}


def _kill_tree(proc: psutil.Process) -> None:
    with contextlib.suppress(psutil.Error):
        procs = [proc, *proc.children(recursive=True)]
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()


class LocalDriver:
    """One ``cuetrain local`` run under the soak.

    Args:
        cfg: the run's settings; data: (Input folder, Ground Truth folder); run_dir: the run directory;
        out_dir: where the supervisors' output goes (outside the run directory: it may be full).
    """

    path = "local"
    can_restart = True  # the soak starts a supervisor that a fault ended again, with --resume

    def __init__(self, cfg: RunConfig, data: tuple[Path, Path], run_dir: Path, out_dir: Path) -> None:
        self.cfg, self.run_dir, self.out_dir = cfg, run_dir, out_dir
        self.argv = cfg.train_argv(str(data[0]), str(data[1]), str(run_dir))
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.extra_attempts = 0  # attempts a second writer recorded (today's known gap)
        self.notes: list[str] = []

    def command(self, resume: bool) -> list[str]:
        """The supervisor's command line."""
        return [sys.executable, "-m", "trainer.cli", "local", "--world-size", str(self.cfg.world_size),
                "--max-restarts", str(self.cfg.max_restarts), *self.argv, *(["--resume"] if resume else [])]

    def start(self, resume: bool = False) -> subprocess.Popen[bytes]:
        """Start a supervisor (its own session); output to ``out_dir/supervisor_N.out``."""
        self.starts += 1
        with open(self.out_dir / f"supervisor_{self.starts}.out", "wb") as out:
            proc = subprocess.Popen(self.command(resume), stdout=out, stderr=subprocess.STDOUT, env=_child_env(),
                                    start_new_session=True)
        self.proc = proc
        return proc

    def exit_code(self) -> int | None:
        """The current supervisor's exit code (None while it runs)."""
        return None if self.proc is None else self.proc.poll()

    def ranks(self) -> dict[int, psutil.Process]:
        """The current supervisor's trainer processes by rank."""
        out: dict[int, psutil.Process] = {}
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children():
                with contextlib.suppress(psutil.Error, ValueError):
                    out[int(child.environ()["COPYCAT_RANK"])] = child
        return out

    def _rank(self, target: int) -> psutil.Process:
        ranks = self.ranks()
        if not ranks:
            raise RuntimeError("no rank is running")
        return ranks.get(target) or next(iter(ranks.values()))

    def inject(self, fault: Fault) -> Callable[[], None] | None:
        """Do ``fault``; returns what undoes it (the soak calls it :data:`HOLD_S` later, or before a relaunch)."""
        return getattr(self, f"_{fault.kind}")(fault)

    def _kill_rank(self, fault: Fault) -> None:
        self._rank(fault.target).kill()

    def _kill_agent(self, fault: Fault) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)

    def _kill_frame(self, fault: Fault) -> None:
        procs = [psutil.Process(self.proc.pid), *self.ranks().values()]
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()

    def _sigstop_rank(self, fault: Fault) -> None:
        rank = self._rank(fault.target)
        rank.suspend()
        timer = threading.Timer(stop_hold_s(self.cfg.collective_timeout_s), lambda: _quietly(rank.resume))
        timer.daemon = True
        timer.start()

    def _sigterm_rank(self, fault: Fault) -> None:
        self._rank(fault.target).terminate()

    def _sigterm_agent(self, fault: Fault) -> None:
        self.proc.terminate()

    def _disk_full(self, fault: Fault) -> Callable[[], None]:
        filler = self.run_dir.parent / "filler"
        with open(filler, "wb") as fh:
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * (1 << 20))
                    fh.flush()
        return lambda: filler.unlink(missing_ok=True)

    def _truncate_ckpt(self, fault: Fault) -> None:
        from trainer.record.rundir import RunPaths

        newest = RunPaths.of(self.run_dir).list_checkpoints()[-1][1]
        os.truncate(newest, newest.stat().st_size // 2)
        self._rank(fault.target).kill()

    def _runjson_immutable(self, fault: Fault) -> Callable[[], None]:
        run_json = self.run_dir / "run.json"
        subprocess.run(["chattr", "+i", str(run_json)], check=True)
        self._rank(fault.target).kill()
        return lambda: subprocess.run(["chattr", "-i", str(run_json)], check=True)

    def _second_submit(self, fault: Fault) -> Callable[[], None]:
        from lib.soak_checks import judge_second_submit

        started = time.monotonic()
        with open(self.out_dir / "second_submit.out", "ab") as out:
            second = subprocess.Popen(self.command(resume=True), stdout=out, stderr=subprocess.STDOUT,
                                      env=_child_env(), start_new_session=True)

        def judge() -> None:  # the first gang trains on meanwhile
            try:
                code = second.wait(max(0.1, SECOND_SUBMIT_WAIT_S - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                code = None
                _kill_tree(psutil.Process(second.pid))  # every process at once: none of them records a failure
                second.wait()
            ok, note = judge_second_submit(code)
            self.notes.append(note if ok else f"PROBLEM: {note}")
            self.extra_attempts += code != ExitCode.USAGE  # its rank 0 may have recorded an attempt

        return judge

    def processes(self) -> list[psutil.Process]:
        """Every live process of this run: the supervisor's tree and anything naming the run directory."""
        found = {}
        for p in psutil.process_iter(["cmdline"]):
            if str(self.run_dir) in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid():
                found[p.pid] = p
        return list(found.values())

    def kill_all(self) -> None:
        """SIGKILL every process of this run (after a hang)."""
        for p in self.processes():
            _kill_tree(p)


def _quietly(fn: Callable[[], object]) -> None:
    with contextlib.suppress(psutil.Error):
        fn()


@dataclass(frozen=True)
class Exited:
    """How a supervisor that the soak restarts ended: code, and run.json's state, failure kind and error."""

    code: int
    state: str
    failure_kind: str
    error: str

    def words(self) -> str:
        """One line for the notes."""
        kind = f"/{self.failure_kind}" if self.failure_kind else ""
        return f"exit {self.code}, run.json {self.state}{kind}" + (f": {self.error[:90]}" if self.error else "")


def wait_quiet(driver: LocalDriver, timeout_s: float = 10.0) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for every process of the run to end; returns those still alive (orphans)."""
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in driver.processes() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]) and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    return left

"""The soak's farm path: jobs submitted through pyoutline to the Cuebot double, run by two real RQDs.

The farm is the recovery tests' (tests/cue_plugin/test_e2e_training.py ``Farm``: the double and 2 RQDs with
``RQD_BECOME_JOB_USER=False``), started once for the whole soak. Each run is one 2-frame job of the soak's tiny
config; recovery is the farm's own: the node agent in every frame restarts the gang, and Cuebot retries a frame whose
process died (137 is retried whatever the retry count). The soak never restarts anything here: a job that finishes
failed is a lost run.

Kinds here: a rank's trainer killed or stopped past the collective timeout, a frame's node agent (the frame process)
killed, a whole frame killed (its process group, as RQD's kill does), a truncated newest checkpoint, and the Cuebot
double stopped for 3 s and started again on its port (frames train on; RQD's reports wait). Not here:
``sigterm_agent`` (a frame preempted twice spends the layer's one Cuebot retry:
tests/cue_plugin/test_e2e_recovery.py covers it once) and ``elastic`` (a job's setting, not a fault: elastic 3-frame
jobs on this farm are a path of their own, :mod:`soak_elastic`, which starts the farm with a third RQD).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path
from typing import Callable, Iterator

import psutil

from lib.soak_plan import Fault, RunConfig, stop_hold_s

FARM_KINDS = ("kill_rank", "kill_agent", "kill_frame", "sigstop_rank", "truncate_ckpt", "cuebot_stop")
DESCRIBE_EVERY_S = 0.5  # seconds between asking the double for the job's state [s]
STOP_POLLING_S = 15.0  # how long ``kill_all`` waits for a describe in flight to return [s] (pycue's timeout: 10 s)


def farm_unavailable() -> str | None:
    """None when the farm can run here, else why not (RQD runs frames through /usr/bin/time)."""
    if not os.path.exists("/usr/bin/time"):
        return "/usr/bin/time missing (RQD runs frames through it)"
    try:
        import opencue  # noqa: F401
        import rqd  # noqa: F401
    except ImportError as exc:
        return f"cannot import {exc.name} (pip install -e '.[all]')"
    return None


@contextlib.contextmanager
def started_farm(workdir: Path, rqds: int = 2) -> Iterator[object]:
    """The double and ``rqds`` RQDs (one frame per host: 3 for an elastic 3-frame job), pycue pointed at them;
    stopped after (with anything they left behind)."""
    from tests.cue_plugin.test_e2e_training import Farm
    from tests.cuebot.fixtures import use_pycue

    farm = Farm(rqds)
    try:
        farm.start()
        with use_pycue(farm.cuebot.address):
            yield farm
    finally:
        farm.stop()
        for p in psutil.process_iter(["cmdline"]):
            if str(farm.workdir) in " ".join(p.info["cmdline"] or []):
                with contextlib.suppress(psutil.Error):
                    p.kill()


def stop_cuebot(double) -> Callable[[], None]:
    """Stop the double's gRPC server; returns what serves the same farm state again on the same port (RQDs and
    frames keep its address). Reaches into ``tests.cuebot.double.CuebotDouble``'s server the way its ``start``
    builds it.

    Raises (from the returned callable):
        RuntimeError: the port was taken meanwhile.
    """
    import grpc
    from concurrent import futures

    from tests.cuebot.double import GRPC_WORKERS, register_servicers

    double._server.stop(grace=0).wait(5)

    def start_again() -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=GRPC_WORKERS,
                                                        thread_name_prefix="cuebot-double"))
        register_servicers(server, double.state, double._dispatcher, double.log_root)
        if server.add_insecure_port(f"127.0.0.1:{double.port}") != double.port:
            raise RuntimeError(f"the Cuebot double could not bind 127.0.0.1:{double.port} again")
        server.start()
        double._server = server

    return start_again


def _find(run_dir: Path, marker: str, variable: str) -> dict[int, psutil.Process]:
    """Processes whose command line holds ``marker`` and the run directory, by the value of ``variable``."""
    out: dict[int, psutil.Process] = {}
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if marker in cmd and any(str(run_dir) in c for c in cmd):
            with contextlib.suppress(psutil.Error, KeyError, ValueError):
                out[int(p.environ()[variable])] = p
    return out


class FarmDriver:
    """One 2-frame job under the soak (the :class:`soak_local.LocalDriver` interface)."""

    path = "farm"
    can_restart = False  # the frames and Cuebot restart the job; the soak never does

    def __init__(self, cfg: RunConfig, data: tuple[Path, Path], run_dir: Path, out_dir: Path, farm) -> None:
        self.cfg, self.data, self.run_dir, self.farm = cfg, data, run_dir, farm
        self.cue = self.handle = None
        self.notes: list[str] = []
        self.extra_attempts = 0
        self._code: int | None = None
        self._closed = threading.Event()
        self._poller: threading.Thread | None = None

    def start(self, resume: bool = False) -> None:
        """Submit the job (``resume``: the soak never restarts a farm job; the farm does)."""
        if resume:
            raise RuntimeError("a farm job is restarted by its frames and Cuebot, not by the soak")
        from cue_plugin.submit import templates
        from cue_plugin.submit.opencue_farm import OpenCueFarm
        from trainer.core.config import TrainConfig

        c = self.cfg
        train = TrainConfig(input_dir=str(self.data[0]), target_dir=str(self.data[1]), run_dir=str(self.run_dir),
                            steps=c.steps, batch_size=c.batch, crop_size=c.crop, model_size="small", log_interval=5,
                            checkpoint_interval=c.interval, contact_sheet_interval=10 * c.steps, precision="fp32",
                            seed=c.seed, collective_timeout_s=c.collective_timeout_s, stop_grace_s=c.stop_grace_s,
                            gang_timeout_s=c.gang_timeout_s)
        job = templates.make_job(train, template="cpu-test", world_size=c.world_size, show="cuetrain", shot="soak",
                                 user="trainer", extra_env=self.job_env(), rendezvous_timeout_s=60, max_retries=1,
                                 max_restarts=c.max_restarts, **self.job_options())
        self.cue = OpenCueFarm(hosts=[self.cuebot_address()], allow_root=True)
        self.handle = self.cue.submit(job)
        self.start_polling()

    def start_polling(self) -> None:
        """Ask the job's state every :data:`DESCRIBE_EVERY_S` from a thread of its own until it ends or
        :meth:`kill_all`. A describe can block for seconds (pycue retries every 0.5 s while the double is away, and
        gRPC backs off reconnecting after a ``cuebot_stop``); asked inline, it once stalled the soak's wait for a
        fault's step until the job had finished (100-fault soak at e7eb8cb, farm run 4)."""
        self._poller = threading.Thread(target=self._poll, name="soak-describe", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while self._code is None and not self._closed.is_set():
            self.poll_state()
            self._closed.wait(DESCRIBE_EVERY_S)

    def cuebot_address(self) -> str:
        """Where pycue and the frames reach the Cuebot double."""
        return self.farm.cuebot.address

    def job_env(self) -> dict[str, str]:
        """The frames' extra environment (every rank on loopback: ``CUETRAIN_MAIN_HOST``)."""
        from tests.conftest import CHILD_PYTHONPATH

        return {"PYTHONPATH": CHILD_PYTHONPATH, "OMP_NUM_THREADS": "1", "CUETRAIN_MAIN_HOST": "127.0.0.1",
                "CUEBOT_HOSTS": self.cuebot_address(), "CUETRAIN_EXPORT_ONNX": "0"}

    def job_options(self) -> dict[str, object]:
        """More ``templates.make_job`` keywords (none here)."""
        return {}

    def exit_code(self) -> int | None:
        """0 when the job FINISHED succeeded, 1 when it FINISHED otherwise or a frame is DEAD, None while it runs
        (as :meth:`poll_state` last saw it; never blocks)."""
        return self._code

    def poll_state(self) -> None:
        """Describe the job once (blocks while pycue retries) and record its end: 0 when it FINISHED succeeded, 1
        when it FINISHED otherwise or a frame is DEAD (Cuebot will not start it again: the job can never finish;
        the frame is noted). An unreachable double (``cuebot_stop``) changes nothing."""
        if self._code is not None:
            return
        with contextlib.suppress(Exception):  # the double may be away (cuebot_stop)
            status = self.cue.describe(self.handle)
            dead = {n: f for n, f in status.frames.items() if f.get("state") == "DEAD"}
            if status.native_state.startswith("FINISHED"):
                self._code = 0 if status.state.value == "succeeded" else 1
            elif dead:
                self.notes.append("PROBLEM: " + "; ".join(
                    f"frame {n} DEAD (exit status {f.get('exit_status')}, retries {f.get('retries')})"
                    for n, f in sorted(dead.items())))
                self._code = 1

    def ranks(self) -> dict[int, psutil.Process]:
        """The trainers of this job by rank."""
        return _find(self.run_dir, "trainer", "COPYCAT_RANK")

    def frames(self) -> dict[int, psutil.Process]:
        """The frame processes (node agents) of this job by frame number."""
        return _find(self.run_dir, "cue_plugin.frame", "CUE_IFRAME")

    def inject(self, fault: Fault) -> Callable[[], None] | None:
        """Do ``fault`` (see the module doc)."""
        ranks, frames = self.ranks(), self.frames()
        target = fault.target
        if fault.kind == "kill_rank":
            ranks[target].kill()
        elif fault.kind == "kill_agent":
            frames[target].kill()
        elif fault.kind == "kill_frame":
            os.killpg(os.getpgid(frames[target].pid), signal.SIGKILL)
        elif fault.kind == "sigstop_rank":
            ranks[target].suspend()
            timer = threading.Timer(stop_hold_s(self.cfg.collective_timeout_s), lambda: _quietly(ranks[target].resume))
            timer.daemon = True
            timer.start()
        elif fault.kind == "truncate_ckpt":
            from trainer.record.rundir import RunPaths

            newest = RunPaths.of(self.run_dir).list_checkpoints()[-1][1]
            os.truncate(newest, newest.stat().st_size // 2)
            ranks[target].kill()
        elif fault.kind == "cuebot_stop":
            return stop_cuebot(self.farm.cuebot)  # back after soak_local.HOLD_S
        else:
            return self.inject_more(fault)
        return None

    def inject_more(self, fault: Fault) -> Callable[[], None] | None:
        """A kind only a subclass does (:class:`soak_netns.NetnsDriver`).

        Raises:
            ValueError: ``fault.kind`` is not a kind of this path.
        """
        raise ValueError(f"fault kind {fault.kind} is not one of the farm's {FARM_KINDS}")

    def processes(self) -> list[psutil.Process]:
        """Every live process naming the run directory (frames, trainers)."""
        return [p for p in psutil.process_iter(["cmdline"]) if str(self.run_dir) in " ".join(p.info["cmdline"] or [])
                and p.pid != os.getpid()]

    def kill_all(self) -> None:
        """Stop asking the job's state, kill the job's processes (after a hang) and the job."""
        self._closed.set()
        if self._poller is not None:
            self._poller.join(STOP_POLLING_S)
        for p in self.processes():
            _quietly(p.kill)
        with contextlib.suppress(Exception):
            self.cue.cancel(self.handle)


def _quietly(fn: Callable[[], object]) -> None:
    with contextlib.suppress(psutil.Error):
        fn()

"""RqdProcess: one real opencue-rqd (`python -m rqd`) on loopback, reporting to a Cuebot double.

How RQD 1.37 is configured here (rqd/rqconstants.py reads an `[Override]` section from the file
given with `-c`; `RQD_CONFIG_FILE` works too):

  OVERRIDE_CUEBOT = 127.0.0.1          Cuebot host (else $CUEBOT_HOSTNAME, else localhost)
  CUEBOT_GRPC_PORT = <cuebot_port>     where RQD sends its reports
  RQD_GRPC_PORT = <rqd_port>           where RQD serves RqdInterface: one per RQD
  RQD_NETWORK_INTERFACE = lo           RQD binds the interface's address (127.0.0.1), not [::]
  OVERRIDE_HOSTNAME = <hostname>       the host name RQD reports: one per RQD
  RQD_TAGS = rqdport_<rqd_port>        how the double learns which port to dial (farm_servicers)
  OVERRIDE_NIMBY = False               never lock the host for a desktop user (also --nimbyoff)
  RQD_BECOME_JOB_USER = True           only when root: run frames as RunFrame.user_name
  [UseHostEnvVar] <names>              the CPU a frame sees (CPU_EMULATION_VARS, those set here)

Running as root (RQD_BECOME_JOB_USER): RQD drops its effective uid to the `daemon` account,
runs each frame as `/usr/bin/time -p -o <stat> /bin/su <user_name> -c <command file>`, and
opens the frame log as RunFrame.uid with egid LAUNCH_FRAME_USER_GID (20 unless overridden).
So the frame user must exist with a login shell (`su` refuses nologin accounts); RQD tries
`useradd -u <uid> -g <gid> <user>` when the name is unknown (RQD_CREATE_USER_IF_NOT_EXISTS),
which fails when the uid is taken by another name. The log dir must be writable by that uid
(the double creates job log dirs 0o777, as Cuebot does) and every parent traversable.
RQD refuses a RunFrame with uid <= 0. Not root: frames run as the test user; no `su`.

RQD answers each frame with a FrameCompleteReport right after it exits and pings every 5-30 s.
RQD's temporary directory (TMPDIR: command files, `time` stat files, the frames' working
directory) is `<workdir>/tmp`, so what a killed RQD leaves behind goes with the workdir; the
workdir must be traversable by the frame user. RQD's own output goes to `<workdir>/rqd.log`.
stop() sends SIGTERM (RQD exits at once, leaving running frames behind), then kills whatever the
RQD had started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import psutil
from opencue_proto import host_pb2, host_pb2_grpc, rqd_pb2, rqd_pb2_grpc

from tests.cuebot.farm_servicers import RQD_PORT_TAG

# `python -m rqd`, after importing what RQD would import only once it has dropped its euid to
# `daemon`: an interpreter installed under a private home (e.g. pyenv in /root, mode 0700) is
# unreadable to `daemon`, and RQD would die on its first lazy import. The config comes from
# $RQD_CONFIG_FILE, since rqconstants looks for "-c" anywhere in sys.argv.
BOOTSTRAP = """
import sys
sys.argv[0] = "rqd"
import concurrent.futures.thread
import runpy
runpy.run_module("rqd", run_name="__main__", alter_sys=True)
"""


#: What makes this machine run as another kind of CPU (``pytest --cpu-bf16 0|1``: tests/cpu_bf16; torch's and
#: oneDNN's kernel limits of ``bench_trainer.py --cpu avx2``). RQD gives a frame a fresh environment (rqcore's
#: ``frameEnv``) but passes the host variables named in rqd.conf's ``[UseHostEnvVar]`` section: those set in this
#: process are named there, so a frame sees the CPU its host emulates, as a frame on a real host sees that host's.
CPU_EMULATION_VARS = ("CUETRAIN_TEST_CPU_BF16", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


class RqdProcess:
    def __init__(self, cuebot_port: int, rqd_port: int, hostname: str, workdir: Path,
                 extra_env: dict | None = None, *, overrides: dict[str, str] | None = None,
                 become_job_user: bool | None = None, ip: str = "127.0.0.1",
                 prefix: list[str] | tuple[str, ...] = ()) -> None:
        """`overrides`: extra `[Override]` entries for rqd.conf (e.g. LAUNCH_FRAME_USER_GID).
        `become_job_user`: RQD_BECOME_JOB_USER, by default on when this process is root.
        `ip`: where RQD serves (the address of its RQD_NETWORK_INTERFACE). `prefix`: a command that
        runs RQD elsewhere, e.g. in a network namespace (tests/multihost); it must exec RQD."""
        self.ip = ip
        self.prefix = list(prefix)
        self.cuebot_port = cuebot_port
        self.rqd_port = rqd_port
        self.hostname = hostname
        self.workdir = Path(workdir)
        self.extra_env = dict(extra_env or {})
        self.become_job_user = os.geteuid() == 0 if become_job_user is None else become_job_user
        self.overrides = dict(overrides or {})
        self.config_path = self.workdir / "rqd.conf"
        self.log_path = self.workdir / "rqd.log"
        self.tmp_dir = self.workdir / "tmp"  # RQD's command/stat files and frames' cwd
        self.process: subprocess.Popen | None = None
        self._children: dict[int, psutil.Process] = {}

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.rqd_port}"

    def write_config(self) -> Path:
        entries = {
            "OVERRIDE_CUEBOT": "127.0.0.1", "CUEBOT_GRPC_PORT": str(self.cuebot_port),
            "RQD_GRPC_PORT": str(self.rqd_port), "RQD_NETWORK_INTERFACE": "lo",
            "OVERRIDE_HOSTNAME": self.hostname, "RQD_TAGS": f"{RQD_PORT_TAG}{self.rqd_port}",
            "OVERRIDE_NIMBY": "False", "USE_NIMBY_PYNPUT": "False",
            "RQD_BECOME_JOB_USER": str(self.become_job_user), "CONSOLE_LOG_LEVEL": "INFO",
            **self.overrides}
        self.workdir.mkdir(parents=True, exist_ok=True)
        host_vars = [name for name in CPU_EMULATION_VARS if os.environ.get(name)]
        self.config_path.write_text(
            "[Override]\n" + "".join(f"{key} = {value}\n" for key, value in entries.items())
            + ("[UseHostEnvVar]\n" + "".join(f"{name}\n" for name in host_vars) if host_vars else ""))
        return self.config_path

    def start(self, timeout: float = 30) -> None:
        """Spawn RQD and wait until it serves its port and the double knows the host."""
        self.spawn()
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def spawn(self) -> None:
        """Start the RQD process without waiting for it (see wait_ready)."""
        self.write_config()
        self.tmp_dir.mkdir(exist_ok=True)
        self.tmp_dir.chmod(0o1777)  # like /tmp: the frame user runs and writes in it
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "CUEBOT_HOSTNAME": "127.0.0.1",
               "RQD_CONFIG_FILE": str(self.config_path), "TMPDIR": str(self.tmp_dir),
               **self.extra_env}
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*self.prefix, sys.executable, "-c", BOOTSTRAP, "--nimbyoff"],
                cwd=self.workdir, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout: float) -> None:
        """Wait until RQD answers on its port and has reported its startup to the double."""
        deadline = time.monotonic() + timeout
        rqd_channel = grpc.insecure_channel(self.address)
        cuebot_channel = grpc.insecure_channel(f"127.0.0.1:{self.cuebot_port}")
        try:
            serving = False
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"RQD {self.hostname} exited with {self.process.returncode}"
                                       f":\n{self.log_tail()}")
                try:
                    if not serving:  # this RQD process answers on its own port
                        rqd_pb2_grpc.RqdInterfaceStub(rqd_channel).ReportStatus(
                            rqd_pb2.RqdStaticReportStatusRequest(), timeout=2)
                        serving = True
                    host_pb2_grpc.HostInterfaceStub(cuebot_channel).FindHost(
                        host_pb2.HostFindHostRequest(name=self.hostname), timeout=2)
                    return
                except grpc.RpcError:
                    time.sleep(0.2)
            raise TimeoutError(f"RQD {self.hostname} did not report its startup in {timeout}s:"
                               f"\n{self.log_tail()}")
        finally:
            rqd_channel.close()
            cuebot_channel.close()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM RQD (SIGKILL after `timeout`), then kill the frames it left running."""
        if self.process is None:
            return
        try:
            self._children = {p.pid: p for p in
                              psutil.Process(self.process.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pass
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        for child in self._children.values():
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(list(self._children.values()), timeout=timeout)
        self._children.clear()
        self.process = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no RQD log)"

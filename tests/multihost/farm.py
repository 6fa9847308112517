"""The Cuebot double on a bridge with one real opencue-rqd per namespace "host" (see bed.py).

Each RQD runs inside its host (``NetnsBed.command``), serves RqdInterface on the host's ``eth0``
address (``RQD_NETWORK_INTERFACE = eth0``) and reports that IP as its host name, RQD's default
(``RQD_USE_IP_AS_HOSTNAME``); the double dials it there (farm_servicers.rqd_address) and serves
pycue/RQD on the bridge address ``10.77.N.1`` as well as on loopback. Every host reports
:data:`HOST_CORES` cores (rqd.conf ``OVERRIDE_CORES``; RQD 1.37 re-reads the memory from
/proc/meminfo after ``OVERRIDE_MEMORY``, so memory cannot be faked the same way), and the double's
resource booking (dispatcher.fits) decides where frames go: a frame asking for
:data:`FRAME_CORES` cores fills a host.

RQD runs frames as its own user (``RQD_BECOME_JOB_USER = False``), as in
tests/cue_plugin/test_e2e_training.py, so frames can import this interpreter's torch.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from tests.cuebot.double import CuebotDouble
from tests.cuebot.fixtures import RQD_START_TIMEOUT_S, frame_identity
from tests.cuebot.rqd_harness import RqdProcess
from tests.multihost.bed import IFNAME, NetnsBed, unavailable

HOST_CORES = 2
FRAME_CORES = 2.0  # the jobs' ``cores``: one frame per host, by cores
RQD_PORT = 8444  # RQD's default: every host has its own IP, so all use it


@dataclass
class MultiHostFarm:
    """The bed, the double and one RQD per host."""

    bed: NetnsBed
    cuebot: CuebotDouble
    rqds: list[RqdProcess]
    workdir: Path

    def host_of(self, ip: str) -> int:
        """Index of the host with address ``ip``."""
        return next(i for i, h in enumerate(self.bed.hosts) if h.ip == ip)

    def stop(self) -> None:
        for rqd in self.rqds:
            rqd.stop()
        self.cuebot.stop()
        leftovers = [p for p in psutil.process_iter(["cmdline"])
                     if str(self.workdir) in " ".join(p.info["cmdline"] or [])]
        for p in leftovers:  # frames a stopped RQD left behind (only this farm's)
            with contextlib.suppress(psutil.Error):
                p.kill()


def start(bed: NetnsBed) -> MultiHostFarm:
    """Start the double on the bridge and an RQD in every host of ``bed``."""
    workdir = Path(tempfile.mkdtemp(prefix="ctn-farm-"))
    workdir.chmod(0o755)
    (workdir / "logs").mkdir()
    identity = frame_identity()
    cuebot = CuebotDouble(frame_uid=identity.uid, frame_gid=identity.gid, frame_user=identity.user,
                          log_root=str(workdir / "logs"), max_frames_per_host=None, bind_host=bed.gateway)
    farm = MultiHostFarm(bed, cuebot, [], workdir)
    try:
        cuebot.start()
        for i, host in enumerate(bed.hosts):
            overrides = {"OVERRIDE_CUEBOT": bed.gateway, "RQD_NETWORK_INTERFACE": IFNAME,
                         "OVERRIDE_CORES": str(HOST_CORES)}
            farm.rqds.append(RqdProcess(cuebot.port, RQD_PORT, host.ip, workdir / f"rqd{i}", overrides=overrides,
                                        become_job_user=False, ip=host.ip, prefix=bed.command(i, [])))
        for rqd in farm.rqds:  # spawn all, then wait: they boot in parallel
            rqd.spawn()
        for rqd in farm.rqds:
            rqd.wait_ready(RQD_START_TIMEOUT_S)
    except BaseException:
        farm.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return farm


@contextlib.contextmanager
def running(hosts: int) -> Iterator[MultiHostFarm]:
    """A :class:`NetnsBed` of ``hosts`` hosts with the farm of :func:`start` on it; everything deleted after
    (namespaces, bridge, the processes the RQDs left, the work folder)."""
    with NetnsBed(hosts=hosts) as bed:
        farm = start(bed)
        try:
            yield farm
        finally:
            farm.stop()
            shutil.rmtree(farm.workdir, ignore_errors=True)


def skip_or_fail(reason: str) -> None:
    """Skip with ``reason``; fail instead when ``CUETRAIN_REQUIRE_NETNS=1`` (set by .ci/run as root on Linux)."""
    if os.environ.get("CUETRAIN_REQUIRE_NETNS") == "1":
        pytest.fail(f"multi-host tests required (CUETRAIN_REQUIRE_NETNS=1) but cannot run: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def multihost_farm():
    """A 3-host farm shared by a module's tests; skipped (with the reason) where namespaces cannot be made."""
    reason = unavailable() or (None if os.path.exists("/usr/bin/time") else "RQD runs frames through /usr/bin/time")
    if reason:
        skip_or_fail(reason)
    with running(3) as farm:
        yield farm

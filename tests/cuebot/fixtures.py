"""pytest fixtures and helpers for a Cuebot double with real RQD processes.

In tests/conftest.py:

    from tests.cuebot.fixtures import cuebot_farm  # noqa: F401  (a fixture)

    def test_render(cuebot_farm):
        farm = cuebot_farm(rqds=2)            # double + 2 RQDs, torn down after the test
        with use_pycue(farm.cuebot.address):  # pycue (and pyoutline, CueGUI) -> the double
            ...

CueGUI widgets: tests/cuebot/cuegui_setup.cuegui_session (on pytest-qt's QApplication).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.cuebot.dispatcher import FrameIdentity
from tests.cuebot.double import CuebotDouble
from tests.cuebot.rqd_harness import RqdProcess
from trainer.core.ports import free_port

RQD_START_TIMEOUT_S = 30
REQUIRE_ENV = "CUETRAIN_REQUIRE_NETNS"  # "1" (set by .ci/run): RQD and multi-host tests must run, never skip


def skip_or_fail_missing_prerequisite(reason: str) -> None:
    """Skip a test whose RQD prerequisite (``reason``, e.g. /usr/bin/time) is missing; fail instead when
    ``CUETRAIN_REQUIRE_NETNS=1``, where a skipped RQD test would hide an untested core path.

    Raises:
        pytest.fail.Exception under CUETRAIN_REQUIRE_NETNS=1, else pytest.skip.Exception.
    """
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"RQD tests required ({REQUIRE_ENV}=1) but cannot run: {reason}")
    pytest.skip(reason)
NO_LOGIN_SHELLS = ("nologin", "false", "sync", "halt", "shutdown")


def frame_identity(preferred_uid: int = 1000) -> FrameIdentity:
    """The account frames run as: RQD refuses uid 0 and `su`s to the user name, so it must be
    an existing account with a login shell. As root: `preferred_uid` if it is one, else the
    first such account with a uid in 1000..59999, else "cuetrain" (RQD then tries useradd).
    Not root: RQD cannot switch users, frames run as the current user."""
    if os.geteuid() != 0:
        me = pwd.getpwuid(os.geteuid())
        return FrameIdentity(uid=me.pw_uid, gid=me.pw_gid, user=me.pw_name)
    accounts = sorted((a for a in pwd.getpwall() if 1000 <= a.pw_uid < 60000
                       and not a.pw_shell.endswith(NO_LOGIN_SHELLS)),
                      key=lambda a: (a.pw_uid != preferred_uid, a.pw_uid))
    if accounts:
        return FrameIdentity(uid=accounts[0].pw_uid, gid=accounts[0].pw_gid,
                             user=accounts[0].pw_name)
    return FrameIdentity(uid=preferred_uid, gid=preferred_uid, user="cuetrain")


@contextlib.contextmanager
def use_pycue(address: str):
    """Point an imported pycue at `address`; restore its hosts and channel afterwards."""
    import opencue

    cuebot = opencue.Cuebot
    saved_hosts, saved_channel = list(cuebot.Hosts), cuebot.RpcChannel
    cuebot.RpcChannel = None  # keep the saved channel open: setHosts would close it
    cuebot.setHosts([address])
    try:
        yield cuebot
    finally:
        cuebot.closeChannel()
        cuebot.Hosts, cuebot.RpcChannel = saved_hosts, saved_channel


@contextlib.contextmanager
def isolate_pyoutline(session_dir: Path):
    """Undo what a pyoutline launch changes in this process: it writes each launch's session
    under outline.cfg's session_dir (~/.opencue/sessions), here `session_dir` instead, and
    OutlineLauncher.setup sets os.environ["SHOT"], restored afterwards."""
    import outline

    saved_dir, saved_shot = outline.config.get("outline", "session_dir"), os.environ.get("SHOT")
    outline.config.set("outline", "session_dir", str(session_dir))
    try:
        yield session_dir
    finally:
        outline.config.set("outline", "session_dir", saved_dir)
        if saved_shot is None:
            os.environ.pop("SHOT", None)
        else:
            os.environ["SHOT"] = saved_shot


@dataclasses.dataclass
class CuebotFarm:
    """A double with its RQDs. `workdir` (0o755) and `out_dir` (0o777) are readable and
    writable by the frame user, unlike pytest's tmp_path (0o700 under /tmp/pytest-of-root)."""

    cuebot: CuebotDouble
    rqds: list[RqdProcess]
    workdir: Path
    out_dir: Path
    identity: FrameIdentity

    @property
    def env(self) -> dict[str, str]:
        """Environment that points pycue/CueGUI processes at the double."""
        return {"CUEBOT_HOSTS": self.cuebot.address, "CUEBOT_FACILITY": "local"}

    def use_pycue(self):
        return use_pycue(self.cuebot.address)

    def stop(self) -> None:
        for rqd in self.rqds:
            rqd.stop()
        self.cuebot.stop()


def start_farm(rqds: int = 2, *, workdir: Path | None = None, **double_kwargs) -> CuebotFarm:
    """Start a double and `rqds` RQDs side by side (rqd0, rqd1, ...); stop() undoes it."""
    identity = frame_identity()
    workdir = Path(workdir or tempfile.mkdtemp(prefix="cuebot-farm-"))
    workdir.chmod(0o755)
    out_dir = workdir / "out"
    out_dir.mkdir(exist_ok=True)
    out_dir.chmod(0o777)
    (workdir / "logs").mkdir(exist_ok=True)
    (workdir / "logs").chmod(0o755)
    double_kwargs.setdefault("log_root", str(workdir / "logs"))
    cuebot = CuebotDouble(frame_uid=identity.uid, frame_gid=identity.gid,
                          frame_user=identity.user, **double_kwargs)
    farm = CuebotFarm(cuebot, [], workdir, out_dir, identity)
    try:
        cuebot.start()
        for index in range(rqds):
            farm.rqds.append(RqdProcess(cuebot.port, free_port(), f"rqd{index}",
                                        workdir / f"rqd{index}"))
        for rqd in farm.rqds:  # spawn all, then wait: the RQDs boot in parallel
            rqd.spawn()
        for rqd in farm.rqds:
            rqd.wait_ready(RQD_START_TIMEOUT_S)
    except BaseException:
        farm.stop()
        raise
    return farm


@pytest.fixture
def cuebot_farm():
    """Factory: `cuebot_farm(rqds=2, **CuebotDouble kwargs)` -> a started CuebotFarm.
    Every farm is stopped and its workdir removed after the test, pass or fail."""
    farms: list[CuebotFarm] = []

    def make(rqds: int = 2, **double_kwargs) -> CuebotFarm:
        farms.append(start_farm(rqds, **double_kwargs))
        return farms[-1]

    yield make
    for farm in farms:
        farm.stop()
        shutil.rmtree(farm.workdir, ignore_errors=True)


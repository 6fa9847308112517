"""The soak's ``netns`` path: 2-frame jobs on the 2-host network-namespace bed, one frame per host.

The bed is the multi-host tests' (tests/multihost/bed.py, tests/multihost/farm.py: a bridge, a namespace per "host"
with its own IP, a real RQD in each, the Cuebot double on the bridge), started once for the whole soak with 2 hosts.
Each run is one job of the soak's tiny config with nothing set by hand (no ``CUETRAIN_MAIN_HOST``: rank 1 reaches
rank 0 across the bridge). Recovery is the farm's own, as in tests/multihost/test_multihost.py case (c): the
surviving ranks fail at the collective timeout (or the lost-rank watch), the frames' node agents restart the gang,
which forms again once the host is back; the soak never restarts anything, and a job that finishes failed is a lost
run.

Kinds here: ``cut_host`` (a host's bridge port set down for :func:`soak_plan.stop_hold_s`, then up: its cable
pulled and plugged back), and the kill and stop kinds of the farm path (a rank's trainer, a frame's node agent, a
whole frame's process group killed; a rank SIGSTOPped). Not here: ``truncate_ckpt`` and ``cuebot_stop`` (the farm
path's; nothing in them differs across hosts) and the local-only kinds.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator

from lib.soak_farm import FarmDriver, farm_unavailable
from lib.soak_plan import Fault, stop_hold_s

NETNS_KINDS = ("cut_host", "kill_rank", "kill_agent", "kill_frame", "sigstop_rank")
HOSTS = 2  # hosts on the bed: one frame (one rank) on each


def netns_unavailable() -> str | None:
    """None when the bed can run here (Linux, root, ``ip``, ``unshare``, the farm's tools), else why not."""
    from tests.multihost.bed import unavailable

    return unavailable() or farm_unavailable()


@contextlib.contextmanager
def started_bed() -> Iterator[object]:
    """The 2-host bed with the double and an RQD per host (a ``tests.multihost.farm.MultiHostFarm``); everything
    deleted after (namespaces, bridge, processes the RQDs left)."""
    from tests.multihost.farm import running

    with running(HOSTS) as farm:
        yield farm


@contextlib.contextmanager
def pycue_at(farm) -> Iterator[None]:
    """pycue pointed at the bed's double for one run (the farm path's double is pycue's otherwise)."""
    from tests.cuebot.fixtures import use_pycue

    with use_pycue(farm.cuebot.bridge_address):
        yield


class NetnsDriver(FarmDriver):
    """One 2-frame job on the bed (the :class:`soak_local.LocalDriver` interface)."""

    path = "netns"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._timers: list[threading.Timer] = []  # the cut links' timers

    def cuebot_address(self) -> str:
        """The double's address on the bridge (the hosts reach it there)."""
        return self.farm.cuebot.bridge_address

    def job_env(self) -> dict[str, str]:
        """The frames' extra environment: no address settings (the multi-host tests' rule)."""
        env = super().job_env()
        del env["CUETRAIN_MAIN_HOST"]
        return env

    def job_options(self) -> dict[str, object]:
        """A frame asks for a whole host's cores, so the double books one frame per host."""
        from tests.multihost.farm import FRAME_CORES

        return {"cores": FRAME_CORES}

    def inject_more(self, fault: Fault) -> Callable[[], None] | None:
        """``cut_host``: the link of the host that runs frame ``fault.target`` goes down, and up again
        :func:`soak_plan.stop_hold_s` later (a timer: the link comes back even if the run ends meanwhile).

        Raises:
            ValueError: ``fault.kind`` is not a kind of this path.
            KeyError: Cuebot does not say where that frame runs.
        """
        if fault.kind != "cut_host":
            raise ValueError(f"fault kind {fault.kind} is not one of the netns path's {NETNS_KINDS}")
        host = self.farm.host_of(self.cue.describe(self.handle).frames[str(fault.target)]["host"])
        self.farm.bed.link_down(host)
        timer = threading.Timer(stop_hold_s(self.cfg.collective_timeout_s), lambda: self.farm.bed.link_up(host))
        timer.daemon = True
        timer.start()
        self._timers.append(timer)
        return None

    def kill_all(self) -> None:
        """Every link up again, then the farm path's kill (after a hang)."""
        for timer in self._timers:
            timer.cancel()
        for host in range(len(self.farm.bed.hosts)):
            with contextlib.suppress(Exception):
                self.farm.bed.link_up(host)
        super().kill_all()

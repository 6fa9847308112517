"""One live run per run directory: a lease the live run renews (``RUN_DIR/lease.json``).

A second ``cuetrain local``, ``cuetrain train`` or ``cuetrain submit`` into a run directory whose run is alive is
refused with :class:`LeaseHeld` (exit code 2, ``trainer.core.exitcodes.ExitCode.USAGE``), naming the live run's
host, pid and farm job, before it writes anything. ``flock`` cannot be trusted on the NFS shares run directories
live on, so liveness is a lease (Gray & Cheriton 1989, "Leases: An Efficient Fault-Tolerant Mechanism for
Distributed File Cache Consistency"): the holder rewrites ``lease.json`` every :attr:`LeaseConfig.renew_s` with an
expiry :attr:`LeaseConfig.ttl_s` ahead, and a lease past its expiry is stale.

Who holds it: ``cuetrain local`` (its supervisor, for the whole gang and its restarts; its ranks get
``CUETRAIN_RUN_LEASE`` and claim nothing), else rank 0 of ``cuetrain train`` (a farm frame's rank 0 among them).
``cuetrain local`` hands it to the detached ``model.onnx`` export it starts at the end (:meth:`RunLease.hand_over`;
the export gets ``CUETRAIN_RUN_LEASE`` and claims with ``adopt``), which holds it until ``model.onnx`` is written.
A lease is stale, and taken over, when it has expired, when its holder ran on this host and its pid is gone (a
SIGKILLed run never blocks ``--resume``), or when it belongs to the same farm job (``CUE_JOB_ID``: a frame retry on
another host). ``cuetrain submit`` only checks: a queued job holds no lease until its rank 0 starts.

Claiming: a new lease is created with ``link(2)`` of a temp file, which fails when the name exists, also on NFS
(the ``open(2)`` man page's advice for O_EXCL on NFS); a stale one is replaced (``os.replace``), then read back after
:attr:`LeaseConfig.settle_s`, so of two processes taking over one stale lease the later writer wins and the earlier
is refused. A claim then removes the temp files of lease writes older than :attr:`LeaseConfig.ttl_s`
(:func:`stale_lease_temps`): a holder killed between writing one and renaming it leaves it behind, and no live writer's
temp file lives that long. This module is stdlib-only: the GUI and the farm client read it.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from trainer.core.signals import pid_alive
from trainer.record.rundir import RunDirError, RunPaths, atomic_write_json, make_folder, read_json
from trainer.record.storage import RETRY_S, StorageWatch

log = logging.getLogger(__name__)

#: ``lease.json``'s record version.
LEASE_VERSION = 1
#: temp files of lease writes: ``.lease.json.XXXXXXXX.tmp`` (a renewal or takeover, ``rundir.atomic_write_json``),
#: ``.lease.HOLDER.tmp`` (a creation, linked to ``lease.json``) and that one's own ``..lease.HOLDER.tmp.XXXXXXXX.tmp``
_LEASE_TEMP = re.compile(r"^\.\.?lease\..+\.tmp$")


@dataclass(frozen=True)
class LeaseConfig:
    """Timing of a lease.

    Attributes:
        ttl_s: a lease not renewed for this long is stale [s].
        renew_s: the holder renews this often [s]; a third of ``ttl_s`` survives two missed renewals.
        settle_s: a takeover reads the lease back after this long, to see whether another process took it too [s].
    """

    ttl_s: float = 60.0
    renew_s: float = 20.0
    settle_s: float = 0.2


@dataclass(frozen=True)
class Lease:
    """``lease.json``: who holds the run directory (all times in seconds since the epoch).

    Attributes:
        holder: a random id of the holding process's claim.
        command: what holds it (``cuetrain local``, ``cuetrain train`` rank 0).
        host, pid: where the holder runs.
        job: the farm job's id (``CUE_JOB_ID``), or "" for a local run.
        started: when the lease was claimed; expires: when it goes stale unless renewed.
    """

    holder: str
    command: str
    host: str
    pid: int
    job: str = ""
    started: float = 0.0
    expires: float = 0.0
    version: int = field(default=LEASE_VERSION)

    def describe(self) -> str:
        """One line for an error: the command, host, pid and job."""
        job = f", farm job {self.job}" if self.job else ""
        return f"{self.command} on host {self.host}, pid {self.pid}{job}"


class LeaseHeld(RunDirError):
    """A live run holds the run directory (exit code 2, RunDirError's: choose another run directory or wait for
    it)."""


def read_lease(paths: RunPaths) -> Lease | None:
    """The run directory's lease, or None when there is none (or it is unreadable: a half-gone file is no lease)."""
    try:
        data = read_json(paths.lease)
        return Lease(**{k: data[k] for k in ("holder", "command", "host", "pid", "job", "started", "expires")})
    except (RunDirError, OSError, KeyError, TypeError, ValueError):
        return None


def is_stale(lease: Lease, now: float, job: str = "") -> bool:
    """True when ``lease`` no longer keeps others out (module doc): expired, its holder gone from this host, or held
    by the same farm job ``job`` (non-empty)."""
    if lease.expires <= now or (job and lease.job == job):
        return True
    return lease.host == socket.gethostname() and not pid_alive(lease.pid)


def check_free(paths: RunPaths, job: str = "", now: Callable[[], float] = time.time) -> Lease | None:
    """Refuse a run directory whose live run is another's. Writes nothing. Returns the stale lease it judged, or None
    when there was none (what a claim may replace or must create).

    Raises:
        LeaseHeld: a live lease (names its command, host, pid, job and when it expires).
    """
    current = read_lease(paths)
    if current is not None and not is_stale(current, now(), job):
        raise LeaseHeld(f"run directory {paths.root} is in use by a live run ({current.describe()}; lease renewed "
                        f"until {time.strftime('%H:%M:%S', time.localtime(current.expires))}): choose another "
                        "--run-dir, or wait for that run to end (a run that died frees it within its lease time)")
    return current


def stale_lease_temps(paths: RunPaths, before: float) -> list[Path]:
    """The temp files of lease writes (:data:`_LEASE_TEMP`) in the run directory last modified before ``before``
    [s since the epoch], sorted. Reads only; a file that vanishes while it is read is left out."""
    found = []
    try:
        names = sorted(os.listdir(paths.root))
    except FileNotFoundError:
        return []
    for name in names:
        if _LEASE_TEMP.match(name):
            try:
                if os.stat(paths.root / name).st_mtime < before:
                    found.append(paths.root / name)
            except FileNotFoundError:
                continue
    return found


class RunLease:
    """The claimed lease of one run directory, renewed by a daemon thread until :meth:`release`.

    Args:
        paths: the run directory.
        command: what holds it (:attr:`Lease.command`).
        job: the farm job's id, "" for a local run.
        config: its timing (:class:`LeaseConfig`).
        now: the clock [s since the epoch] (tests pass their own).
        adopt: the holder id of a lease handed to this process (:meth:`hand_over`): a lease with that holder is
            taken over even while it is live; "" claims as usual.

    Use as a context manager: entering claims (raises :class:`LeaseHeld`), leaving releases.
    """

    def __init__(self, paths: RunPaths, command: str, job: str = "", config: LeaseConfig = LeaseConfig(),
                 now: Callable[[], float] = time.time, adopt: str = "") -> None:
        self.paths, self.config, self._now, self._adopt = paths, config, now, adopt
        self._handed_over = False
        self.lease = Lease(uuid.uuid4().hex, command, socket.gethostname(), os.getpid(), job)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "RunLease":
        self.claim()
        self._thread = threading.Thread(target=self._renew_loop, name="run-lease", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def claim(self) -> Lease:
        """Take the lease (module doc); returns the record written.

        Raises:
            LeaseHeld: another live run holds it, or another process took it over at the same moment.
        """
        handed = read_lease(self.paths) if self._adopt else None
        if handed is not None and handed.holder == self._adopt:
            self._write(create=False)  # this process's pid, command and expiry from now on
            if self._still_mine():
                return self.lease
        for _ in range(3):
            current = check_free(self.paths, self.lease.job, self._now)  # judged and acted on as one read
            if self._write(create=current is None) and (current is None or self._still_mine()):
                self._sweep()
                return self.lease
        check_free(self.paths, self.lease.job, self._now)
        raise LeaseHeld(f"run directory {self.paths.root}: another process claimed it at the same moment")

    def _still_mine(self) -> bool:
        """After replacing a lease, read it back :attr:`LeaseConfig.settle_s` later: of processes that replaced it at
        the same moment (takers of one stale lease, or one taking over a handed-over lease), the later writer wins."""
        time.sleep(self.config.settle_s)
        return (read_lease(self.paths) or self.lease).holder == self.lease.holder

    def _sweep(self) -> None:
        for path in stale_lease_temps(self.paths, self._now() - self.config.ttl_s):
            path.unlink(missing_ok=True)
            log.info("run directory %s: removed %s, a lease write that its writer never finished", self.paths.root,
                     path.name)

    def _write(self, create: bool) -> bool:
        now = self._now()
        self.lease = Lease(**{**asdict(self.lease), "started": self.lease.started or now,
                              "expires": now + self.config.ttl_s})
        if not create:
            atomic_write_json(self.paths.lease, asdict(self.lease))
            return True
        make_folder(self.paths.root)
        tmp = self.paths.lease.with_name(f".lease.{self.lease.holder}.tmp")
        try:
            atomic_write_json(tmp, asdict(self.lease))
        except RunDirError as exc:  # name the lease, not its temp file
            raise RunDirError(str(exc).replace(str(tmp), str(self.paths.lease))) from exc
        try:
            os.link(tmp, self.paths.lease)  # fails when the name exists: atomic create-if-absent
            return True
        except FileExistsError:
            return False  # raced: the loop reads the new holder
        finally:
            tmp.unlink(missing_ok=True)

    def _renew_loop(self) -> None:
        """Renew every :attr:`LeaseConfig.renew_s`; a renewal that a full disk refused (``trainer.record.storage``:
        one warning when it fills, one when it is renewed again) is tried again every ``RETRY_S``, so the lease stays
        live through a full spell longer than its ``ttl_s``; any other failed renewal is logged and tried again at
        the next renewal."""
        full = StorageWatch(None, "the run goes on; its lease is renewed once space returns")
        wait = self.config.renew_s
        while not self._stop.wait(wait):
            wait = self.config.renew_s
            current = read_lease(self.paths)
            if current is not None and current.holder != self.lease.holder:
                log.error("run directory %s: its lease was taken over by %s; not renewing", self.paths.root,
                          current.describe())
                return
            try:
                self._write(create=False)
            except (OSError, RunDirError) as exc:
                if full.failed("lease.json", self.paths.lease, exc):
                    wait = min(RETRY_S, self.config.renew_s)
                else:  # a read-only share: try again at the next renewal
                    log.warning("run directory %s: could not renew its lease (%s)", self.paths.root, exc)
                continue
            full.cleared("lease.json", self.paths.lease)

    def hand_over(self) -> str:
        """Stop renewing and leave the lease in place for a process this one starts, which claims it with ``adopt``
        set to the returned holder id; :meth:`release` then removes nothing. Until that process claims it, the lease
        goes stale as this process's would (its pid gone, or its expiry)."""
        self._handed_over = True
        self._stop.set()
        return self.lease.holder

    def release(self) -> None:
        """Stop renewing and remove the lease if it is still this process's (and was not handed over)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._handed_over:
            return
        current = read_lease(self.paths)
        if current is not None and current.holder == self.lease.holder:
            self.paths.lease.unlink(missing_ok=True)

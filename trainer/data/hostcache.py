"""The host's decoded copy of a shot on local scratch: decoded once per host, read by every rank of the frame.

Why a file of its own (measured in ``benchmarks/bench_plates.py``, docs/scaling.md "Production plates"):
random 64 px crops through OpenImageIO's ``ImageCache`` cost 0.6 ms (tiled ZIP EXR) to 7 ms (scanline ZIP
EXR) each on the file server's plates, and 0.17 ms even from an uncompressed tiled EXR on local disk, and
every rank would read the shot over the network again. Decoded once into float16 tiles on local scratch,
a crop is two ``pread`` calls, about 0.02 ms. Reads go through ``pread``, never ``mmap``: OpenCue's RQD
counts a frame's memory as the ``/proc/PID/stat`` rss of its processes (``trainer.core.procstat``), which
includes every page of a file a process touched through ``mmap`` (once per rank), but not the page cache
behind ``pread``, which the ranks of the host share and the kernel reclaims.

Layout of ``SCRATCH/cuetrain-UID/KEY/`` (folder 0700: plates are confidential):

- ``pixels.f16``: frame k at ``k * frame_bytes``: its Input (side 0, H x W) and then its Ground Truth (side 1,
  ``--scale`` times the Input: sH x sW), each ``(ty, tx, T, T, C)`` float16 with the side's own tile counts and
  channel count C (the side's channels of the shot's plan, 3 for RGB) (:class:`trainer.data.tiles.SideLayout`),
  :data:`TILE` x :data:`TILE` tiles in rows, the image padded with zeros to whole tiles. Allocated in full when created
  (``posix_fallocate``), so a full scratch disk fails at once with the sizes in the message.
- ``state``: one byte per frame, 1 once both of its images are written.
- ``claims``: one byte per frame to ``lockf``: the process that holds a frame's lock decodes it. Locks
  vanish with their process, so a rank that dies while decoding leaves the frame to the next one.
- ``users``: every process that reads the cache holds a shared ``flock`` on it.
- ``shot.json``: what the copy holds (the shot record and the key's inputs), for people.

KEY is a hash of the shot (paths, sizes, modification times, frame size, scale, channels), the colour conversion, the
layout version, the host name and the boot id: a changed file gives a new copy, and a copy never outlives
a reboot (nothing is fsync'ed). Copies that no process uses are deleted when a process opens another one,
so scratch holds the copies of the runs on the host and nothing older.

Every rank of a host decodes frames (each frame once: :meth:`HostCache.build`), so a frame of L ranks reads
the shot once, L times faster. A rank then keeps the first frames of the copy in its own memory, as many
as fit in ``--data-cache-mb`` (:meth:`HostCache.load_resident`): crops are uniform over the shot, so a
fixed share serves as many crops as any eviction policy would, with no bookkeeping; with the whole shot
resident no crop reads the file.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path

import numpy as np

from trainer.data.colour import ColourSpec
from trainer.data.images import DataError
from trainer.data.shot import Shot, ShotChanged, decode_bands, describe_change, sign
from trainer.data.tiles import TILE, side_layouts

log = logging.getLogger(__name__)

LAYOUT_VERSION = 3  # 2: per-side geometry (the Ground Truth may be --scale times the Input); 3: per-side channels
WAIT_LOG_S = 30.0  # seconds between "waiting for another rank to decode" lines


class ScratchError(DataError):
    """Local scratch cannot hold the decoded shot, or its folder is not private; the message names the folder,
    the sizes and the fix (``CUETRAIN_SCRATCH``)."""


def boot_id() -> str:
    """This boot's id (``/proc/sys/kernel/random/boot_id``), "" where there is none."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def private_folder(scratch: str | Path) -> Path:
    """``SCRATCH/cuetrain-UID``, created 0700; refused when another user owns it or others may read it.

    Raises:
        ScratchError: the folder cannot be created, is not ours or is open to other users.
    """
    base = Path(scratch) / f"cuetrain-{os.getuid()}"
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = base.stat()
    except OSError as exc:
        raise ScratchError(f"cannot create the local scratch folder {base}: {exc}; set CUETRAIN_SCRATCH to a "
                           "writable local disk") from None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ScratchError(f"local scratch folder {base} belongs to uid {st.st_uid} or is open to other users "
                           f"(mode {st.st_mode & 0o777:o}); decoded plates must stay private: remove it or chmod 700")
    return base


class HostCache:
    """A shot decoded into :data:`TILE` px float16 tiles on local scratch (module doc), read by ``pread``.

    A :class:`trainer.data.sources.FrameSource`: image ``2k + side`` is frame k's Input (side 0, ``size`` = (H, W),
    the shot's Cin input channels) or Ground Truth (side 1, ``scale`` times that, Cout target channels).

    Args:
        scratch: the local scratch folder (``trainer.core.envvars.read_scratch``).
        shot: the shot to hold.
        colour: the conversion applied while decoding (``trainer.data.colour``).
        cache_mb: decoded frames this process may keep in its memory [MiB] (``--data-cache-mb``).

    Raises:
        ScratchError: scratch is not private or too small for the decoded shot.
    """

    def __init__(self, scratch: str | Path, shot: Shot, colour: ColourSpec, cache_mb: int) -> None:
        self.shot, self.colour = shot, colour
        self.size = (shot.height, shot.width)  # the Input's (H, W) [pixels]
        self.scale = shot.scale
        self.count = len(shot.pairs)
        self.sides = side_layouts(shot)
        self.names = (shot.channels.inputs, shot.channels.targets)  # channel names per side
        self.frame_bytes = sum(side.image_bytes for side in self.sides)  # one frame, both sides [bytes]
        self.bytes = self.count * self.frame_bytes
        key = {"layout": LAYOUT_VERSION, "tile": TILE, "shot": shot.digest(), "host": socket.gethostname(),
               "boot": boot_id(), "colour": colour.to_dict() if colour.active else None}
        self.folder = private_folder(scratch) / hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
        self._users = self._open_or_create(key)
        self._fd = {name: os.open(self.folder / name, os.O_RDWR) for name in ("pixels.f16", "state", "claims")}
        self.cache_mb = cache_mb
        self.resident = 0  # frames 0 .. resident-1 are in this process's memory (load_resident)
        self._resident = tuple(np.empty((0, side.ty, side.tx, TILE, TILE, side.channels), np.float16)
                               for side in self.sides)  # per side: (resident, ty, tx, T, T, C)
        self.decoded_bytes = 0  # bytes of shot files this process decoded [bytes]

    # ------------------------------------------------------------------------------------------
    # Creating, sharing and pruning copies

    def _open_or_create(self, key: dict) -> int:
        """Create the copy's files once per host (under the folder lock), prune unused copies, join as a user."""
        base = self.folder.parent
        lock = os.open(base / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _prune(base, keep=self.folder.name)
            if not (self.folder / "shot.json").exists():
                self._create(key)
            users = os.open(self.folder / "users", os.O_RDWR)
            fcntl.flock(users, fcntl.LOCK_SH)  # held until close(): nobody prunes the copy while we read it
            return users
        finally:
            os.close(lock)  # releases the folder lock

    def _create(self, key: dict) -> None:
        base = self.folder.parent
        free = shutil.disk_usage(base).free
        if free < self.bytes:
            raise ScratchError(self._too_small(free))
        tmp = base / f"{self.folder.name}.tmp-{os.getpid()}"
        tmp.mkdir(mode=0o700)
        try:
            fd = os.open(tmp / "pixels.f16", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.bytes)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                raise ScratchError(self._too_small(shutil.disk_usage(base).free)) from None
            finally:
                os.close(fd)
            for name in ("state", "claims"):
                (tmp / name).write_bytes(bytes(self.count))
            (tmp / "users").touch(0o600)
            (tmp / "shot.json").write_text(json.dumps({"key": key, "shot": self.shot.record(), "tile": TILE}))
            os.rename(tmp, self.folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log.info("host copy of the shot: %s (%.2f GiB of float16 tiles on local scratch)", self.folder,
                 self.bytes / 2**30)

    def _too_small(self, free: int) -> str:
        plan = self.shot.channels
        sizes = [f"{side.width}x{side.height}" for side in self.sides]
        if not plan.is_default:  # "100x70 Input (R, G, B) and 100x70 Ground Truth (A)"
            pairs = " and ".join(f"{size} {name} ({', '.join(names)})" for size, name, names in
                                 zip(sizes, ("Input", "Ground Truth"), (plan.inputs, plan.targets)))
        else:
            pairs = sizes[0] if self.scale == 1 else f"{sizes[0]} Input and {sizes[1]} Ground Truth"
        return (f"local scratch {self.folder.parent} has {free / 2**30:.1f} GiB free, but the decoded shot "
                f"({self.count} pairs of {pairs}) needs {self.bytes / 2**30:.1f} GiB; set "
                "CUETRAIN_SCRATCH to a larger local disk on the render nodes, or free space there")

    def close(self) -> None:
        """Close the files and leave the copy (it stays for the next attempt on this host)."""
        for fd in [*self._fd.values(), self._users]:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fd = {}

    # ------------------------------------------------------------------------------------------
    # Decoding, shared by the ranks of the host

    def done(self, frame: int) -> bool:
        """True when frame index ``frame`` is decoded (by any process of the host)."""
        return os.pread(self._fd["state"], 1, frame) == b"\x01"

    def build(self, start: int = 0) -> int:
        """Decode every frame no process of the host has decoded yet, sharing the work with them; returns when
        all are decoded. ``start`` rotates the order (ranks start apart). Returns the frames this process decoded.

        Raises:
            DataError: a file is unreadable or has bad pixels (message names it).
            ShotChanged: a file was deleted, truncated or rewritten since the listing.
        """
        order = [(start + i) % self.count for i in range(self.count)]
        mine, busy = 0, []
        for k in order:  # first pass: take what nobody holds
            if not self.done(k):
                if self._claim(k, wait=False):
                    mine += self._decode_claimed(k)
                else:
                    busy.append(k)
        for k in busy:  # then wait for the frames others were decoding (or take them over if they died)
            if not self.done(k):
                self._claim(k, wait=True)
                mine += self._decode_claimed(k)
        return mine

    def _claim(self, k: int, wait: bool) -> bool:
        fd, t0, told = self._fd["claims"], time.monotonic(), 0.0
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, k)
                return True
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    raise
            if not wait:
                return False
            if time.monotonic() - t0 - told >= WAIT_LOG_S:
                told = time.monotonic() - t0
                log.info("waiting for another rank of this host to decode frame %d (%.0f s)", self.shot.pairs[k].frame,
                         told)
            time.sleep(0.05)

    def _decode_claimed(self, k: int) -> int:
        """Decode frame ``k`` (claimed) unless it became done meanwhile; release the claim. Returns 1 or 0."""
        try:
            if self.done(k):
                return 0
            pair, sigs = self.shot.pairs[k], self.shot.sigs[k]
            for side, (path, sig) in enumerate(((pair.input, sigs[0]), (pair.target, sigs[1]))):
                self._decode_image(2 * k + side, path, sig)
            os.pwrite(self._fd["state"], b"\x01", k)
            return 1
        finally:
            fcntl.lockf(self._fd["claims"], fcntl.LOCK_UN, 1, k)

    def _decode_image(self, image: int, path: Path, sig) -> None:
        if sign(path) != sig:
            raise ShotChanged(describe_change(path, sig, sign(path)) + " after training started")
        side = self.sides[image % 2]
        try:
            for y0, band in decode_bands(path, TILE, (side.width, side.height), self.colour, self.shot.pairs[0],
                                         side=image % 2, names=self.names[image % 2]):
                self._write_band(image, y0, band)
        except ShotChanged:
            raise
        except DataError as exc:
            now = sign(path)
            if now != sig:  # it failed because it changed under us
                raise ShotChanged(describe_change(path, sig, now) + f" while it was being read ({exc})") from None
            if self.shot.was_read:  # this run read it before: the file server's state changed
                raise ShotChanged(f"{exc} (this run read it before, so it changed on the file server)") from None
            raise
        now = sign(path)
        if now != sig:
            raise ShotChanged(describe_change(path, sig, now) + " while it was being read")
        self.decoded_bytes += sig.size

    def _offset(self, image: int) -> int:
        """Where image ``image`` (= 2 x frame index + side) starts in ``pixels.f16`` [bytes]."""
        return (image // 2) * self.frame_bytes + self.sides[image % 2].offset

    def _write_band(self, image: int, y0: int, band: np.ndarray) -> None:
        """Write rows ``y0 .. y0+n`` ((n, W, C) float16 of the image's side, n <= TILE) as tile row ``y0 // TILE``."""
        n, w = band.shape[:2]
        side = self.sides[image % 2]
        tx, c = side.tx, side.channels
        padded = np.zeros((TILE, tx * TILE, c), np.float16)
        padded[:n, :w] = band
        tiles = np.ascontiguousarray(padded.reshape(TILE, tx, TILE, c).transpose(1, 0, 2, 3))
        offset = self._offset(image) + (y0 // TILE) * tx * side.tile_bytes
        if os.pwrite(self._fd["pixels.f16"], tiles.data, offset) != tiles.nbytes:
            raise ScratchError(f"short write to {self.folder / 'pixels.f16'}: is local scratch full?")

    # ------------------------------------------------------------------------------------------
    # Reading

    def load_resident(self) -> int:
        """Read the first frames of the copy (both sides) into this process's memory, as many whole frames as fit
        in ``cache_mb`` (module doc). Call after :meth:`build`. Returns the frames now resident."""
        frames = min(self.count, self.cache_mb * 2**20 // self.frame_bytes)
        self._resident = tuple(np.empty((frames, side.ty, side.tx, TILE, TILE, side.channels), np.float16)
                               for side in self.sides)
        for k in range(frames):
            for side in (0, 1):
                self._pread(self._resident[side][k], self._offset(2 * k + side))
        self.resident = frames
        return frames

    def crop(self, image: int, y: int, x: int, c: int) -> np.ndarray:
        """(c, c, C) float16 pixels of image ``image`` (= 2 x frame index + side; C: that side's channels) at row
        ``y``, column ``x`` of that side (a Ground Truth crop in its own, ``scale`` times larger, pixels): from the
        resident frames, else with one ``pread`` per tile row (a view of a fresh buffer either way)."""
        k, side = divmod(image, 2)
        layout = self.sides[side]
        tx, ch = layout.tx, layout.channels
        t0, s0 = y // TILE, x // TILE
        ny, nx = (y + c - 1) // TILE - t0 + 1, (x + c - 1) // TILE - s0 + 1
        if k < self.resident:
            region = self._resident[side][k, t0:t0 + ny, s0:s0 + nx]
        else:
            region = layout.tiles(ny, nx)
            for i in range(ny):
                self._pread(region[i], self._offset(image) + ((t0 + i) * tx + s0) * layout.tile_bytes)
        whole = region.transpose(0, 2, 1, 3, 4).reshape(ny * TILE, nx * TILE, ch)
        return whole[y - t0 * TILE:y - t0 * TILE + c, x - s0 * TILE:x - s0 * TILE + c]

    def image(self, image: int) -> np.ndarray:
        """The whole float16 image ``image`` (to upload it to a GPU): (H, W, Cin) for an Input (even ``image``),
        (scale*H, scale*W, Cout) for a Ground Truth (odd)."""
        side = self.sides[image % 2]
        tiles = side.tiles(side.ty, side.tx)
        self._pread(tiles, self._offset(image))
        whole = tiles.transpose(0, 2, 1, 3, 4).reshape(side.ty * TILE, side.tx * TILE, side.channels)
        return np.ascontiguousarray(whole[:side.height, :side.width])

    def _pread(self, out: np.ndarray, offset: int) -> None:
        view = memoryview(out).cast("B")
        if os.preadv(self._fd["pixels.f16"], [view], offset) != out.nbytes:
            raise ScratchError(f"short read from {self.folder / 'pixels.f16'} at byte {offset}: the host copy was "
                               "truncated; remove the folder and start again")


def _prune(base: Path, keep: str) -> None:
    """Delete the copies under ``base`` (other than ``keep``) that no process uses, and leftovers of crashed
    creators. Called with the folder lock held."""
    for entry in base.iterdir():
        if entry.name == keep or not entry.is_dir():
            continue
        users = entry / "users"
        if ".tmp-" not in entry.name and users.exists():
            try:
                fd = os.open(users, os.O_RDWR)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue  # in use by another run on this host
            os.close(fd)
        shutil.rmtree(entry, ignore_errors=True)
        log.info("deleted the unused host copy %s", entry)

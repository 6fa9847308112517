"""A training shot on the file server: its frame pairs, the signature of every file, and reading them in bands.

A run lists its shot once per attempt (rank 0, :func:`list_shot`) and every rank checks that it sees the
same files (:meth:`Shot.changes`). A file's *signature* is its size and modification time
(``os.stat``: ``st_size`` [bytes], ``st_mtime_ns`` [ns]); a file whose signature moves after the shot was
listed was deleted, truncated or rewritten under the run, which :class:`ShotChanged` reports (exit code 80,
``trainer.core.exitcodes``): the node agent restarts the gang from its checkpoint, and the next attempt reads
the shot again. A file that is unreadable although its signature did not move is bad input
(:class:`~trainer.data.images.DataError`, exit code 2), unless this run had read the shot before (``--resume``
with a shot recorded in ``run.json`` ``data.shot``): then it was readable once, so it is a change too.

:func:`decode_bands` reads one image in bands of rows (OpenImageIO ``read_scanlines``, which reads tiled
files too) and applies the rules of :func:`trainer.data.images.read_channels` band by band: the side's channels
(the shot's :class:`~trainer.core.channels.ChannelPlan`; RGB by default), the same errors, float16 (values beyond
its range refused) and the working colour space on the colour channels only
(:func:`trainer.data.colour.to_working_channels`: a matte or alpha is never converted). So a rank holds one band,
never a whole frame.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import OpenImageIO as oiio

from trainer.core.channels import RGB, ChannelPlan
from trainer.data.colour import ColourSpec, to_working_channels
from trainer.core.exitcodes import ExitCode
from trainer.data.images import DataError, check_channels, pick_channels
from trainer.data.sequences import (FramePair, check_pair_origin, check_pair_size, data_origin, find_sequence,
                                    pair_frames, to_half)
from trainer.record.runrecord import FailureKind

log = logging.getLogger(__name__)


class ShotChanged(DataError):
    """A file of the shot was deleted, truncated or rewritten after the run listed it (or it differs
    between ranks). Exit code 80: the gang restarts from its checkpoint and reads the shot again."""

    exit_code = int(ExitCode.DATA_CHANGED)
    kind = FailureKind.DATA_CHANGED


@dataclass(frozen=True)
class FileSig:
    """What identifies one file's content without reading it: ``size`` [bytes] and ``mtime_ns`` [ns]."""

    size: int
    mtime_ns: int


def sign(path: str | Path) -> FileSig | None:
    """The signature of ``path`` (following links), or None when it does not exist or cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return FileSig(st.st_size, st.st_mtime_ns)


def describe_change(path: str | Path, was: FileSig, now: FileSig | None) -> str:
    """Why ``path`` no longer matches its signature ``was``: deleted, truncated or rewritten."""
    if now is None:
        return f"{path} was deleted (it was there, {was.size:,} bytes, when the shot was listed)"
    if now.size < was.size:
        return f"{path} was truncated ({was.size:,} -> {now.size:,} bytes)"
    return f"{path} was rewritten ({was.size:,} -> {now.size:,} bytes, modified again)"


@dataclass(frozen=True)
class Shot:
    """The frame pairs of one attempt, as rank 0 listed them.

    Attributes:
        pairs: the frame pairs, in frame order.
        sigs: ``(input, target)`` signature per pair.
        width, height: size of every Input frame [pixels] (from the first pair's headers).
        input_dir, target_dir: the two folders.
        was_read: this run read the shot before (``--resume`` and a recorded shot): a file that cannot be
            read now is a change (:class:`ShotChanged`), not bad input.
        scale: ``--scale``: every Ground Truth frame is ``scale * width`` x ``scale * height`` [1].
        channels: the channels read from the Input files (``channels.inputs``) and the Ground Truth files
            (``channels.targets``), by name (RGB both sides by default).
    """

    pairs: tuple[FramePair, ...]
    sigs: tuple[tuple[FileSig, FileSig], ...]
    width: int
    height: int
    input_dir: str
    target_dir: str
    was_read: bool = False
    scale: int = 1
    channels: ChannelPlan = ChannelPlan()

    @property
    def target_size(self) -> tuple[int, int]:
        """``(width, height)`` of every Ground Truth frame [pixels]: ``scale`` times the Input's."""
        return self.scale * self.width, self.scale * self.height

    @property
    def bytes(self) -> int:
        """Size of every file of the shot [bytes]."""
        return sum(a.size + b.size for a, b in self.sigs)

    def files(self) -> Iterator[tuple[Path, FileSig]]:
        """Every ``(path, signature)``, Input then Ground Truth per frame."""
        for pair, (a, b) in zip(self.pairs, self.sigs):
            yield pair.input, a
            yield pair.target, b

    def digest(self) -> str:
        """SHA-256 of the paths, signatures, frame size, scale and channels: equal digests = the same shot, read the
        same way (a copy of another ``--scale`` or channel plan is never reused)."""
        plan = self.channels
        h = hashlib.sha256(f"{self.width}x{self.height}x{self.scale}".encode())
        if not plan.is_default:  # RGB keeps the digest it always had
            h.update(f"\0{','.join(plan.inputs)}\0{','.join(plan.targets)}".encode())
        for path, sig in self.files():
            h.update(f"\0{path}\0{sig.size}\0{sig.mtime_ns}".encode())
        return h.hexdigest()

    def changes(self) -> str:
        """The first file whose signature moved since the listing, described; "" when none did."""
        for path, sig in self.files():
            now = sign(path)
            if now != sig:
                return describe_change(path, sig, now)
        return ""

    def record(self) -> dict[str, Any]:
        """The ``run.json`` ``data.shot`` record: folders, frames, file names, Input size, scale, Ground Truth size,
        bytes, and the channel names read from each side."""
        return {"input_dir": self.input_dir, "target_dir": self.target_dir,
                "frames": [p.frame for p in self.pairs], "input": [p.input.name for p in self.pairs],
                "target": [p.target.name for p in self.pairs], "width": self.width, "height": self.height,
                "scale": self.scale, "target_width": self.target_size[0], "target_height": self.target_size[1],
                "bytes": self.bytes, "input_channels": list(self.channels.inputs),
                "target_channels": list(self.channels.targets)}

    def to_json(self) -> str:
        """The listing as JSON (rank 0 publishes it to the gang)."""
        return json.dumps({"pairs": [[p.frame, str(p.input), str(p.target)] for p in self.pairs],
                           "sigs": [[a.size, a.mtime_ns, b.size, b.mtime_ns] for a, b in self.sigs],
                           "width": self.width, "height": self.height, "input_dir": self.input_dir,
                           "target_dir": self.target_dir, "was_read": self.was_read, "scale": self.scale,
                           "input_channels": list(self.channels.inputs),
                           "target_channels": list(self.channels.targets)})

    @classmethod
    def from_json(cls, text: str) -> "Shot":
        """The inverse of :meth:`to_json`."""
        d = json.loads(text)
        return cls(tuple(FramePair(f, Path(i), Path(t)) for f, i, t in d["pairs"]),
                   tuple((FileSig(a, b), FileSig(c, e)) for a, b, c, e in d["sigs"]), d["width"], d["height"],
                   d["input_dir"], d["target_dir"], d["was_read"], d.get("scale", 1),
                   ChannelPlan(tuple(d.get("input_channels", RGB)), tuple(d.get("target_channels", RGB))))


def _recorded_pairs(input_dir: str, target_dir: str, recorded: Mapping[str, Any]) -> list[FramePair]:
    """The frames of an earlier attempt's record (module doc), as the folders hold them now. Files that are
    gone raise :class:`ShotChanged` naming them; frames added since are left out (logged)."""
    try:
        inputs, targets = find_sequence(input_dir), find_sequence(target_dir)
    except DataError as exc:
        raise ShotChanged(f"the shot this run trained on is gone from the file server: {exc}") from None
    pairs, gone = [], []
    for frame, input_name, target_name in zip(recorded["frames"], recorded["input"], recorded["target"]):
        if frame in inputs and frame in targets:
            pairs.append(FramePair(frame, inputs[frame], targets[frame]))
        gone += [str(Path(folder) / name) for folder, name, have in ((input_dir, input_name, inputs),
                                                                     (target_dir, target_name, targets))
                 if frame not in have]
    if gone:
        raise ShotChanged(f"{len(gone)} file(s) of the shot this run trained on are gone from the file server: "
                          f"{', '.join(gone[:5])}{' ...' if len(gone) > 5 else ''}; restore them (the gang restarts "
                          "from its checkpoint when they are back) or start a new run")
    extra = sorted((set(inputs) | set(targets)) - set(recorded["frames"]))
    if extra:
        log.warning("%d frame(s) were added to the shot since this run started (%s...); training goes on with the "
                    "frames it started with", len(extra), extra[:5])
    return pairs


def list_shot(input_dir: str, target_dir: str, recorded: Mapping[str, Any] | None = None, scale: int = 1,
              channels: ChannelPlan | None = None) -> Shot:
    """List and sign the shot (``trainer.data.sequences.pair_frames``), sized and its channels checked from the first
    pair's headers.

    Args:
        recorded: ``run.json`` ``data.shot`` of an earlier attempt of this run when resuming (same folders),
            else None: the shot is cut to its frames (:func:`_recorded_pairs`).
        scale: ``--scale``: the Ground Truth is ``scale`` times the Input in both dimensions [1].
        channels: the channels to read from each side (``TrainConfig.channels``); None: RGB both sides.

    Raises:
        DataError: as ``pair_frames``; the first pair cannot be opened, its Ground Truth is not ``scale``
            times its Input (``trainer.data.sequences.check_pair_size``: both files, both sizes and the fix), its data
            window does not start where the Input's does (``check_pair_origin``: both files and windows), or one of
            its files lacks a named channel (``trainer.data.images.check_channels``: the file, the channel, the
            channels it has and the fix).
        ShotChanged: a recorded frame is gone, or a file vanished while being listed.
    """
    same = recorded and recorded.get("input_dir") == str(input_dir) and recorded.get("target_dir") == str(target_dir)
    pairs = _recorded_pairs(input_dir, target_dir, recorded) if same else pair_frames(input_dir, target_dir)
    sigs = []
    for pair in pairs:
        a, b = sign(pair.input), sign(pair.target)
        if a is None or b is None:
            raise ShotChanged(f"{pair.input if a is None else pair.target} vanished while the shot was listed; "
                              "is the shot being rewritten? Training starts again when it is complete")
        sigs.append((a, b))
    plan = channels or ChannelPlan()
    (w, h, have), (tw, th, target_have) = header(pairs[0].input), header(pairs[0].target)
    check_pair_size(pairs[0], (w, h), (tw, th), scale)
    check_pair_origin(pairs[0], (*data_origin(pairs[0].input), w, h), (*data_origin(pairs[0].target), tw, th), scale)
    check_channels(pairs[0].input, have, plan.inputs, "--input-channels")
    check_channels(pairs[0].target, target_have, plan.targets, "--target-channels")
    return Shot(tuple(pairs), tuple(sigs), w, h, str(input_dir), str(target_dir), was_read=bool(same), scale=scale,
                channels=plan)


def _open(path: Path) -> oiio.ImageInput:
    config = oiio.ImageSpec()
    config.attribute("oiio:UnassociatedAlpha", 1)  # as trainer.data.images.read_image: colour read as stored
    inp = oiio.ImageInput.open(str(path), config)
    if inp is None:
        raise DataError(f"cannot read image {path}: {oiio.geterror() or 'unknown error'}; re-render or remove it")
    return inp


def image_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` of subimage 0's data window [pixels], from the header only.

    Raises:
        DataError: the file cannot be opened as an image.
    """
    return header(path)[:2]


def header(path: Path) -> tuple[int, int, tuple[str, ...]]:
    """``(width, height, channel names)`` of subimage 0 (data window [pixels]; ``spec.channelnames``), from the
    header only. Raises DataError: the file cannot be opened as an image."""
    inp = _open(path)
    try:
        spec = inp.spec()
        return spec.width, spec.height, tuple(spec.channelnames)
    finally:
        inp.close()


def decode_bands(path: Path, rows: int, size: tuple[int, int], colour: ColourSpec,
                 first: FramePair | None = None, side: int = 0,
                 names: tuple[str, ...] = RGB) -> Iterator[tuple[int, np.ndarray]]:
    """Decode ``path`` in bands of ``rows`` rows: yields ``(y0, band)``, band (n, W, len(names)) float16, n <= rows.

    Values as :func:`trainer.data.images.read_channels` of the channels ``names`` (the side's channels of the
    shot's plan), then float16 and the working colour space on the colour channels only (module doc).
    ``size`` is the ``(width, height)`` every file of ``path``'s side has (:attr:`Shot.width`/``height`` for the
    Input, side 0; :attr:`Shot.target_size` for the Ground Truth, side 1); ``first`` names the first pair's file
    of that side in a size mismatch.

    Raises:
        DataError: unreadable, deep, NaN/inf or float16-overflowing pixels, a size other than ``size``, or a
            missing channel (the messages of ``read_channels`` and ``load_pairs``).
    """
    inp = _open(path)
    try:
        spec = inp.spec()
        if spec.deep:
            raise DataError(f"{path} is a deep image, which training cannot use; flatten it to a regular image")
        if (spec.width, spec.height) != size:
            where = "the first frame" + (f" {first.frame} ({first.target if side else first.input})" if first else "")
            raise DataError(f"{path} is {spec.width}x{spec.height} but {where} is {size[0]}x{size[1]}; "
                            "all frames must be the same size")
        bits = spec.get_int_attribute("oiio:BitsPerSample", 0)
        packed = spec.format == "uint16" and 0 < bits < 16  # 10/12-bit DPX, 12-bit TIFF (see images._read_pixels)
        for y0 in range(0, spec.height, rows):
            n = min(rows, spec.height - y0)
            px = inp.read_scanlines(0, 0, spec.y + y0, spec.y + y0 + n, spec.z, 0, spec.nchannels,
                                    "uint16" if packed else "float")
            if not isinstance(px, np.ndarray):
                raise DataError(f"cannot decode image {path}: {inp.geterror() or 'unknown error'}; "
                                "the file is corrupt or truncated: re-render or remove it")
            px = px.reshape(n, spec.width, spec.nchannels)
            if packed:
                px = (px >> (16 - bits)).astype(np.float32) / np.float32(2**bits - 1)
            option = "--target-channels" if side else "--input-channels"
            picked = np.ascontiguousarray(pick_channels(px, tuple(spec.channelnames), names, path, option),
                                          dtype=np.float32)
            if not np.isfinite(picked).all():
                raise DataError(f"{path} has {int(np.count_nonzero(~np.isfinite(picked)))} NaN or infinite values in "
                                f"rows {y0}-{y0 + n - 1}, which would make training diverge; fix the render (or "
                                "clamp/remove them in comp) and write the frame again")
            half = to_half(picked, path)
            yield y0, to_working_channels(colour, half, names).astype(np.float16) if colour.active else half
    finally:
        inp.close()

"""The run directory: the one contract between trainer, farm and GUI.

Every path inside a run directory comes from :class:`RunPaths` (the idea of submitit's
``JobPaths``). This module imports no torch and no Qt, so the GUI and the farm code can use it.

Layout (all written by rank 0 only, except ``logs/`` and the rendezvous file)::

    RUN_DIR/
      run.json                     run record (trainer.record.runrecord: typed, versioned, one state table)
      metrics.jsonl                one JSON object per logged step: step, loss, lr, images_per_s, wall_s
      contact_sheets/step_NNNNNN.png   3 crops as rows x (input | output | ground truth) columns, per task
      previews/step_NNNNNN.png     --preview frames as rows x (input | output) columns (trainer.learn.preview)
      checkpoints/step_NNNNNN.pt   training state (weights, optimizer, step, config), last K kept
      checkpoints/copy/step_NNNNNN.pt  the second copy of each (trainer.record.ckptcopies)
      model.pt                     final exported TorchScript model
      model.onnx                   the same model as ONNX (opset 18, dynamic H and W; trainer.export.formats)
      model_nuke.nk                Nuke script: CatFileCreator for model.pt -> Inference (trainer.export.nuke_script)
      model.json                   metadata of model.pt (model size, parameters, step, channels)
      lease.json                   the live run's lease: host, pid, farm job, expiry (trainer.record.lease)
      logs/rank_N.log              per-rank log (every rank writes its own)
      logs/local.log               cuetrain local's own supervisor log (its INFO records)
      rendezvous/main.json         frame 0's published main address {host, port, attempt, token}
      rendezvous/frames/frame_F.json  frame F's node agent waits to join the next generation (elastic gangs)

All writes go through :func:`atomic_write_bytes` / :func:`atomic_write_json` (temp file in the
same directory + ``os.replace``) so a reader never sees a half-written file; the temp files a killed writer
leaves are removed when rank 0 starts (``trainer.record.recordlock.remove_stale_temp_files``).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from trainer.core.exitcodes import ExitCode

#: File mode for files in a run directory: group-readable, never world-writable.
FILE_MODE = 0o640
#: Directory mode for folders in a run directory.
DIR_MODE = 0o750

_STEP_FILE = re.compile(r"^step_(\d{6,})\.(png|pt)$")
#: A temp file of :func:`atomic_write_bytes`: "." + the target's name + "." + mkstemp's 8 random characters + ".tmp".
_TEMP_FILE = re.compile(r"^\.(?P<target>.+)\.[a-z0-9_]{8}\.tmp$")

log = logging.getLogger(__name__)


class RunDirError(RuntimeError):
    """A run directory cannot be created, read or written; the message names the path and the fix (exit code 2)."""

    exit_code = int(ExitCode.USAGE)


@dataclass(frozen=True)
class RunPaths:
    """Every path in one run directory.

    Attributes:
        root: the run directory (absolute or relative path as given).
    """

    root: Path

    @classmethod
    def of(cls, root: str | os.PathLike[str]) -> "RunPaths":
        """Return the layout for ``root`` (nothing is created or read)."""
        return cls(Path(root))

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def contact_sheets(self) -> Path:
        return self.root / "contact_sheets"

    @property
    def previews(self) -> Path:
        """The ``--preview`` frames rendered at each contact-sheet interval (``trainer.learn.preview``)."""
        return self.root / "previews"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def checkpoint_copies(self) -> Path:
        """The second copy of every checkpoint (``trainer.record.ckptcopies``)."""
        return self.checkpoints / "copy"

    @property
    def model(self) -> Path:
        return self.root / "model.pt"

    @property
    def model_onnx(self) -> Path:
        return self.root / "model.onnx"

    @property
    def model_nuke(self) -> Path:
        return self.root / "model_nuke.nk"

    @property
    def model_meta(self) -> Path:
        return self.root / "model.json"

    @property
    def lease(self) -> Path:
        return self.root / "lease.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def rendezvous(self) -> Path:
        return self.root / "rendezvous" / "main.json"

    def presence(self, frame: int) -> Path:
        """Frame ``frame``'s presence record while its node agent waits to join (``cue_plugin.node.membership``)."""
        return self.root / "rendezvous" / "frames" / f"frame_{frame}.json"

    @property
    def local_log(self) -> Path:
        """The log of ``cuetrain local``'s own supervisor (its INFO records, which its terminal leaves out)."""
        return self.logs / "local.log"

    def rank_log(self, rank: int) -> Path:
        """Log file of one rank (every rank writes its own)."""
        return self.logs / f"rank_{rank}.log"

    def rank_failure(self, rank: int) -> Path:
        """Failure record of one rank (``trainer.record.rankfailure``: exit code, kind, message, rank, host)."""
        return self.logs / f"rank_{rank}.failure.json"

    def contact_sheet(self, step: int) -> Path:
        """Contact sheet written at ``step`` (steps, 1-based count of batches)."""
        return self.contact_sheets / f"step_{step:06d}.png"

    def preview(self, step: int) -> Path:
        """Preview frames rendered at ``step`` (one PNG: a row per ``--preview`` frame)."""
        return self.previews / f"step_{step:06d}.png"

    def checkpoint(self, step: int) -> Path:
        """Checkpoint written after ``step`` steps."""
        return self.checkpoints / f"step_{step:06d}.pt"

    def checkpoint_copy(self, step: int) -> Path:
        """The second copy of checkpoint ``step``, written after the first (``trainer.record.ckptcopies``)."""
        return self.checkpoint_copies / f"step_{step:06d}.pt"

    def list_contact_sheets(self) -> list[tuple[int, Path]]:
        """All contact sheets as ``(step, path)`` sorted by step; empty if none."""
        return _list_steps(self.contact_sheets, "png")

    def list_previews(self) -> list[tuple[int, Path]]:
        """All preview images as ``(step, path)`` sorted by step; empty if none (or no ``--preview``)."""
        return _list_steps(self.previews, "png")

    def list_checkpoints(self) -> list[tuple[int, Path]]:
        """All complete checkpoints as ``(step, path)`` sorted by step (temp files excluded)."""
        return _list_steps(self.checkpoints, "pt")

    def list_checkpoint_copies(self) -> list[tuple[int, Path]]:
        """All second copies as ``(step, path)`` sorted by step (:meth:`list_checkpoints`' twins)."""
        return _list_steps(self.checkpoint_copies, "pt")

    def create(self) -> None:
        """Create the directory tree (mode 0750).

        Raises:
            RunDirError: the directory cannot be created or is not writable.
        """
        for d in (self.root, self.contact_sheets, self.previews, self.checkpoints, self.checkpoint_copies, self.logs,
                  self.rendezvous.parent):
            make_folder(d)
        if not os.access(self.root, os.W_OK):
            raise RunDirError(f"run directory {self.root} is not writable; fix its permissions or choose another --run-dir")


def make_folder(folder: Path) -> None:
    """Create ``folder`` and its parents (mode :data:`DIR_MODE`).

    Raises:
        RunDirError: it cannot be created; names the folder and the fix.
    """
    try:
        folder.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"cannot create run directory folder {folder}: {exc.strerror}; "
                          "choose a --run-dir on writable shared storage") from exc


def _list_steps(folder: Path, ext: str) -> list[tuple[int, Path]]:
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        m = _STEP_FILE.match(name)
        if m and m.group(2) == ext:
            out.append((int(m.group(1)), folder / name))
    return sorted(out)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, ``os.replace``).

    The file gets mode :data:`FILE_MODE`. On any error the temp file is removed and the previous
    content of ``path`` (if any) is untouched.

    Raises:
        RunDirError: the write failed (disk full, read-only, permissions); names the path.
    """
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise RunDirError(f"cannot write {path}: {exc.strerror}; check free space and permissions") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except OSError as exc:
        _remove_quietly(tmp)
        raise RunDirError(f"cannot write {path}: {exc.strerror}; check free space and permissions") from exc
    except BaseException:
        _remove_quietly(tmp)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n").encode())


def stale_temp_files(paths: RunPaths) -> list[Path]:
    """The temp files of atomic writes (:data:`_TEMP_FILE`: ``.NAME.XXXXXXXX.tmp``) in the run directory itself and
    the folders only rank 0 writes (``checkpoints/`` and its ``copy/``, ``contact_sheets/``, ``previews/``), sorted; never the lease's
    temp files (its holder, ``cuetrain local``'s supervisor, may be renewing it now), nor ``logs/`` or
    ``rendezvous/``, which other ranks and node agents write while rank 0 starts. Reads only."""
    found = []
    for folder in (paths.root, paths.checkpoints, paths.checkpoint_copies, paths.contact_sheets, paths.previews):
        try:
            names = sorted(os.listdir(folder))
        except FileNotFoundError:
            continue
        for name in names:
            m = _TEMP_FILE.match(name)
            if m and not m.group("target").startswith((paths.lease.name, ".lease.")) and (folder / name).is_file():
                found.append(folder / name)
    return found


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON object file.

    Raises:
        RunDirError: missing file or invalid JSON; the message names the path.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            obj = json.load(fh)
    except FileNotFoundError as exc:
        raise RunDirError(f"{path} does not exist; is this a cuetrain run directory?") from exc
    except (OSError, ValueError) as exc:
        raise RunDirError(f"cannot read {path}: {exc}") from exc
    if not isinstance(obj, dict):
        raise RunDirError(f"{path} does not hold a JSON object")
    return obj


def append_metrics(paths: RunPaths, rows: list[dict[str, Any]]) -> None:
    """Append rows to ``metrics.jsonl``, one JSON object per line, each line written whole.

    Readers must tolerate a partial last line while a write is in progress (see
    :class:`MetricsReader`). A write the filesystem takes only in part (``write`` returns fewer bytes: a full
    disk) is cut back to the file's size before it, so the next append does not continue a cut line.

    Raises:
        RunDirError: the file cannot be opened or written (e.g. ``No space left on device``); nothing of ``rows``
            is left in it.
    """
    if not rows:
        return
    data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        fd = os.open(paths.metrics, flags, FILE_MODE)
        try:
            size = os.fstat(fd).st_size  # rank 0 is the one writer: nothing else appends in between
            written = os.write(fd, data)
            if written < len(data):
                os.ftruncate(fd, size)
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (took {written} of {len(data)} bytes)")
        finally:
            os.close(fd)
    except OSError as exc:
        raise RunDirError(f"cannot append to {paths.metrics}: {exc.strerror}") from exc


class MetricsReader:
    """Incremental reader of ``metrics.jsonl``: each :meth:`read_new` reads only bytes appended since
    the last call; a partial last line is kept back until its newline arrives.

    Args:
        path: the ``metrics.jsonl`` file (may not exist yet).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offset = 0
        self._pending = b""

    def read_new(self) -> list[dict[str, Any]]:
        """Return the complete rows appended since the last call (possibly empty).

        A file that shrank (run restarted from scratch) is read again from the start. Lines that are
        not valid JSON objects are skipped.
        """
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            return []
        if size < self._offset:
            self._offset, self._pending = 0, b""
        if size == self._offset:
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self._offset)
            chunk = fh.read(size - self._offset)
        self._offset += len(chunk)
        data = self._pending + chunk
        lines = data.split(b"\n")
        self._pending = lines.pop()
        return list(_parse_rows(lines))


def _parse_rows(lines: list[bytes]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            yield row


def read_metrics(paths: RunPaths) -> list[dict[str, Any]]:
    """All complete rows of ``metrics.jsonl`` (empty if missing)."""
    return MetricsReader(paths.metrics).read_new()

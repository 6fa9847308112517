"""The farm interface: job specs (training, inference), run states, job handles and the backend protocol.

Imports neither opencue nor torch, so the GUI and tests use it freely. The OpenCue backend lives in
``cue_plugin.submit.opencue_farm``; the shape follows torchx's scheduler API (dry run is a value; submit =
build + schedule; ``cancel`` is idempotent; native states map through one table to ``RunState``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

from cue_plugin.names import DEFAULT_ELASTIC_WINDOW_S, DEFAULT_MAX_RESTARTS, RENDEZVOUS_MODES
from trainer.core.config import TrainConfig

#: Input frames per farm frame of the inference layer unless told [frames].
DEFAULT_CHUNK = 10


class FarmError(RuntimeError):
    """Any failure talking to the farm; the message says what happened and what to do."""


def env_from_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """The ``extra_env`` of repeated ``--env KEY=VALUE`` flags (``cuetrain submit`` and ``submit-infer``).

    The value may contain ``=`` (split at the first one) or be empty; a later pair overrides an earlier one.

    Raises:
        FarmError: a pair with no ``=`` or an empty name (the CLI turns it into exit 2).
    """
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise FarmError(f"--env {pair!r} is not KEY=VALUE")
        out[name] = value
    return out


class RunState(enum.Enum):
    """One state for a run, whatever the farm calls it."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    def is_terminal(self) -> bool:
        """True for states a run never leaves (succeeded, failed, cancelled)."""
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


@dataclass(frozen=True)
class InferenceLayer:
    """What the ``infer`` layer does (built by :mod:`cue_plugin.submit.infer`).

    Attributes:
        model: absolute path of the TorchScript ``model.pt`` the frames load (may not exist yet
            when the layer follows ``train`` in the same job).
        input_dir: absolute path of the input image sequence folder (shared storage).
        output_dir: absolute path of the output folder (shared storage; frames create it).
        frames: frame numbers of the input sequence, ascending.
        chunk: input frames per farm frame [frames].
    """

    model: str
    input_dir: str
    output_dir: str
    frames: tuple[int, ...]
    chunk: int = DEFAULT_CHUNK

    def __post_init__(self) -> None:
        if not isinstance(self.chunk, int) or self.chunk < 1:
            raise FarmError(f"infer chunk={self.chunk!r} must be a whole number >= 1 (frames per farm frame)")
        if not self.frames:
            raise FarmError(f"the input sequence {self.input_dir} holds no frames to infer")

    @property
    def frame_range(self) -> str:
        """The layer's frame range: ``a-b`` runs joined by commas (``1001-1050,1061-1100``)."""
        return frame_range(self.frames)


def frame_range(frames: Sequence[int]) -> str:
    """Frame numbers as a Cuebot FrameSet string of runs: ``[1, 2, 3, 7, 9, 10]`` -> ``"1-3,7,9-10"``."""
    numbers = sorted(set(frames))
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True)
class JobResources:
    """What every cuetrain job asks of the farm: where it is filed, who runs it, what its frames reserve.

    The one home of these fields: :class:`TrainingJob` and :class:`InferenceJob` extend it, and the layer
    builders read them through it (``cue_plugin.submit.infer.add_layer``). In a TrainingJob the reservation
    (``cores``, ``memory_mb``, ``gpus``, ``gpu_memory_mb``) is per RANK; in an InferenceJob per frame.

    Attributes:
        show: OpenCue show name.
        shot: shot name.
        user: submitting user (OpenCue refuses frames as root).
        name: job name suffix (default ``cuetrain``; ``cuetrain_infer`` for an InferenceJob); OpenCue names
            the job ``show-shot-user_name``.
        priority: job priority (OpenCue: higher runs first) [1].
        max_retries: retries per frame before the frame is dead [count]; Cuebot takes at most 1
            (``JobSpec.FRAME_RETRIES_MAX``; tests/cue_plugin/test_cuebot_limits.py) and lowers more to 1
            without a word.
        service: OpenCue service of the layer (e.g. ``cuetrain-gpu``).
        tags: host tags the layer asks for.
        cores: cores per rank (training) or per frame (inference) [cores].
        memory_mb: memory per rank or frame [MiB].
        gpus: GPUs per rank or frame [count].
        gpu_memory_mb: GPU memory per rank or frame [MiB].
        extra_env: more environment variables for every frame.
    """

    show: str
    shot: str
    user: str
    name: str = "cuetrain"
    priority: int = 100
    max_retries: int = 1
    service: str = "cuetrain"
    tags: tuple[str, ...] = ()
    cores: float = 1.0
    memory_mb: int = 4096
    gpus: int = 0
    gpu_memory_mb: int = 0
    extra_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _TrainingHead:
    """TrainingJob's leading fields: a dataclass puts its bases' fields first, so with this base after
    :class:`JobResources` ``TrainingJob(train, world_size, show, shot, user, ...)`` keeps its order."""

    train: TrainConfig
    world_size: int


@dataclass(frozen=True)
class TrainingJob(JobResources, _TrainingHead):
    """One distributed training run on the farm: ONE layer of ``world_size / ranks_per_frame`` frames.

    Resources (``cores``, ``memory_mb``, ``gpus``, ``gpu_memory_mb``) are per RANK; the layer reserves
    ``ranks_per_frame`` times each for every frame (:attr:`frame_resources`), so a template for a node
    kind states what one rank needs and ``ranks_per_frame`` how many ranks share a node.

    Attributes:
        train: the trainer configuration (its ``run_dir`` must be on shared storage).
        world_size: number of ranks in the gang (``COPYCAT_WORLD_SIZE``).
        ranks_per_frame: trainer processes per frame, L: frame f runs ranks ``f*L .. f*L+L-1`` on one host
            (default 1: frame number = rank). ``world_size`` must be a multiple of it.
        show, shot, user, name, priority, max_retries, service, tags, cores, memory_mb, gpus, gpu_memory_mb,
            extra_env: see :class:`JobResources` (``cores``, ``memory_mb``, ``gpus``, ``gpu_memory_mb`` per rank).
        sync_interval: ``COPYCAT_SYNC_INTERVAL`` (all-reduce every N steps) [steps].
        rendezvous: how ranks find frame 0: ``file`` (run directory) or ``cuebot`` (pycue lookup).
        rendezvous_timeout_s: how long ranks wait for frame 0's publication [seconds].
        infer: an inference layer ``infer`` that runs after the ``train`` layer, or None
            (``cue_plugin.submit.infer``).
        max_restarts: gang restarts the frames' node agents make per job before giving up [count]
            (``cue_plugin.node.agent``; independent of Cuebot's retries).
        min_world_size: elastic gang: the smallest gang that may train when frames do not come back
            [ranks]; 0 (default) = ``world_size``, not elastic. Needs ``rendezvous = "file"``.
        elastic_window_s: how long frame 0 waits for every frame before an elastic gang shrinks [s].
    """

    sync_interval: int = 1
    rendezvous: str = "file"
    rendezvous_timeout_s: float = 600.0
    ranks_per_frame: int = 1
    infer: InferenceLayer | None = None
    max_restarts: int = DEFAULT_MAX_RESTARTS
    min_world_size: int = 0
    elastic_window_s: float = DEFAULT_ELASTIC_WINDOW_S

    def __post_init__(self) -> None:
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise FarmError(f"world_size={self.world_size!r} must be a whole number >= 1")
        if not isinstance(self.ranks_per_frame, int) or self.ranks_per_frame < 1:
            raise FarmError(f"ranks_per_frame={self.ranks_per_frame!r} must be a whole number >= 1")
        if self.world_size % self.ranks_per_frame:
            raise FarmError(f"world_size={self.world_size} is not a multiple of "
                            f"ranks_per_frame={self.ranks_per_frame}: "
                            "every frame runs the same number of ranks; choose a world size that is "
                            f"{self.ranks_per_frame} x the number of frames (hosts)")
        if self.train.batch_size < self.world_size:
            raise FarmError(
                f"batch_size={self.train.batch_size} is smaller than world_size={self.world_size}: every rank needs "
                "at least one crop per step; raise --batch-size or lower --world-size")
        if self.rendezvous not in RENDEZVOUS_MODES:
            raise FarmError(f"rendezvous={self.rendezvous!r} is not one of {', '.join(RENDEZVOUS_MODES)}")
        if self.sync_interval < 1:
            raise FarmError(f"sync_interval={self.sync_interval} must be >= 1 step")
        if not isinstance(self.max_restarts, int) or self.max_restarts < 0:
            raise FarmError(f"max_restarts={self.max_restarts!r} must be a whole number >= 0")
        if self.min_world_size:
            self._check_elastic()

    def _check_elastic(self) -> None:
        if not self.ranks_per_frame <= self.min_world_size <= self.world_size or \
                self.min_world_size % self.ranks_per_frame:
            raise FarmError(f"min_world_size={self.min_world_size} must be a multiple of ranks_per_frame="
                            f"{self.ranks_per_frame} between {self.ranks_per_frame} and world_size={self.world_size} "
                            "(a gang shrinks by whole frames)")
        if self.min_world_size < self.world_size and self.rendezvous != "file":
            raise FarmError(f"min_world_size={self.min_world_size} (an elastic gang) needs rendezvous='file': "
                            "Cuebot's frame state cannot name the frames of a smaller gang")
        if self.elastic_window_s < 0:
            raise FarmError(f"elastic_window_s={self.elastic_window_s} must be >= 0 seconds")

    @property
    def frames(self) -> int:
        """Frames in the layer = hosts the gang needs: ``world_size / ranks_per_frame``."""
        return self.world_size // self.ranks_per_frame

    @property
    def frame_resources(self) -> dict[str, float]:
        """What the layer reserves per frame: ``ranks_per_frame`` x the per-rank ``cores`` [cores],
        ``memory_mb`` [MiB], ``gpus`` [count] and ``gpu_memory_mb`` [MiB]."""
        n = self.ranks_per_frame
        return {"cores": self.cores * n, "memory_mb": self.memory_mb * n, "gpus": self.gpus * n,
                "gpu_memory_mb": self.gpu_memory_mb * n}


@dataclass(frozen=True)
class _InferenceHead:
    """InferenceJob's leading field (see :class:`_TrainingHead`): ``InferenceJob(infer, show, shot, user)``."""

    infer: InferenceLayer


@dataclass(frozen=True)
class InferenceJob(JobResources, _InferenceHead):
    """A job of the ``infer`` layer alone (``cuetrain submit-infer``): the layer and its :class:`JobResources`
    (reserved per frame).

    Attributes:
        infer: what the layer runs.
        name: as in JobResources, default ``cuetrain_infer``.
    """

    name: str = "cuetrain_infer"


@dataclass(frozen=True)
class JobHandle:
    """A submitted job: enough to find it again.

    Attributes:
        job_id: the farm's job id.
        job_name: the farm's job name.
        run_dir: the run directory of the training run.
    """

    job_id: str
    job_name: str
    run_dir: str


@dataclass(frozen=True)
class JobStatus:
    """What :meth:`Farm.describe` returns.

    Attributes:
        state: the run state.
        ranks_running: frames running now [count].
        ranks_total: frames in the layer [count].
        native_state: the farm's own state name (for display).
        frames: per-frame detail, e.g. ``{"0": {"state": "RUNNING", "host": "node1", "retries": 0}}``.
    """

    state: RunState
    ranks_running: int = 0
    ranks_total: int = 0
    native_state: str = ""
    frames: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


class Farm(Protocol):
    """A render farm backend (OpenCue in production, fakes in tests)."""

    def dry_run(self, job: TrainingJob) -> str:
        """The job spec the farm would receive (OpenCue: XML); contacts no server."""
        ...

    def submit(self, job: TrainingJob) -> JobHandle:
        """Launch the job. Raises FarmError."""
        ...

    def describe(self, handle: JobHandle) -> JobStatus:
        """Current status. Raises FarmError when the farm cannot be reached."""
        ...

    def cancel(self, handle: JobHandle) -> None:
        """Kill the job; a job already finished or gone is not an error (idempotent)."""
        ...

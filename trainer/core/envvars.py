"""Every environment variable cuetrain reads, in one table, turned into frozen values.

Like submitit's ``JobEnvironment``: nothing else in the project reads ``os.environ`` for these
names. Sources: Foundry's CopyCat distributed-training page (``COPYCAT_*``), torchrun's
documentation (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and OpenCue RQD's frame
environment (``CUE_*``, set by rqd/rqcore.py for every frame).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Mapping

from trainer.core.exitcodes import ExitCode

log = logging.getLogger(__name__)

#: name -> meaning. The four REQUIRED names switch distributed mode on (CopyCat's rule: if one is
#: missing, training runs non-distributed).
ENV_TABLE: dict[str, str] = {
    "COPYCAT_MAIN_ADDR": "host/IP of rank 0 (the main address)",
    "COPYCAT_MAIN_PORT": "TCP port of rank 0's rendezvous store (1-65535)",
    "COPYCAT_RANK": "this process's rank, 0 <= rank < world size",
    "COPYCAT_WORLD_SIZE": "number of processes in the gang (>= 1)",
    "COPYCAT_SYNC_INTERVAL": "optional: all-reduce gradients every N steps (default 1)",
    "COPYCAT_LOCAL_ADDR": "optional: local IP or interface name for gloo/NCCL traffic",
    "CUETRAIN_GANG_TOKEN": "optional: per-job secret every rank must prove to join the gang (HMAC)",
    "RANK": "torchrun: rank (fallback when COPYCAT_RANK is unset)",
    "WORLD_SIZE": "torchrun: world size (fallback)",
    "MASTER_ADDR": "torchrun: main address (fallback)",
    "MASTER_PORT": "torchrun: main port (fallback)",
    "CUE_IFRAME": "OpenCue RQD: frame number f of this frame (its ranks are f*L .. f*L+L-1, L = ranks per frame)",
    "CUE_JOB": "OpenCue RQD: job name",
    "CUE_LAYER": "OpenCue RQD: layer name",
    "CUE_GPU_CORES": "OpenCue RQD: GPU indices reserved for this frame (comma separated; split over its ranks)",
    "CUE_THREADS": "OpenCue RQD: cores reserved for this frame (each of its L ranks gets CUE_THREADS / L threads)",
    "CUE_JOB_ID": "OpenCue Cuebot: id of the frame's job (unique per submission)",
    "CUETRAIN_MAIN_HOST": "farm frame 0: host name or IP it publishes as the main address (default: the IP chosen "
                          "by trainer.core.netaddr: route to Cuebot, else default route, else the only interface)",
    "CUETRAIN_PYTHON": "GUI in a DCC: the Python interpreter of the cuetrain environment that runs every farm call "
                       "and the advisor (default: this interpreter when it is a Python, else python3 on PATH)",
    "CUETRAIN_TEMPLATE_PATH": "farm templates: folders (os.pathsep separated) searched before farm_templates/",
    "CUEBOT_HOSTS": "pycue: Cuebot host[:port] list, comma separated (pycue reads it itself; cuetrain passes it "
                    "on to frames that use the cuebot rendezvous)",
    "SHOW": "pipeline: current show (default of `cuetrain submit --show`)",
    "SHOT": "pipeline: current shot (default of `cuetrain submit --shot`)",
    "CUDA_VISIBLE_DEVICES": "CUDA: GPUs the trainer sees; farm frames set it per rank from CUE_GPU_CORES",
    "OMP_NUM_THREADS": "OpenMP/torch CPU threads per rank; farm frames set it from CUE_THREADS / L when unset",
    "GLOO_SOCKET_IFNAME": "gloo: interface for collectives; cuetrain sets it (trainer.core.netaddr) unless already set",
    "NCCL_SOCKET_IFNAME": "NCCL: interface for its sockets; cuetrain sets it (trainer.core.netaddr) unless already set",
    "CUETRAIN_SCRATCH": "optional: local scratch folder for the host's decoded copy of the training shot, shared by "
                        "the ranks of a frame (default: the system temporary folder, TMPDIR or /tmp)",
    "CUETRAIN_ERROR_FILE": "set by cuetrain's rank supervisor: where a failing rank writes its failure record "
                           "(trainer.record.rankfailure; read only there)",
    "CUETRAIN_RUN_LEASE": "set by cuetrain local for its ranks: the supervisor holds the run directory's lease "
                          "(trainer.record.lease), so rank 0 claims none; and for its model.onnx export, which "
                          "takes that lease over",
    "CUETRAIN_AGENT_PID": "set by cuetrain's rank supervisors (cuetrain local, a frame's node agent): its pid; the "
                          "rank dies by SIGKILL when that process dies (trainer.core.signals.die_with_supervisor)",
    "CUETRAIN_EXPORT_ONNX": "optional: 0 skips writing model.onnx at the end of training (default 1; 5-15 s on CPU)",
}

REQUIRED = ("COPYCAT_MAIN_ADDR", "COPYCAT_MAIN_PORT", "COPYCAT_RANK", "COPYCAT_WORLD_SIZE")
_TORCHRUN = {"COPYCAT_MAIN_ADDR": "MASTER_ADDR", "COPYCAT_MAIN_PORT": "MASTER_PORT",
             "COPYCAT_RANK": "RANK", "COPYCAT_WORLD_SIZE": "WORLD_SIZE"}


class EnvError(ValueError):
    """An environment variable holds a bad value; the message names the variable, value and fix (exit code 2)."""

    exit_code = int(ExitCode.USAGE)


@dataclass(frozen=True)
class DistEnv:
    """The distributed setting of this process.

    Attributes:
        distributed: True when all four required variables were found.
        rank: this process's rank (0 when not distributed).
        world_size: number of processes (1 when not distributed).
        main_addr: host/IP of rank 0 ("" when not distributed).
        main_port: TCP port of rank 0's store (0 when not distributed).
        sync_interval: all-reduce gradients every this many steps (>= 1).
        local_addr: local IP or interface name for collective traffic, or None.
        missing: names of the required variables that were missing (empty when distributed).
        token: ``CUETRAIN_GANG_TOKEN`` (per-job secret for the gang check), or None.
    """

    distributed: bool
    rank: int = 0
    world_size: int = 1
    main_addr: str = ""
    main_port: int = 0
    sync_interval: int = 1
    local_addr: str | None = None
    missing: tuple[str, ...] = ()
    token: str | None = field(default=None, repr=False)

    @property
    def is_main(self) -> bool:
        """True for rank 0: this process logs, writes contact sheets, metrics and checkpoints."""
        return self.rank == 0


def _int(name: str, value: str, minimum: int, maximum: int | None = None) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise EnvError(f"{name}={value!r} is not an integer; set {name} to a whole number ({ENV_TABLE.get(name, '')})") from None
    if n < minimum or (maximum is not None and n > maximum):
        rng = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise EnvError(f"{name}={n} is out of range; it must be {rng}")
    return n


def read_dist_env(env: Mapping[str, str] | None = None) -> DistEnv:
    """Read the distributed setting from ``env`` (default ``os.environ``).

    COPYCAT variables win; torchrun's ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` fill in
    any that are unset. If any of the four required values is still missing, the result is
    non-distributed and ``missing`` lists what was missing.

    Raises:
        EnvError: a value is not an integer, out of range, or ``rank >= world size``.
    """
    env = os.environ if env is None else env
    values: dict[str, str] = {}
    missing = []
    for name in REQUIRED:
        raw = env.get(name) or env.get(_TORCHRUN[name])
        if raw is None or not raw.strip():
            missing.append(name)
        else:
            values[name] = raw.strip()
    sync = _int("COPYCAT_SYNC_INTERVAL", env.get("COPYCAT_SYNC_INTERVAL", "1") or "1", 1)
    local = (env.get("COPYCAT_LOCAL_ADDR") or "").strip() or None
    token = env.get("CUETRAIN_GANG_TOKEN") or None
    if missing:
        return DistEnv(distributed=False, sync_interval=sync, local_addr=local, missing=tuple(missing), token=token)
    world = _int("COPYCAT_WORLD_SIZE", values["COPYCAT_WORLD_SIZE"], 1)
    rank = _int("COPYCAT_RANK", values["COPYCAT_RANK"], 0)
    if rank >= world:
        raise EnvError(
            f"COPYCAT_RANK={rank} must be < COPYCAT_WORLD_SIZE={world}; "
            "ranks are numbered 0..WORLD_SIZE-1 (one per farm frame)")
    port = _int("COPYCAT_MAIN_PORT", values["COPYCAT_MAIN_PORT"], 1, 65535)
    return DistEnv(distributed=True, rank=rank, world_size=world, main_addr=values["COPYCAT_MAIN_ADDR"],
                   main_port=port, sync_interval=sync, local_addr=local, token=token)


@dataclass(frozen=True)
class CueFrameEnv:
    """What RQD tells a frame about itself.

    Attributes:
        frame: ``CUE_IFRAME`` (the frame number, i.e. the rank), or None outside OpenCue.
        job: ``CUE_JOB`` or "".
        layer: ``CUE_LAYER`` or "".
        gpu_cores: ``CUE_GPU_CORES`` split on commas (GPU indices), empty when unset.
        threads: ``CUE_THREADS`` (cores reserved) or None.
    """

    frame: int | None
    job: str = ""
    layer: str = ""
    gpu_cores: tuple[str, ...] = ()
    threads: int | None = None


def read_cue_env(env: Mapping[str, str] | None = None) -> CueFrameEnv:
    """Read RQD's frame variables from ``env`` (default ``os.environ``).

    Raises:
        EnvError: ``CUE_IFRAME`` or ``CUE_THREADS`` is set but not a non-negative integer.
    """
    env = os.environ if env is None else env
    raw_frame = (env.get("CUE_IFRAME") or "").strip()
    frame = _int("CUE_IFRAME", raw_frame, 0) if raw_frame else None
    raw_threads = (env.get("CUE_THREADS") or "").strip()
    threads = _int("CUE_THREADS", raw_threads, 0) if raw_threads else None
    gpus = tuple(g.strip() for g in (env.get("CUE_GPU_CORES") or "").split(",") if g.strip())
    return CueFrameEnv(frame=frame, job=env.get("CUE_JOB", ""), layer=env.get("CUE_LAYER", ""),
                       gpu_cores=gpus, threads=threads)


def copycat_env(main_addr: str, main_port: int, rank: int, world_size: int,
                sync_interval: int = 1, local_addr: str | None = None, token: str | None = None) -> dict[str, str]:
    """The COPYCAT variables (and the gang token) a launcher (local or farm frame) sets for one rank."""
    out = {"COPYCAT_MAIN_ADDR": main_addr, "COPYCAT_MAIN_PORT": str(main_port),
           "COPYCAT_RANK": str(rank), "COPYCAT_WORLD_SIZE": str(world_size),
           "COPYCAT_SYNC_INTERVAL": str(sync_interval)}
    if local_addr:
        out["COPYCAT_LOCAL_ADDR"] = local_addr
    if token:
        out["CUETRAIN_GANG_TOKEN"] = token
    return out


@dataclass(frozen=True)
class FarmEnv:
    """What the farm side of cuetrain (``cue_plugin``) reads from the environment.

    Attributes:
        job_id: ``CUE_JOB_ID`` (the OpenCue job id of this frame) or "".
        main_host: ``CUETRAIN_MAIN_HOST`` (frame 0's published host override) or None.
        cuebot_hosts: ``CUEBOT_HOSTS`` split on commas (empty when unset).
        template_path: ``CUETRAIN_TEMPLATE_PATH`` split on ``os.pathsep`` (empty when unset).
        show: ``SHOW`` or "".
        shot: ``SHOT`` or "".
        cuda_visible_devices: ``CUDA_VISIBLE_DEVICES`` or None.
        omp_num_threads: ``OMP_NUM_THREADS`` or None.
    """

    job_id: str = ""
    main_host: str | None = None
    cuebot_hosts: tuple[str, ...] = ()
    template_path: tuple[str, ...] = ()
    show: str = ""
    shot: str = ""
    cuda_visible_devices: str | None = None
    omp_num_threads: str | None = None


def _split(raw: str | None, sep: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in (raw or "").split(sep) if p.strip())


def read_farm_env(env: Mapping[str, str] | None = None) -> FarmEnv:
    """Read the farm-side variables from ``env`` (default ``os.environ``); never raises."""
    env = os.environ if env is None else env
    return FarmEnv(job_id=(env.get("CUE_JOB_ID") or "").strip(),
                   main_host=(env.get("CUETRAIN_MAIN_HOST") or "").strip() or None,
                   cuebot_hosts=_split(env.get("CUEBOT_HOSTS"), ","),
                   template_path=_split(env.get("CUETRAIN_TEMPLATE_PATH"), os.pathsep),
                   show=(env.get("SHOW") or "").strip(), shot=(env.get("SHOT") or "").strip(),
                   cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"),
                   omp_num_threads=env.get("OMP_NUM_THREADS"))


def environ_with(updates: Mapping[str, str], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """A copy of ``env`` (default ``os.environ``) with ``updates`` applied: the environment of a child process."""
    out = dict(os.environ if env is None else env)
    out.update(updates)
    return out


@dataclass(frozen=True)
class NetEnv:
    """What the address choice (``trainer.core.netaddr``) reads from the environment.

    Attributes:
        cuebot_hosts: ``CUEBOT_HOSTS`` split on commas (empty when unset): the route to Cuebot picks the IP.
        gloo_socket_ifname: ``GLOO_SOCKET_IFNAME`` set before cuetrain started, or None.
        nccl_socket_ifname: ``NCCL_SOCKET_IFNAME`` set before cuetrain started, or None.
    """

    cuebot_hosts: tuple[str, ...] = ()
    gloo_socket_ifname: str | None = None
    nccl_socket_ifname: str | None = None


def read_net_env(env: Mapping[str, str] | None = None) -> NetEnv:
    """Read the address-choice variables from ``env`` (default ``os.environ``); never raises."""
    env = os.environ if env is None else env
    return NetEnv(cuebot_hosts=_split(env.get("CUEBOT_HOSTS"), ","),
                  gloo_socket_ifname=(env.get("GLOO_SOCKET_IFNAME") or "").strip() or None,
                  nccl_socket_ifname=(env.get("NCCL_SOCKET_IFNAME") or "").strip() or None)


def cuetrain_python(env: Mapping[str, str] | None = None) -> str | None:
    """``CUETRAIN_PYTHON`` (the cuetrain environment's interpreter, for the GUI's subprocesses) or None."""
    env = os.environ if env is None else env
    return (env.get("CUETRAIN_PYTHON") or "").strip() or None


def read_export_onnx(env: Mapping[str, str] | None = None) -> bool:
    """``CUETRAIN_EXPORT_ONNX`` (default on): whether rank 0 also writes ``model.onnx``.

    Raises:
        EnvError: a value other than 0/1/true/false/yes/no/on/off.
    """
    env = os.environ if env is None else env
    raw = (env.get("CUETRAIN_EXPORT_ONNX") or "1").strip().lower()
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise EnvError(f"CUETRAIN_EXPORT_ONNX={raw!r} is not 0 or 1; set it to 0 to skip model.onnx, 1 to write it")


def read_scratch(env: Mapping[str, str] | None = None) -> str:
    """``CUETRAIN_SCRATCH``, else the system temporary folder (``tempfile.gettempdir()``: TMPDIR, else /tmp)."""
    import tempfile

    env = os.environ if env is None else env
    return (env.get("CUETRAIN_SCRATCH") or "").strip() or tempfile.gettempdir()


@dataclass(frozen=True)
class ErrorFileEnv:
    """Where this rank writes its failure record (``CUETRAIN_ERROR_FILE``, set by the rank supervisor).

    Attributes:
        path: the file ("" when no supervisor asked for one).
        rank: ``COPYCAT_RANK`` (None when unset or not a number).
    """

    path: str = ""
    rank: int | None = None


def read_error_file_env(env: Mapping[str, str] | None = None) -> ErrorFileEnv:
    """``CUETRAIN_ERROR_FILE`` and ``COPYCAT_RANK`` for :mod:`trainer.record.rankfailure`; never raises."""
    env = os.environ if env is None else env
    rank = (env.get("COPYCAT_RANK") or "").strip()
    return ErrorFileEnv(path=(env.get("CUETRAIN_ERROR_FILE") or "").strip(), rank=int(rank) if rank.isdigit() else None)


def read_run_lease_env(env: Mapping[str, str] | None = None) -> str:
    """``CUETRAIN_RUN_LEASE``: the id of the lease a supervisor holds for this rank's run directory, or ""."""
    return (os.environ if env is None else env).get("CUETRAIN_RUN_LEASE", "").strip()


def read_agent_pid_env(env: Mapping[str, str] | None = None) -> int | None:
    """``CUETRAIN_AGENT_PID``: the pid of the supervisor that started this rank, None when unset.

    Raises:
        EnvError: the value is not a positive integer (it is set by :func:`trainer.agent.supervise.run_ranks`).
    """
    raw = (os.environ if env is None else env).get("CUETRAIN_AGENT_PID", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) <= 0:
        raise EnvError(f"CUETRAIN_AGENT_PID={raw!r} is not a process id; it is set by cuetrain's rank supervisor: "
                       "unset it to run a rank by hand")
    return int(raw)

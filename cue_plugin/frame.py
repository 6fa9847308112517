"""``python -m cue_plugin.frame``: what every frame of a training job runs on its render node.

    python -u -m cue_plugin.frame --frame 3 --world-size 4 --rendezvous file \\
        --rendezvous-timeout 600 -- --input ... --target ... --run-dir ...

1. The rank is the frame number: ``--frame`` (Cuebot's ``#IFRAME#`` token) or ``CUE_IFRAME``.
2. Rendezvous (see :mod:`cue_plugin.rendezvous`): frame 0 reserves a port and publishes its main
   address; the other frames wait for a usable publication (exit code 3 after the timeout).
3. The trainer runs as a child process, ``python -u -m trainer.cli train ARGS``, with
   ``COPYCAT_MAIN_ADDR/PORT/RANK/WORLD_SIZE/SYNC_INTERVAL`` and the job token
   (``CUETRAIN_GANG_TOKEN``) set; ``CUE_GPU_CORES`` (the GPUs RQD reserved; RQD does not set
   CUDA's variable) becomes ``CUDA_VISIBLE_DEVICES`` with ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (RQD
   numbers GPUs like nvidia-smi, in PCI bus order), and ``CUE_THREADS`` becomes ``OMP_NUM_THREADS``
   unless set. The child stays in the frame's process group, so RQD's kill reaches it; a SIGTERM
   sent to this process alone is passed on.
4. On a retry within the same job (``run.json`` shows a gang of this job already started
   training), ``--resume`` is added so the gang continues from the latest checkpoint.
5. Every line (this module's log and the trainer's output) goes to stdout (the frame log, line by
   line) and to ``RUN_DIR/logs/rank_N.log``. The exit code is the trainer's (128 + signal number
   when it was killed); 2 = bad arguments, 3 = rendezvous timeout, 6 = port unavailable,
   127 = the trainer could not be started.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import IO, Sequence

from cue_plugin import rendezvous
from cue_plugin.spec import RENDEZVOUS_MODES
from trainer.config import ConfigError, TrainConfig, add_train_arguments, config_from_args
from trainer.envvars import (CueFrameEnv, EnvError, copycat_env, environ_with, read_cue_env, read_dist_env,
                             read_farm_env)
from trainer.rundir import FILE_MODE, RunDirError, RunPaths, read_json

log = logging.getLogger(__name__)

#: The trainer command (train arguments are appended).
TRAINER_COMMAND = (sys.executable, "-u", "-m", "trainer.cli", "train")
EXIT_USAGE = 2
EXIT_NO_TRAINER = 127  # the shell's "command not found"


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Split ``FRAME_ARGS -- TRAIN_ARGS`` and parse the frame arguments.

    Raises:
        SystemExit: bad frame arguments (argparse prints the usage, exit code 2).
    """
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    p = argparse.ArgumentParser(prog="python -m cue_plugin.frame", description=__doc__.split("\n")[0])
    p.add_argument("--frame", help="frame number = rank (Cuebot's #IFRAME#; default CUE_IFRAME)")
    p.add_argument("--world-size", type=int, required=True, help="number of ranks = frames in the layer")
    p.add_argument("--rendezvous", choices=RENDEZVOUS_MODES, default="file", help="how ranks find frame 0")
    p.add_argument("--rendezvous-timeout", type=float, default=600.0, help="wait for frame 0 at most [s]")
    return p.parse_args(argv[:split]), argv[split + 1:]


def frame_rank(frame_arg: str | None, cue: CueFrameEnv, world_size: int) -> int:
    """The rank: ``--frame`` if it is a number (an unreplaced ``#IFRAME#`` is ignored), else ``CUE_IFRAME``.

    Raises:
        ValueError: no frame number, or not in ``0..world_size-1``.
    """
    rank = int(frame_arg) if frame_arg and frame_arg.strip().isdigit() else cue.frame
    if rank is None:
        raise ValueError("no frame number: pass --frame N or run under RQD (CUE_IFRAME)")
    if cue.frame is not None and cue.frame != rank:
        log.warning("--frame %d and CUE_IFRAME=%d differ; using %d", rank, cue.frame, rank)
    if not 0 <= rank < world_size:
        raise ValueError(f"frame {rank} is not a rank of a world of {world_size} (frames must be 0-{world_size - 1})")
    return rank


def train_config(train_args: list[str]) -> TrainConfig:
    """Parse the trainer arguments as ``cuetrain train`` would (to find the run directory).

    Raises:
        ConfigError: bad or missing train arguments.
    """
    p = argparse.ArgumentParser(prog="cuetrain train", add_help=False)
    add_train_arguments(p)
    ns, unknown = p.parse_known_args(train_args)
    if unknown:
        raise ConfigError(f"unknown train argument(s) {unknown}")
    return config_from_args(ns)


def device_env(cue: CueFrameEnv, omp_num_threads: str | None) -> dict[str, str]:
    """GPU and thread variables for the trainer from RQD's reservation (empty when nothing is reserved)."""
    out: dict[str, str] = {}
    if cue.gpu_cores:
        out["CUDA_VISIBLE_DEVICES"] = ",".join(cue.gpu_cores)
        out["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if cue.threads and not omp_num_threads:
        out["OMP_NUM_THREADS"] = str(cue.threads)
    return out


def resume_args(train_args: list[str], paths: RunPaths, job_id: str) -> list[str]:
    """``train_args`` plus ``--resume`` when a gang of job ``job_id`` already started training in this run dir.

    ``run.json`` ``farm.attempts_at_submit`` is the number of training attempts recorded at submit;
    more attempts now (written by rank 0 once its gang formed) means this frame is a retry.
    """
    if "--resume" in train_args or not job_id:
        return train_args
    try:
        record = read_json(paths.run_json)
    except RunDirError:
        return train_args
    farm = record.get("farm") if isinstance(record.get("farm"), dict) else {}
    attempts = record.get("attempts") if isinstance(record.get("attempts"), list) else []
    if farm.get("job_id") == job_id and len(attempts) > int(farm.get("attempts_at_submit", 0) or 0):
        log.info("retry of job %s: %d training attempt(s) recorded, adding --resume", job_id, len(attempts))
        return [*train_args, "--resume"]
    return train_args


class RankLog:
    """Writes lines to stdout (the frame log) and to ``RUN_DIR/logs/rank_N.log`` (mode 0640), line by line.

    Also a logging handler target: :meth:`attach` sends ``cue_plugin`` log records to both.
    """

    def __init__(self, paths: RunPaths, rank: int) -> None:
        paths.logs.mkdir(mode=0o750, parents=True, exist_ok=True)
        fd = os.open(paths.rank_log(rank), os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        self._file: IO[str] = os.fdopen(fd, "a", encoding="utf-8", errors="replace", buffering=1)
        self._lock = threading.Lock()
        self._handler = logging.StreamHandler(self)  # type: ignore[arg-type]
        self._handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s [frame {rank}] %(name)s: %(message)s"))

    def write(self, text: str) -> None:
        with self._lock:
            for stream in (sys.stdout, self._file):
                stream.write(text)
                stream.flush()

    def flush(self) -> None:
        """Lines are flushed as written."""

    def attach(self) -> None:
        root = logging.getLogger("cue_plugin")
        root.addHandler(self._handler)
        if root.level == logging.NOTSET or root.level > logging.INFO:
            root.setLevel(logging.INFO)

    def close(self) -> None:
        logging.getLogger("cue_plugin").removeHandler(self._handler)
        self._file.close()


def run_trainer(command: Sequence[str], env: dict[str, str], out: RankLog) -> int:
    """Run the trainer, relaying its output lines to ``out``; returns its exit code (128 + signal if killed)."""
    try:
        proc = subprocess.Popen(list(command), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        log.error("cannot start the trainer %s: %s", command[0], exc)
        return EXIT_NO_TRAINER
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.terminate())
    try:
        assert proc.stdout is not None  # PIPE above
        for raw in iter(proc.stdout.readline, b""):
            out.write(raw.decode("utf-8", errors="replace"))
        code = proc.wait()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 128 - code if code < 0 else code


_Source = rendezvous.FileSource | rendezvous.CuebotSource


def _source(mode: str, paths: RunPaths, cue: CueFrameEnv, job_id: str) -> _Source:
    if mode == "cuebot":
        return rendezvous.CuebotSource(cue.job, cue.layer, job_id or cue.job)
    return rendezvous.FileSource(paths.rendezvous)


def _meet(ns: argparse.Namespace, rank: int, paths: RunPaths, cue: CueFrameEnv,
          token: str | None) -> tuple[rendezvous.Publication, rendezvous.PortReservation | None, _Source]:
    """Frame 0 hosts (reserve + publish); other frames wait. Returns (publication, reservation, source)."""
    farm = read_farm_env()
    source = _source(ns.rendezvous, paths, cue, farm.job_id)
    if rank == 0:
        host = farm.main_host or (None if ns.rendezvous == "cuebot" else socket.gethostname())
        reservation, pub = source.host(host, token)
        log.info("frame 0 (attempt %s) hosts the main address %s for %d rank(s)", pub.attempt, pub.address,
                 ns.world_size)
        return pub, reservation, source
    pub = rendezvous.wait_for_main(source, rank=rank, token=token, timeout_s=ns.rendezvous_timeout)
    return pub, None, source


def _run(ns: argparse.Namespace, rank: int, paths: RunPaths, train_args: list[str], cue: CueFrameEnv,
         trainer_command: Sequence[str], out: RankLog) -> int:
    dist = read_dist_env()
    pub, reservation, source = _meet(ns, rank, paths, cue, dist.token)
    try:
        farm = read_farm_env()
        env = copycat_env(pub.host, pub.port, rank, ns.world_size, dist.sync_interval, dist.local_addr, dist.token)
        env.update(device_env(cue, farm.omp_num_threads))
        env["PYTHONUNBUFFERED"] = "1"
        args = resume_args(train_args, paths, farm.job_id)
        log.info("rank %d/%d starting the trainer (main %s%s)", rank, ns.world_size, pub.address,
                 f", CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}" if "CUDA_VISIBLE_DEVICES" in env else "")
        code = run_trainer([*trainer_command, *args], environ_with(env), out)
    finally:
        if reservation is not None:
            reservation.close()
            source.retract(pub)
    log.info("rank %d: trainer exited with code %d", rank, code)
    return code


def main(argv: Sequence[str] | None = None, *, trainer_command: Sequence[str] | None = None) -> int:
    """Run one frame; returns its exit code.

    Args:
        argv: frame arguments ``[...] -- TRAIN_ARGS`` (default ``sys.argv[1:]``).
        trainer_command: the trainer command before the train arguments (default :data:`TRAINER_COMMAND`;
            tests pass a stub).
    """
    ns, train_args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cue = read_cue_env()
        rank = frame_rank(ns.frame, cue, ns.world_size)
        paths = RunPaths.of(train_config(train_args).run_dir)
        paths.create()
        out = RankLog(paths, rank)
    except (ValueError, EnvError, ConfigError, RunDirError, OSError) as exc:
        print(f"cue_plugin.frame: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    out.attach()
    try:
        log.info("frame %d of %d on %s (pid %d), rendezvous %s", rank, ns.world_size, socket.gethostname(),
                 os.getpid(), ns.rendezvous)
        return _run(ns, rank, paths, train_args, cue, trainer_command or TRAINER_COMMAND, out)
    except rendezvous.RendezvousError as exc:
        log.error("%s", exc)
        return exc.exit_code
    except EnvError as exc:
        log.error("%s", exc)
        return EXIT_USAGE
    finally:
        out.close()


if __name__ == "__main__":
    sys.exit(main())

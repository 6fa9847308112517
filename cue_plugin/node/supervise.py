"""The frame's side of the rank supervisor (:mod:`trainer.agent.supervise`): its log and its ranks.

A frame runs L = ranks-per-frame trainer processes through :func:`trainer.agent.supervise.run_ranks`, the
same supervisor ``cuetrain local`` uses. Output lines go to stdout (the frame log CueGUI shows,
prefixed ``[rank N]`` when L > 1; paced by :mod:`cue_plugin.node.framelog` so that RQD logs every line)
and to ``RUN_DIR/logs/rank_N.log``. The frame's own log records go to the log of its first rank.
A SIGTERM sent to the frame is passed on to every trainer.
"""

from __future__ import annotations

import logging
import sys

from cue_plugin.node.framelog import PacedLines
from trainer.core.envvars import CueFrameEnv
from trainer.record.rundir import RunPaths
from trainer.agent.supervise import EXIT_NO_TRAINER, Devices, GangExit, RankLogs, run_ranks

_LOGGERS = ("cue_plugin", "trainer.agent.supervise")  # the frame's own records

__all__ = ["EXIT_NO_TRAINER", "GangExit", "RankLog", "frame_devices", "frame_ranks", "run_ranks"]


class RankLog:
    """The frame's log: lines to stdout (the frame log) and to ``RUN_DIR/logs/rank_N.log`` of its first rank.

    :attr:`logs` is the :class:`~trainer.agent.supervise.RankLogs` its trainers write to (the same files and
    stdout, one lock). :meth:`attach` sends ``cue_plugin`` log records through it. Stdout goes through
    :class:`cue_plugin.node.framelog.PacedLines` (one line per write, under RankLogs' lock); :meth:`close`
    drains it.

    Args:
        paths: the run directory layout.
        rank: the frame's first rank (``frame * ranks_per_frame``): its log file gets the frame's records.
        prefix: prefix trainer lines on stdout with ``[rank N]`` (frames with more than one rank).
    """

    def __init__(self, paths: RunPaths, rank: int, *, prefix: bool = False) -> None:
        self._stdout = PacedLines(sys.stdout)
        self.logs = RankLogs(paths, prefix=prefix, stream=self._stdout)  # type: ignore[arg-type]
        self._rank = rank
        self._handler = logging.StreamHandler(self)  # type: ignore[arg-type]
        self._handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s [frame {rank}] %(name)s: %(message)s"))

    def write(self, text: str) -> None:
        self.logs.write(self._rank, text, prefixed=False)

    def flush(self) -> None:
        """Lines are flushed as written."""

    def attach(self) -> None:
        """Send the records of the frame (``cue_plugin``) and of its rank supervisor (``trainer.agent.supervise``)
        through this log: paced on stdout, and in the first rank's log file."""
        for name in _LOGGERS:
            root = logging.getLogger(name)
            root.addHandler(self._handler)
            if root.level == logging.NOTSET or root.level > logging.INFO:
                root.setLevel(logging.INFO)

    def close(self) -> None:
        """Detach, wait until RQD has read every stdout line, close the rank logs."""
        for name in _LOGGERS:
            logging.getLogger(name).removeHandler(self._handler)
        self._stdout.drain()
        self.logs.close()


def frame_ranks(frame: int, ranks_per_frame: int) -> range:
    """The ranks frame ``frame`` runs: ``frame*L .. frame*L+L-1`` (L = ``ranks_per_frame``)."""
    return range(frame * ranks_per_frame, (frame + 1) * ranks_per_frame)


def frame_devices(cue: CueFrameEnv, omp_num_threads: str | None) -> Devices:
    """What RQD reserved for the frame: ``CUE_GPU_CORES`` (RQD does not set CUDA's variable) and
    ``CUE_THREADS``, unless ``OMP_NUM_THREADS`` is set already (it then applies to every rank as is)."""
    return Devices(gpus=cue.gpu_cores, threads=None if omp_num_threads else cue.threads, gpu_source="CUE_GPU_CORES")

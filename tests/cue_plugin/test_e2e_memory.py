"""A frame's memory as the farm sees it: a gpu-node-4x-shaped frame (4 ranks in one frame, per-rank resources x 4)
trains through a real RQD against the Cuebot double, and the peak RSS of its whole process tree stays within the
frame's reservation.

RSS is measured as RQD 1.37 measures it (``trainer.core.procstat.frame_rss_bytes``, from rqd/rqmachine.py: the
``/proc/PID/stat`` rss of every process in the frame's session and its direct children's sessions, summed),
sampled every 0.1 s where RQD samples every 10 s; RQD's own ``max_rss`` from its reports to the double is checked
beside it. The shot (40 pairs of 1024 x 1024) decodes to 0.47 GiB of float16, which the data path before the host
copy held in every rank, twice while stacking (4 ranks: ~4 GiB on top of the trainers, beyond this reservation).
"""

from __future__ import annotations

import os
import shutil
import threading
import time

import psutil
import pytest

from cue_plugin.submit import templates
from cue_plugin.submit.opencue_farm import OpenCueFarm
from cue_plugin.submit.spec import RunState
from tests.conftest import CHILD_PYTHONPATH, make_pairs
from tests.cue_plugin.test_e2e_training import ROOT, farm, wait_finished  # noqa: F401 (fixture)
from trainer.core.config import TrainConfig
from trainer.core.procstat import frame_rss_bytes
from trainer.record.rundir import RunPaths

RANKS_PER_FRAME = 4  # as farm_templates/gpu-node-4x.toml
MEMORY_MB = 1280  # per rank: the frame reserves 5 GiB


class FramePeak:
    """Samples the frame's RSS (RQD's rule) every 0.1 s once its process appears; keeps the peak [bytes]."""

    def __init__(self, run_dir: str) -> None:
        self.run_dir, self.peak, self.samples, self.session = run_dir, 0, 0, None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.session is None:
                for p in psutil.process_iter(["cmdline"]):
                    cmd = " ".join(p.info["cmdline"] or [])
                    if "cue_plugin.frame" in cmd and self.run_dir in cmd and "/usr/bin/time" not in cmd:
                        self.session = os.getsid(p.pid)  # RQD starts the frame with setsid: session = frame pid
            else:
                self.peak = max(self.peak, frame_rss_bytes(self.session))
                self.samples += 1
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def big_shot(folder, frames: int, distinct: int = 4):
    """(input, target) folders of ``frames`` EXR pairs of 1024 x 1024: ``distinct`` pairs from
    :func:`tests.conftest.make_pairs`, the others byte copies of them under the following frame numbers.
    What the frame holds in memory depends on the frames' count and size, not their content, and writing
    one zip-compressed 1024 x 1024 EXR pair costs ~0.25 s of CPU (40 pairs: ~10 s; a copy: ~0)."""
    inp, tgt = make_pairs(folder, frames=distinct, height=1024, width=1024, ext="exr")
    for i in range(distinct, frames):
        for side in (inp, tgt):
            shutil.copyfile(side / f"plate.{1001 + i % distinct:04d}.exr", side / f"plate.{1001 + i:04d}.exr")
    return inp, tgt


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_four_rank_frame_stays_within_its_memory_reservation_as_rqd_measures_it(farm, tmp_path):  # noqa: F811
    inp, tgt = big_shot(tmp_path / "data", frames=40)
    run = tmp_path / "run"
    cfg = TrainConfig(input_dir=str(inp), target_dir=str(tgt), run_dir=str(run), steps=6, batch_size=4, crop_size=64,
                      log_interval=2, checkpoint_interval=6, contact_sheet_interval=6, data_cache_mb=128)
    extra = {"PYTHONPATH": CHILD_PYTHONPATH, "CUETRAIN_MAIN_HOST": "127.0.0.1", "CUEBOT_HOSTS": farm.cuebot.address,
             "CUETRAIN_EXPORT_ONNX": "0", "CUETRAIN_SCRATCH": str(tmp_path / "scratch")}
    job = templates.make_job(cfg, template="cpu-test", world_size=RANKS_PER_FRAME, ranks_per_frame=RANKS_PER_FRAME,
                             cores=0.5, memory_mb=MEMORY_MB, show="cuetrain", shot="e2e", user="trainer",
                             extra_env=extra, rendezvous_timeout_s=60, max_retries=0)
    reservation = job.frame_resources["memory_mb"] * 2**20  # what the frame reserves [bytes]
    cue = OpenCueFarm(hosts=[farm.cuebot.address], allow_root=True)
    peak = FramePeak(str(run))
    try:
        handle = cue.submit(job)
        status = wait_finished(cue, handle, RunPaths.of(run), timeout=240)
    finally:
        peak.stop()
    assert status.state is RunState.SUCCEEDED, status
    assert peak.samples > 20, "the frame's process was not found"
    assert 4 * 150 * 2**20 < peak.peak <= reservation, f"frame peak {peak.peak / 2**30:.2f} GiB"
    with farm.cuebot.state.lock:
        rqd_max = max(f.max_rss for f in farm.cuebot.state.frames.values()) * 1024  # RQD reports KiB
    assert rqd_max <= reservation and rqd_max <= 1.1 * peak.peak  # RQD's own figure: the same measure, sampled less
    print(f"frame of {RANKS_PER_FRAME} ranks: peak RSS {peak.peak / 2**30:.2f} GiB (RQD's max_rss "
          f"{rqd_max / 2**30:.2f} GiB) of a {reservation / 2**30:.2f} GiB reservation, {peak.samples} samples")

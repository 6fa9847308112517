"""Frame-log pacing (cue_plugin.node.framelog): every line the trainer prints reaches the log RQD writes.

The end-to-end test runs the frame's real tee (``RankLog`` + ``run_trainer``) as a frame of a real
``opencue-rqd`` process under the Cuebot double. Its "trainer" prints N lines in ONE write and then dies
with a multi-line traceback, the worst case for RQD 1.37's one-``readline()``-per-wake-up loop.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cue_plugin.node.framelog import PacedLines, PacingConfig
from tests.cuebot.double import CuebotDouble, log_file
from tests.cuebot.fixtures import RQD_START_TIMEOUT_S, free_port, frame_identity, use_pycue
from tests.cuebot.rqd_harness import RqdProcess
from tests.test_cuebot_double import SEPARATOR, SETTLE_TIMEOUT_S, launch

ROOT = Path(__file__).resolve().parents[2]
LINES = 200

# The "trainer": LINES lines in one write, then an uncaught exception (traceback on stderr, merged).
BURST = f"""import sys
sys.stdout.write("".join(f"line-{{i:04d}}\\n" for i in range({LINES})))
sys.stdout.flush()
raise RuntimeError("boom at the end")
"""
# The frame side: the real tee; "unpaced" writes stdout without pacing (the behaviour before framelog).
FRAME = """import sys
from cue_plugin.node.supervise import RankLog, run_ranks
from trainer.record.rundir import RunPaths
run_dir, mode, burst = sys.argv[1:]
paths = RunPaths.of(run_dir)
paths.create()
out = RankLog(paths, 0)
out.attach()
if mode == "unpaced":
    out._stdout._paced = False
code = run_ranks([sys.executable, burst], [(0, {"PATH": "/usr/bin:/bin"})], out.logs).code
out.close()
assert code == 1, code
"""  # exits 0: a DEAD frame would keep the job from FINISHED


def rqlog_lines(job_record, frame_name: str) -> list[str]:
    """What RQD logged between the frame log's header and footer."""
    text = Path(log_file(job_record, frame_name)).read_text()
    return text.split(SEPARATOR)[2].strip().splitlines()


def test_paced_lines_write_one_line_per_write_and_keep_partial_lines():
    read_fd, write_fd = os.pipe()
    writes: list[str] = []

    class Recorder:
        def fileno(self) -> int:
            return write_fd

        def write(self, text: str) -> None:
            writes.append(text)
            os.write(write_fd, text.encode())

        def flush(self) -> None:
            pass

    paced = PacedLines(Recorder(), PacingConfig(max_wait_s=0.01))
    assert paced.paced
    paced.write("a\nb\nc")
    assert writes == ["a\n", "b\n"] and paced.late_lines == 1  # nobody read "a" before "b" was due
    os.read(read_fd, 100)
    paced.write("d\n")
    paced.drain()  # nothing reads: the drain gives up after max_wait_s instead of hanging the frame
    assert writes == ["a\n", "b\n", "cd\n"]
    os.close(read_fd)
    os.close(write_fd)


@pytest.fixture
def rqd_farm(tmp_path):
    """The double and one real RQD that runs frames as this user (RQD_BECOME_JOB_USER=False, as
    test_e2e_training: the frame runs this checkout's interpreter, which another user may not read)."""
    if not os.path.exists("/usr/bin/time"):
        pytest.fail("RQD runs frames through /usr/bin/time (Debian package 'time'; .ci/run installs it)")
    (tmp_path / "logs").mkdir()
    identity = frame_identity()
    cuebot = CuebotDouble(frame_uid=identity.uid, frame_gid=identity.gid, frame_user=identity.user,
                          log_root=str(tmp_path / "logs"))
    cuebot.start()
    rqd = RqdProcess(cuebot.port, free_port(), "rqd0", tmp_path / "rqd0", become_job_user=False)
    try:
        rqd.spawn()
        rqd.wait_ready(RQD_START_TIMEOUT_S)
        yield cuebot
    finally:
        rqd.stop()
        cuebot.stop()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_rqd_logs_every_line_of_a_paced_frame_including_the_traceback(rqd_farm, tmp_path):
    run_dirs = {mode: tmp_path / f"run-{mode}" for mode in ("paced", "unpaced")}
    frame, burst = tmp_path / "frame_tee.py", tmp_path / "burst.py"
    frame.write_text(FRAME)
    burst.write_text(BURST)
    layers = {mode: dict(command=f"/usr/bin/env PYTHONPATH={ROOT} {sys.executable} {frame} {run_dir} {mode} {burst}",
                         range="0") for mode, run_dir in run_dirs.items()}
    with use_pycue(rqd_farm.address):
        job = launch(tmp_path, "framelog", layers)
        rqd_farm.wait_job_finished(job.name(), timeout=SETTLE_TIMEOUT_S * 2)
    record = rqd_farm.jobs()[0]
    paced, unpaced = rqlog_lines(record, "0000-paced"), rqlog_lines(record, "0000-unpaced")
    rank_log = (run_dirs["paced"] / "logs" / "rank_0.log").read_text().splitlines()

    expected = [f"line-{i:04d}" for i in range(LINES)]
    assert paced[:LINES] == expected
    traceback = paced[LINES:paced.index("RuntimeError: boom at the end") + 1]
    assert traceback[0] == "Traceback (most recent call last):" and len(traceback) >= 4  # the whole traceback
    assert "rank 0 exited with code 1" in paced[-1]  # then the supervisor's own record, paced as well
    assert paced == rank_log  # 100%: the frame log CueGUI shows == the rank's own complete log
    unpaced_log = (run_dirs["unpaced"] / "logs" / "rank_0.log").read_text().splitlines()
    assert unpaced == unpaced_log[:len(unpaced)]  # unpaced: an in-order prefix (its length is timing; printed)
    print(f"RQD logged {len(paced)}/{len(rank_log)} lines paced, {len(unpaced)}/{len(rank_log)} unpaced")

"""A local run's terminal (trainer/agent/progress.py, trainer/core/logsetup.py): one progress bar from rank 0's
metrics.jsonl, and of the ranks' lines only warnings, errors and tracebacks."""

from __future__ import annotations

import io
import json
import logging
import time

from trainer.agent.progress import POLL_S, Console
from trainer.core.logsetup import is_detail, progress_line, rank_format
from trainer.record.rundir import RunPaths


def _record(level: int, message: str) -> str:
    record = logging.LogRecord("trainer.gang.formation", level, __file__, 1, message, None, None)
    return logging.Formatter(rank_format(1)).format(record) + "\n"


def test_info_records_and_progress_lines_are_detail_and_the_rest_is_not():
    assert is_detail(_record(logging.INFO, "gang formed")) and is_detail(_record(logging.DEBUG, "nonce"))
    assert is_detail("[rank 1] " + _record(logging.INFO, "gang formed"))  # as the supervisor prefixes it
    assert is_detail("[rank 0] " + progress_line(50, 3000, 0.031, 2e-3, 120.5) + "\n")
    assert not is_detail(_record(logging.WARNING, "1 thread for 2 ranks"))
    assert not is_detail("[rank 0] " + _record(logging.ERROR, "rank 1 exited"))
    assert not is_detail("[rank 0] cuetrain: error: batch size 2 is smaller than the world size 3\n")
    assert not is_detail("Traceback (most recent call last):\n")
    assert not is_detail("[rank 0] training 2 ranks ...\n")


def _rows(paths: RunPaths, steps: range) -> None:
    with open(paths.metrics, "a", encoding="utf-8") as fh:
        for step in steps:
            fh.write(json.dumps({"step": step, "loss": 0.5 / step, "lr": 1e-3, "images_per_s": 100.0}) + "\n")


def test_without_a_terminal_the_bar_is_a_line_per_tenth_and_rank_lines_are_filtered(tmp_path):
    paths = RunPaths.of(tmp_path)
    out = io.StringIO()  # not a terminal
    with Console(paths, total_steps=100, stream=out) as console:
        _rows(paths, range(5, 101, 5))
        console.write("[rank 0] " + _record(logging.INFO, "gang formed"))
        console.write("[rank 1] " + progress_line(5, 100, 0.1, 1e-3, 99.0) + "\n")
        console.write("[rank 1] " + _record(logging.WARNING, "slow disk"))
    text = out.getvalue()
    assert "gang formed" not in text and "[Step:" not in text
    assert "[rank 1] " in text and "slow disk" in text
    meters = [line for line in text.splitlines() if "/100 [" in line]
    assert meters and meters[-1].startswith("100%") and "100/100" in meters[-1] and "loss=0.0050" in meters[-1]
    assert len(meters) <= 11  # at most one line per tenth of the run (and the last)


def test_without_a_terminal_the_last_step_gets_its_line_even_off_the_tenths(tmp_path):
    paths = RunPaths.of(tmp_path)
    out = io.StringIO()
    with Console(paths, total_steps=100, stream=out):
        _rows(paths, [95])  # a line at 95: the next tenth would be 105, past the end
        time.sleep(3 * POLL_S)  # read on its own
        _rows(paths, [100])
    meters = [line for line in out.getvalue().splitlines() if "/100 [" in line]
    assert sum("100/100" in m for m in meters) == 1 and meters[-1].startswith("100%")


def test_the_bar_follows_metrics_written_after_it_started(tmp_path):
    paths = RunPaths.of(tmp_path)
    out = io.StringIO()
    with Console(paths, total_steps=10, stream=out):
        _rows(paths, range(1, 4))
    assert "3/10" in out.getvalue() and "10/10" not in out.getvalue()

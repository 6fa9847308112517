"""Benchmark: polling one run directory with 100k logged steps, as the GUI's Live Updates does.

Prints the median time [ms] over ``--repeats`` of:

* first poll: a fresh ``RunPoller`` reads the whole ``metrics.jsonl`` (and run.json, sheet list);
* next poll, nothing new: stat calls only;
* next poll, 10 new rows: reads only the appended bytes;
* GUI-side apply of a first poll: append to the run's ``MetricSeries`` and decimate 100k points for the plot.

The target is under 20 ms for polls after the first. Not a unit test: run it by hand::

    .venv/bin/python benchmarks/bench_gui_poll.py [--steps 100000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gui.poller import RunPoller  # noqa: E402
from gui.records import MetricSeries, decimate  # noqa: E402
from gui.synthetic import metrics_rows, write_run  # noqa: E402
from trainer.record.rundir import append_metrics  # noqa: E402


def _ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000, help="logged steps in metrics.jsonl")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_run(Path(tmp) / "run", steps=args.steps, log_interval=1, sheet_interval=1000)
        size_mb = paths.metrics.stat().st_size / 1e6
        print(f"run dir: {args.steps} rows ({size_mb:.1f} MB metrics.jsonl), "
              f"{len(paths.list_contact_sheets())} contact sheets; median of {args.repeats} repeats")
        first, idle, grow, apply = [], [], [], []
        next_step = args.steps + 1
        for _ in range(args.repeats):
            poller = RunPoller(paths.root)
            result = None

            def poll_first() -> None:
                nonlocal result
                result = poller.poll()

            first.append(_ms(poll_first))
            assert result is not None and result.new_rows >= args.steps

            def apply_first() -> None:
                series = MetricSeries()
                series.extend(result.metrics)
                decimate(series.view("step"), series.view("loss"))

            apply.append(_ms(apply_first))
            idle.append(_ms(poller.poll))
            append_metrics(paths, metrics_rows(next_step, next_step + 9, 1))
            next_step += 10
            grow.append(_ms(poller.poll))
        for label, values in (("first poll", first), ("next poll, nothing new", idle),
                              ("next poll, 10 new rows", grow), ("apply first poll (series + decimate)", apply)):
            print(f"{label:40s} median {statistics.median(values):8.2f} ms   max {max(values):8.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Time to quality of demo settings: held-out PSNR gain per (steps, batch, crop, lr), and the compute it took.

Each setting trains in this process as ONE rank with the global batch, which gives the same
batches and, up to float rounding, the same weights as ``cuetrain demo``'s 2 ranks (the test suite
checks 2 ranks == 1 rank), then evaluates on the 20 held-out frames like the demo. The gains are
seeded and reproducible whatever the machine's load; the CPU seconds are what the training cost
this process (1 thread). Settings run one after another, or ``--parallel N`` at a time.

A one-off study (it chose the demo's settings; docs/studies/trainer_speed.md, "Time to quality of the demo").
``bench_quality.py`` (also here) and the maintained ``benchmarks/bench_time_to_quality.py`` measure the
demo recipe's held-out PSNR too; for time to quality use ``bench_time_to_quality.py``.

Run: .venv/bin/python benchmarks/studies/bench_demo_defaults.py 1500:8:64:2e-3 700:16:64:2e-3 [--parallel 2]
(each setting is STEPS:BATCH:CROP:LR; the demo's other arguments as in ``trainer.demo``)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common and its kin
from common import ROOT  # noqa: E402


def one(setting: str, data_dir: str) -> dict:
    """Train and evaluate one setting (in this process); returns its figures."""
    import numpy as np
    import torch

    from trainer.core.config import TrainConfig
    from trainer.demo import extract
    from trainer.core.envvars import DistEnv
    from trainer.data.images import read_image
    from trainer.data.sequences import find_sequence
    from trainer.export.infer import psnr
    from trainer.learn.train import train
    from trainer.core.allocator import tune_allocator

    tune_allocator()
    torch.set_num_threads(1)
    steps, batch, crop, lr = setting.split(":")
    d = extract(Path(data_dir))
    with tempfile.TemporaryDirectory() as run:
        cfg = TrainConfig(str(d.train_input), str(d.train_target), run, steps=int(steps), batch_size=int(batch),
                          crop_size=int(crop), lr=float(lr), checkpoint_interval=10 ** 6,
                          contact_sheet_interval=10 ** 6, log_interval=100)
        cpu = time.process_time()
        net = train(cfg, DistEnv(distributed=False, missing=("COPYCAT_MAIN_ADDR",))).model.eval()
        cpu = time.process_time() - cpu
    inputs, targets = find_sequence(d.holdout_input), find_sequence(d.holdout_target)
    rows = []
    with torch.no_grad():
        for n in sorted(targets):
            a, b = read_image(inputs[n]), read_image(targets[n])
            y = net(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).permute(2, 0, 1)[None])
            rows.append((psnr(a, b), psnr(y[0].permute(1, 2, 0).numpy(), b)))
    gain = float(np.mean([after - before for before, after in rows]))
    return {"setting": setting, "gain_db": round(gain, 3), "cpu_s": round(cpu, 1),
            "megapixels": round(int(steps) * int(batch) * int(crop) ** 2 / 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("settings", nargs="*")
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one setting in a child process
    ap.add_argument("--data", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one, a.data)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        from trainer.demo import extract

        extract(Path(tmp) / "data")

        def child(setting: str) -> dict:  # a fresh process per setting (allocator state: docs/studies/trainer_speed.md)
            out = subprocess.run([sys.executable, __file__, "--one", setting, "--data", str(Path(tmp) / "data")],
                                 cwd=ROOT, check=True, capture_output=True, text=True).stdout
            print(f"  {out.strip()}", flush=True)
            return json.loads(out.strip().splitlines()[-1])

        with ThreadPoolExecutor(a.parallel) as pool:
            results = list(pool.map(child, a.settings))
    print(f"\n{'steps:batch:crop:lr':<22} {'gain dB':>8} {'Mpixels':>8} {'CPU s':>7}")
    for r in results:
        print(f"{r['setting']:<22} {r['gain_db']:>+8.3f} {r['megapixels']:>8.1f} {r['cpu_s']:>7.1f}")


if __name__ == "__main__":
    main()

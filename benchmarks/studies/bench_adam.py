"""Adam's update, ``fused=True`` (the trainer's since stop 33) against torch's default (foreach), per training step.

One training step of the default network (v3 small, batch 8, crop 64, channels_last, the precision ``auto``
picks, one or more threads) with each optimizer, alternated (A B A B ...) so a noisy neighbour hits both alike.
Prints the median milliseconds of the optimizer's ``step()`` + ``zero_grad()`` and of the whole step, and the
ratio of the whole steps (fused / foreach): below 1 is faster. Both implement the same update (torch's
``_fused_adam`` and ``_multi_tensor_adam``; Kingma & Ba 2015), to float rounding.

Run: .venv/bin/python benchmarks/studies/bench_adam.py [--steps 200] [--threads 2] [--architecture v3] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: common and its kin
import common  # noqa: E402,F401  (puts the checkout on sys.path)
import torch  # noqa: E402

from trainer.learn.model import build_model  # noqa: E402
from trainer.learn.precision import resolve_precision  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200, help="timed steps per optimizer [steps]")
    ap.add_argument("--warmup", type=int, default=20, help="untimed steps per optimizer first [steps]")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--architecture", default="v3")
    ap.add_argument("--size", default="small")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    prec = resolve_precision("auto", device)
    x = torch.rand(8, 3, 64, 64, device=device).to(memory_format=torch.channels_last)
    y = torch.rand(8, 3, 64, 64, device=device)
    runs = {}
    for fused in (False, True):
        torch.manual_seed(0)
        net = build_model(a.size, a.architecture).to(device, memory_format=torch.channels_last)
        runs["fused" if fused else "foreach"] = (net, torch.optim.Adam(net.parameters(), lr=1e-3, fused=fused))
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in runs}
    for i in range(a.warmup + a.steps):
        for name, (net, opt) in runs.items():
            _sync(device)
            t0 = time.perf_counter()
            with prec.autocast():
                out = net(x)
            (out.float() - y).abs().mean().backward()
            _sync(device)
            t1 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=True)
            _sync(device)
            t2 = time.perf_counter()
            if i >= a.warmup:
                times[name][0].append((t2 - t1) * 1e3)
                times[name][1].append((t2 - t0) * 1e3)
    print(f"{a.architecture} {a.size}, batch 8, crop 64, {prec.name}, {a.threads} threads, {a.device}, "
          f"{a.steps} steps each (medians)")
    for name, (opt_ms, step_ms) in times.items():
        print(f"  {name:8s} optimizer {statistics.median(opt_ms):6.2f} ms   "
              f"whole step {statistics.median(step_ms):7.2f} ms")
    ratio = statistics.median(times["fused"][1]) / statistics.median(times["foreach"][1])
    print(f"  whole step, fused / foreach: {ratio:.3f}")


if __name__ == "__main__":
    main()

"""pad_to_multiple (slice copies into one tensor, no aten::pad) vs. 69d6e89's F.pad(mode="replicate"), side by side.

Times the padding alone and the whole TorchScript model.pt forward (what hosts run) on frames that need
padding, fp32 on CPU, runs interleaved (A B A B ...), and prints medians, the ratio new/old and the largest
absolute difference of the outputs (issue 21: within 1e-6, no slower).

    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/studies/bench_pad.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import trainer.learn.model as model_module  # noqa: E402
from trainer.core.config import DEFAULT_ARCHITECTURE  # noqa: E402


def old_pad(x: torch.Tensor, multiple: int) -> torch.Tensor:
    """69d6e89's pad_to_multiple."""
    h, w = x.shape[-2], x.shape[-1]
    ph = (multiple - h % multiple) % multiple
    pw = (multiple - w % multiple) % multiple
    if ph + pw == 0:
        return x
    return F.pad(x, [0, pw, 0, ph], mode="replicate")


def scripted(size: str, pad) -> torch.jit.ScriptModule:
    """model.pt of a ``size`` model whose forward pads with ``pad`` (the same weights for both)."""
    saved = model_module.pad_to_multiple
    model_module.pad_to_multiple = pad
    try:
        torch.manual_seed(0)
        net = model_module.build_model(size, DEFAULT_ARCHITECTURE).eval()
        for p in net.tail.parameters():  # non-zero tail so the output depends on the whole network
            torch.nn.init.normal_(p, std=0.01)
        return torch.jit.script(copy.deepcopy(net))
    finally:
        model_module.pad_to_multiple = saved


def time_once(fn, x, times: list[float]) -> None:
    """Append the seconds one no-grad call of ``fn(x)`` takes to ``times``."""
    with torch.no_grad():
        t = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(2)
    print(f"torch {torch.__version__}, fp32, CPU, {args.repeats} interleaved repeats, medians")
    cases = [("pad only 1x3x1080x1917 to /16", (1, 3, 1080, 1917), None),
             ("model.pt small 1x3x541x963", (1, 3, 541, 963), "small"),
             ("model.pt medium 1x3x270x483", (1, 3, 270, 483), "medium")]
    for label, shape, size in cases:
        x = torch.rand(*shape)
        if size is None:
            old_fn, new_fn = (lambda t: old_pad(t, 16)), (lambda t: model_module.pad_to_multiple(t, 16))
        else:
            old_fn, new_fn = scripted(size, old_pad), scripted(size, model_module.pad_to_multiple)
        with torch.no_grad():
            diff = (old_fn(x) - new_fn(x)).abs().max().item()
            old_fn(x), new_fn(x)  # warm up (TorchScript profiling runs)
        t_old: list[float] = []
        t_new: list[float] = []
        for _ in range(args.repeats):
            time_once(old_fn, x, t_old)
            time_once(new_fn, x, t_new)
        mo, mn = statistics.median(t_old) * 1e3, statistics.median(t_new) * 1e3
        print(f"{label:34s} old F.pad {mo:8.2f} ms  new     {mn:8.2f} ms  new/old {mn / mo:5.3f}  max|diff| {diff:.1e}")


if __name__ == "__main__":
    main()

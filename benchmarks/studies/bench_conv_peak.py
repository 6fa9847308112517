"""How close the plain fp32 loop's convolutions already run to the CPU's peak: the ceiling on "cuetrain / plain loop".

Issue 50 asks cuetrain at its defaults for 1.15x the plain fp32 loop's images/s on a CPU without fast bf16. There
the only arithmetic is float32, so the ceiling is set by how far below the core's float32 peak the plain loop runs.
For each convolution of the network (``--architecture auto``'s for colour, ``--model-size small``) at its shape in a
training step (``--batch`` crops of ``--crop`` px), this times forward + backward (weight and input gradients; the
first layer's input needs none) on one thread, oneDNN in NCHW (the plain loop) and in channels_last (cuetrain's
default), and converts to GFLOP/s: 2 FLOP per multiply-add, forward 1x and backward 2x the forward's
multiply-adds (Hout x Wout x Cout x Cin x k x k per crop). The "practical peak" is the best of a few large
convolutions (Cin = Cout = 256, 3x3, 32x32) under the same kernel limits: no layer of a real network does better.
Also printed: the convolutions' GFLOP a step, the ms they would take at the practical peak, the images/s over the plain
loop a step would reach with every convolution at that peak (the ceiling for float32 arithmetic), and the share of a
whole training step (Adam, L1) the convolutions take in each memory format. Every
figure is CPU time of this one-thread process, so a busy host does not inflate it.

Run as an AVX2-only CPU would (torch's and oneDNN's kernels limited; bench_trainer.py's ``--cpu avx2``):
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 .venv/bin/python benchmarks/studies/bench_conv_peak.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402,F401  (puts the checkout on sys.path)

from lib.bare_ddp import ARCHITECTURE  # noqa: E402  (the bare loops' network: --architecture auto's for colour)
from trainer.learn.model import build_model  # noqa: E402

FORMATS = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}


def median_ms(fn, repeats: int) -> float:
    """Median CPU ms of this process (``time.process_time``) for ``fn()`` over ``repeats`` calls after 2 warm-up
    calls. With one thread, CPU time is the work done: other processes on a shared host do not add to it."""
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return 1000 * statistics.median(times)


def conv_shapes(net: torch.nn.Module, batch: int, crop: int) -> list[tuple[str, torch.nn.Conv2d, tuple[int, ...]]]:
    """(name, layer, input shape (B, C, H, W)) of every convolution in one forward pass."""
    found = []
    hooks = [m.register_forward_hook(lambda m, i, o, n=n: found.append((n, m, tuple(i[0].shape))))
             for n, m in net.named_modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        net(torch.rand(batch, 3, crop, crop))
    for h in hooks:
        h.remove()
    return found


def conv_gflops(layer: torch.nn.Conv2d, shape: tuple[int, ...], fmt: torch.memory_format, input_grad: bool,
                repeats: int) -> tuple[float, float]:
    """(ms, GFLOP/s) of forward + backward of a fresh copy of ``layer`` on an input of ``shape``."""
    conv = torch.nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel_size, layer.stride,
                           layer.padding).to(memory_format=fmt)
    x = torch.rand(shape).contiguous(memory_format=fmt).requires_grad_(input_grad)
    y = conv(x)
    macs = y.numel() * layer.in_channels * layer.kernel_size[0] * layer.kernel_size[1]
    ms = median_ms(lambda: conv(x).sum().backward(), repeats)
    return ms, 2 * macs * (3 if input_grad else 2) / (ms / 1000) / 1e9


def step_ms(fmt: torch.memory_format, batch: int, crop: int, repeats: int) -> float:
    """Median ms of one plain training step (Adam 1e-3, L1, float32) in memory format ``fmt``."""
    torch.manual_seed(0)
    net = build_model("small", ARCHITECTURE).to(memory_format=fmt)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.rand(batch, 3, crop, crop).contiguous(memory_format=fmt)
    y = torch.rand(batch, 3, crop, crop)

    def one() -> None:
        (net(x) - y).abs().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return median_ms(one, repeats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=8, help="crops per step (default 8)")
    ap.add_argument("--crop", type=int, default=64, help="crop side [pixels] (default 64)")
    ap.add_argument("--repeats", type=int, default=15, help="timed calls per figure (default 15)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"torch kernels {torch.backends.cpu.get_cpu_capability()}, 1 thread, batch {a.batch}, crop {a.crop}")
    peak = max(conv_gflops(torch.nn.Conv2d(256, 256, 3, padding=1), (b, 256, 32, 32), torch.channels_last, True,
                           5)[1] for b in (4, 8))
    print(f"practical peak (256->256 3x3 at 32x32, channels_last): {peak:.1f} GFLOP/s")
    net = build_model("small", ARCHITECTURE)
    totals = {k: 0.0 for k in FORMATS}
    gflop = 0.0  # per training step, all convolutions
    for i, (name, layer, shape) in enumerate(conv_shapes(net, a.batch, a.crop)):
        row = {k: conv_gflops(layer, shape, f, i > 0, a.repeats) for k, f in FORMATS.items()}
        for k, (ms, _) in row.items():
            totals[k] += ms
        gflop += row["nchw"][0] * row["nchw"][1] / 1000
        print(f"  {name:<22} {layer.in_channels:>3}->{layer.out_channels:<3} k{layer.kernel_size[0]} "
              + "  ".join(f"{k} {ms:5.2f} ms {g:5.1f} GFLOP/s ({g / peak:4.0%})" for k, (ms, g) in row.items()))
    steps = {k: step_ms(f, a.batch, a.crop, a.repeats) for k, f in FORMATS.items()}
    for k in FORMATS:
        print(f"{k}: convolutions {totals[k]:.1f} ms of a {steps[k]:.1f} ms step ({totals[k] / steps[k]:.0%})")
    floor = gflop / peak * 1000
    rest = max(0.0, steps["channels_last"] - totals["channels_last"])
    ceiling, cl = steps["nchw"] / (floor + rest), steps["nchw"] / steps["channels_last"]
    print(f"{gflop:.2f} GFLOP of convolution a step: {floor:.1f} ms at the practical peak. A step with every "
          f"convolution there and the rest as channels_last's ({rest:.1f} ms) would train at {ceiling:.2f}x the plain "
          f"NCHW loop's images/s; channels_last trains at {cl:.2f}x")


if __name__ == "__main__":
    main()

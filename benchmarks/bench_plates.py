"""Production plates (issue: 4K EXR shots of any length): memory, speed and bytes read, before -> after.

"Before" is the trainer at ``--before`` (default 69d6e89, the commit before the host copy), extracted with
``git archive`` and run with the same interpreter, side by side with this checkout ("after").

(a) Crop sources: one 64 px crop of a 4K plate through OpenImageIO's ImageCache on the file server's ZIP
    EXRs (scanline and tiled), through ImageCache on an uncompressed tiled EXR on local disk, from the
    host copy (``trainer.data.hostcache``: pread, and tiles kept in memory), and by today's in-memory gather:
    median microseconds per crop, RSS growth and bytes read (``/proc/self/io`` rchar). One process each.
(b) Peak RSS per rank and of the process tree (``/proc/PID/stat`` rss, RQD's measure, polled every 0.2 s),
    ``cuetrain local --world-size 2 --steps 10``: 30 2K pairs, 24 / 100 / 200 4K pairs; before where it
    fits in this machine's memory. Bytes read by the host: the ranks' whole-process ``rchar`` (polled; it
    includes imports and, after, the reads of the host copy on local scratch) and, after, what ``run.json``
    ``data.hosts`` recorded for the decode (``/proc/self/io`` rchar around it), as multiples of the shot.
(c) Throughput on the 30-pair 2K set, 2 ranks, before vs after, interleaved: images/s (median), ratio.
(d) Time to the first training step on the 30-pair 2K set, 2 ranks, interleaved: before; after with a cold
    host copy (a fresh CUETRAIN_SCRATCH: the ranks decode the shot); after with the host copy in place (a
    restart on the same host).

Plates (kept outside the repository; ``make`` writes them, about 9 GiB): 30 2K pairs, 100 4K pairs (scanline
ZIP), 24 4K pairs (64 px tiled ZIP), and 24- and 200-pair shots of links to the 100 (``benchmarks/lib/plates.py``).

Run: .venv/bin/python benchmarks/bench_plates.py make --plates /work/plates
     .venv/bin/python benchmarks/bench_plates.py run --plates /work/plates [--sections abcd] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from common import ROOT, images_per_s, read_rows
from lib import plates
from trainer.core.procstat import stat_rss_bytes

GiB = 2**30
SHOTS = {"2k_scan_30": "30 2K pairs", "4k_scan_24": "24 4K pairs", "4k_scan_100": "100 4K pairs",
         "4k_scan_200": "200 4K pairs"}
BEFORE_FITS = ("2k_scan_30", "4k_scan_24")  # before needs ~0.21 GiB per 4K pair per rank, twice while stacking


def make(root: Path) -> None:
    """Write the plates (see module doc) and print their size on disk."""
    plates.make_plates(root / "2k_scan_30", 30, plates.DCI2K)
    plates.make_plates(root / "4k_scan_100", 100)
    plates.make_plates(root / "4k_tiled_24", 24, tiled=True)
    plates.link_plates(root / "4k_scan_100", root / "4k_scan_24", 24)
    plates.link_plates(root / "4k_scan_100", root / "4k_scan_200", 200)
    for d in sorted(root.iterdir()):
        print(f"{d.name}: {plates.disk_bytes(d) / GiB:.2f} GiB on disk")


def shot_bytes(shot: Path) -> int:
    """Bytes of the shot's files (links followed)."""
    return sum(p.stat().st_size for p in shot.rglob("*.exr"))


# ----------------------------------------------------------------------------------------------
# Running cuetrain (before or after) and watching it


class Tree:
    """Polls a launcher's process tree every 0.2 s: peak RSS per rank and of the tree, last rchar per rank."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.rank_peak: dict[int, int] = {}
        self.tree_peak = 0
        self.rchar: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                kids = self.root.children(recursive=True)
            except psutil.Error:
                return
            total = stat_rss_bytes(self.root.pid)
            for p in kids:
                rss = stat_rss_bytes(p.pid)
                total += rss
                self.rank_peak[p.pid] = max(self.rank_peak.get(p.pid, 0), rss)
                try:
                    self.rchar[p.pid] = p.io_counters().read_chars
                except psutil.Error:
                    pass
            self.tree_peak = max(self.tree_peak, total)
            time.sleep(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def cuetrain(tree_root: Path | None, shot: Path, run_dir: Path, steps: int, *, world: int = 2, log_interval: int = 25,
             scratch: Path | None = None, extra: tuple[str, ...] = (), watch: bool = False,
             first_step: bool = False) -> dict:
    """Run ``cuetrain local`` from ``tree_root`` (None: this checkout). Returns seconds, optional tree figures and
    the time to the ``[Step:1/`` line."""
    code = tree_root or ROOT
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    if scratch is not None:
        env["CUETRAIN_SCRATCH"] = str(scratch)
    cmd = [sys.executable, "-u", "-m", "trainer.cli", "local", "--world-size", str(world), "--input",
           str(shot / "input"), "--target", str(shot / "target"), "--run-dir", str(run_dir), "--steps", str(steps),
           "--batch-size", "16", "--crop-size", "64", "--log-interval", str(log_interval), *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=code, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tree = Tree(proc.pid) if watch else None
    first, tail = None, []
    for line in proc.stdout:
        tail = (tail + [line])[-40:]
        if first is None and "[Step:1/" in line:
            first = time.perf_counter() - t0
    proc.wait()
    if tree:
        tree.stop()
    if proc.returncode:
        raise RuntimeError(f"cuetrain failed ({proc.returncode}): {''.join(tail)}")
    out = {"seconds": time.perf_counter() - t0, "first_step_s": first}
    if tree:
        ranks = sorted(tree.rank_peak.values(), reverse=True)[:world]
        out.update(rank_peak=ranks, tree_peak=tree.tree_peak, rchar=sum(tree.rchar.values()))
    return out


# ----------------------------------------------------------------------------------------------
# (a) crop sources


def _source_child(kind: str, files: list[str], cache_mb: int, crops: int, out: str) -> None:
    """One process timing ``crops`` random 64 px crops from ``kind`` (module doc (a))."""
    import numpy as np

    from trainer.core.procstat import io_counters
    rng = np.random.default_rng(0)
    c, (w, h) = 64, plates.UHD4K
    coords = [(int(rng.integers(len(files))), int(rng.integers(h - c + 1)), int(rng.integers(w - c + 1)))
              for _ in range(crops)]
    read = _reader(kind, files, cache_mb)
    read(*coords[0], c)  # opens files, builds caches
    rss0, io0 = stat_rss_bytes(os.getpid()), io_counters()["rchar"]
    times = []
    for i, y, x in coords:
        t = time.perf_counter()
        read(i, y, x, c)
        times.append(time.perf_counter() - t)
    Path(out).write_text(json.dumps({"us": statistics.median(times) * 1e6, "mean_us": statistics.fmean(times) * 1e6,
                                     "rss": stat_rss_bytes(os.getpid()) - rss0,
                                     "rchar": io_counters()["rchar"] - io0}))


def _reader(kind: str, files: list[str], cache_mb: int):
    import numpy as np
    if kind.startswith("imagecache"):
        import OpenImageIO as oiio
        ic = oiio.ImageCache(False)
        ic.attribute("max_memory_MB", float(cache_mb))
        ic.attribute("autotile", 64)
        return lambda i, y, x, c: ic.get_pixels(files[i], 0, 0, x, x + c, y, y + c, 0, 1, oiio.TypeHalf)
    if kind == "gather":
        import torch

        from trainer.data.sequences import FramePair, load_pairs
        frames = load_pairs([FramePair(0, Path(f), Path(f)) for f in files])
        stack = torch.from_numpy(np.stack([a for a, _ in frames]))
        ramp = torch.arange(64)
        return lambda i, y, x, c: stack[(torch.tensor([[[i]]]), (y + ramp)[None, :, None], (x + ramp)[None, None, :])]
    from trainer.data.colour import ColourSpec
    from trainer.data.hostcache import HostCache
    from trainer.data.shot import list_shot
    shot = list_shot(str(Path(files[0]).parent), str(Path(files[0]).parent))
    cache = HostCache(tempfile.mkdtemp(dir=os.environ.get("BENCH_SCRATCH")), shot, ColourSpec(), cache_mb)
    cache.build()
    cache.load_resident()
    return lambda i, y, x, c: cache.crop(i, y, x, c)


def sources(root: Path, crops: int) -> None:
    import multiprocessing as mp
    import OpenImageIO as oiio
    scan = [str(root / "4k_scan_100" / "input" / f"plate.{i:04d}.exr") for i in (1, 2, 3, 4)]
    tiled = [str(root / "4k_tiled_24" / "input" / f"plate.{i:04d}.exr") for i in (1, 2, 3, 4)]
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        raw, one = [], Path(tmp) / "one"
        one.mkdir()
        for i, f in enumerate(scan):  # uncompressed 64 px tiled copies on local disk
            buf = oiio.ImageBuf(f)
            spec = buf.spec().copy()
            spec.attribute("compression", "none")
            spec.tile_width = spec.tile_height = 64
            raw.append(str(Path(tmp) / f"raw.{i}.exr"))
            out = oiio.ImageOutput.create(raw[-1])
            out.open(raw[-1], spec)
            out.write_image(buf.get_pixels(oiio.TypeHalf))
            out.close()
            os.symlink(f, one / f"plate.{i + 1:04d}.exr")
        os.environ["BENCH_SCRATCH"] = tmp
        variants = [("imagecache", "server EXR, scanline ZIP", scan, 512),
                    ("imagecache", "server EXR, 64 px tiles, ZIP", tiled, 512),
                    ("imagecache", "local EXR, 64 px tiles, uncompressed", raw, 512),
                    ("hostcache", "host copy, pread (--data-cache-mb 0)", [str(p) for p in sorted(one.iterdir())], 0),
                    ("hostcache", "host copy, 4 frames resident (--data-cache-mb 512)", [str(p) for p in sorted(one.iterdir())],
                     512),
                    ("gather", "before: whole set in memory, torch gather", scan, 0)]
        print(f"(a) one 64 px crop of 4 {plates.UHD4K[0]}x{plates.UHD4K[1]} plates (RGB half), {crops} crops, "
              "median and mean; RSS growth and rchar over the timed crops")
        for kind, name, files, mb in variants:
            result = Path(tmp) / "result.json"
            p = mp.get_context("spawn").Process(target=_source_child, args=(kind, files, mb, crops, str(result)))
            p.start()
            p.join()
            r = json.loads(result.read_text())
            print(f"  {name:<48} {r['us']:>8.1f} {r['mean_us']:>8.1f} us/crop   RSS +{r['rss'] / 2**20:>6.0f} MiB   rchar "
                  f"{r['rchar'] / 2**20:>7.1f} MiB", flush=True)


# ----------------------------------------------------------------------------------------------
# (b, c, d)


def memory(root: Path, before: Path, shots: list[str]) -> None:
    print("(b) peak RSS, cuetrain local --world-size 2 --steps 10 (batch 16, crop 64); bytes read = rchar of the "
          "ranks / shot size")
    for name in shots:
        shot = root / name
        size = shot_bytes(shot)
        variants = [("before", before, ()), ("after", None, ())]
        if name == "4k_scan_24":  # the trainer process alone (trainer/core/rankmemory.py PROCESS_MB)
            variants.append(("after, --data-cache-mb 0", None, ("--data-cache-mb", "0")))
        for label, code, extra in variants:
            if label == "before" and name not in BEFORE_FITS:
                print(f"  {SHOTS[name]:<14} before: not run (needs ~{0.2 * _pairs(shot):.0f} GiB per rank: 0.1 GiB per 4K pair, twice while stacking)")
                continue
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                r = cuetrain(code, shot, Path(tmp) / "run", 10, log_interval=5, scratch=Path(tmp), watch=True,
                             extra=extra)
                data = json.loads((Path(tmp) / "run" / "run.json").read_text()).get("data", {})
            hosts = data.get("hosts", {})
            reads = (f"; run.json: host read {sum(h['rchar'] for h in hosts.values()) / size:.2f}x the shot while "
                     f"decoding it, decoded it {sum(h['shot_reads'] for h in hosts.values()):.2f}x" if hosts else "")
            print(f"  {SHOTS[name]:<14} {label:<6} per rank {' / '.join(f'{b / GiB:.2f}' for b in r['rank_peak'])} "
                  f"GiB, tree {r['tree_peak'] / GiB:.2f} GiB, {r['seconds']:.0f} s; ranks' rchar "
                  f"{r['rchar'] / size:.2f}x the shot ({size / GiB:.2f} GiB){reads}", flush=True)


def _pairs(shot: Path) -> int:
    return len(list((shot / "input").glob("*.exr")))


def speed(root: Path, before: Path, repeats: int, steps: int) -> None:
    shot = root / "2k_scan_30"
    ips: dict[str, list[float]] = {"before": [], "after": []}
    print(f"(c) throughput, 30 2K pairs, 2 ranks, batch 16, crop 64, {steps} steps, interleaved x{repeats}")
    for _ in range(repeats):
        for label, code in (("before", before), ("after", None)):
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                cuetrain(code, shot, Path(tmp) / "run", steps, scratch=Path(tmp))
                ips[label].append(images_per_s(read_rows(Path(tmp) / "run"), 16))
            print(f"  {label}: {ips[label][-1]:.1f} images/s", flush=True)
    b, a = statistics.median(ips["before"]), statistics.median(ips["after"])
    print(f"  median images/s: before {b:.1f}, after {a:.1f}; after / before = {a / b:.3f} (target >= 0.9)")


def first_step(root: Path, before: Path, repeats: int) -> None:
    shot = root / "2k_scan_30"
    t: dict[str, list[float]] = {"before": [], "after, cold host copy": [], "after, host copy in place": []}
    print(f"(d) time to the first step, 30 2K pairs, 2 ranks (launch -> '[Step:1/' line), interleaved x{repeats}")
    with tempfile.TemporaryDirectory(dir=root) as warm:
        cuetrain(None, shot, Path(warm) / "run0", 1, log_interval=1, scratch=Path(warm))  # fills the warm copy
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                for label, code, scratch in (("before", before, Path(tmp)), ("after, cold host copy", None, Path(tmp)),
                                             ("after, host copy in place", None, Path(warm))):
                    run = Path(tmp) / label.replace(" ", "_").replace(",", "")
                    t[label].append(cuetrain(code, shot, run, 2, log_interval=1, scratch=scratch)["first_step_s"])
                    print(f"  {label}: {t[label][-1]:.1f} s", flush=True)
    print("  median: " + ", ".join(f"{k} {statistics.median(v):.1f} s" for k, v in t.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("make", "run"))
    ap.add_argument("--plates", type=Path, required=True, help="folder of the plates (outside the repository)")
    ap.add_argument("--before", default="69d6e89", help="commit to compare with (default 69d6e89)")
    ap.add_argument("--sections", default="abcd", help="which of (a)-(d) to run (default abcd)")
    ap.add_argument("--shots", default=",".join(SHOTS), help=f"shots for (b) (default {','.join(SHOTS)})")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200, help="steps per throughput run (c)")
    ap.add_argument("--crops", type=int, default=2000, help="crops per source (a)")
    a = ap.parse_args()
    if a.command == "make":
        make(a.plates)
        return
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs); after = {ROOT}, before = "
          f"{a.before}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        before.mkdir()
        archive = subprocess.run(["git", "archive", a.before], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
        if "a" in a.sections:
            sources(a.plates, a.crops)
        if "b" in a.sections:
            memory(a.plates, before, a.shots.split(","))
        if "c" in a.sections:
            speed(a.plates, before, a.repeats, a.steps)
        if "d" in a.sections:
            first_step(a.plates, before, a.repeats)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

"""Shared fixtures: a small real-photo training set and helpers to run the CLI."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import faults

ROOT = Path(__file__).resolve().parents[1]
CPU_BF16_HOOK = ROOT / "tests" / "cpu_bf16"
# PYTHONPATH of every process the tests start: the repository, after the --cpu-bf16 hook (a sitecustomize that
# does nothing unless CUETRAIN_TEST_CPU_BF16 is set; tests/cpu_bf16/sitecustomize.py).
CHILD_PYTHONPATH = os.pathsep.join([str(CPU_BF16_HOOK), str(ROOT)])


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-bf16", choices=("host", "0", "1"), default="host",
                     help="what `--precision auto` sees on a CPU: host = this CPU's flags (default); 1 = fast bf16 "
                          "(auto trains in bf16); 0 = none (auto trains in fp32). Reaches every trainer the tests "
                          "start (tests/cpu_bf16/sitecustomize.py)")
    parser.addini("suite_workers", "pytest-xdist workers of a whole-suite run (`pytest` naming no tests: testpaths); "
                  "0 = in this process", default="2")


def pytest_report_header(config: pytest.Config) -> str:
    return f"--cpu-bf16 {config.getoption('--cpu-bf16')} (CUETRAIN_TEST_CPU_BF16={os.environ.get('CUETRAIN_TEST_CPU_BF16', '')!r})"


@pytest.fixture(autouse=True, scope="session")
def _cpu_bf16(request: pytest.FixtureRequest):
    """``--cpu-bf16 0|1``: force what ``trainer.learn.precision.cpu_has_fast_bf16`` answers, in this process and (through
    ``CUETRAIN_TEST_CPU_BF16`` and ``CHILD_PYTHONPATH``) in every process the tests start, so the suite shows it
    passes with ``--precision auto`` resolving either way without editing product code."""
    forced = request.config.getoption("--cpu-bf16")
    if forced == "host":
        yield
        return
    from tests.cpu_bf16 import sitecustomize as hook

    patch = pytest.MonkeyPatch()
    patch.setenv(hook.VARIABLE, forced)
    hook.install()  # this process; the processes the tests start import the hook from CHILD_PYTHONPATH
    yield
    patch.undo()


@pytest.hookimpl(trylast=True)  # after pytest's faulthandler plugin: a worker's dump goes to tests/faults.py's file
def pytest_configure(config: pytest.Config) -> None:
    """Faulthandler everywhere (issue 20: an unexplained segfault in a worker thread of the multihost fixture).

    pytest's own faulthandler plugin covers this process (every thread's traceback on SIGSEGV, SIGFPE,
    SIGABRT, SIGBUS, SIGILL); ``PYTHONFAULTHANDLER=1`` makes every Python child the suite starts (ranks,
    frames, RQD, the Cuebot double) do the same, so a crash anywhere leaves its stacks in that process's log.
    A pytest-xdist worker's dump is printed at the end of the run instead (tests/faults.py).
    """
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")
    if hasattr(config, "workerinput"):
        _one_thread_per_worker()
        faults.redirect_worker(config)
    elif config.pluginmanager.hasplugin("xdist") and config.option.numprocesses:
        faults.make_folder(config)


@pytest.hookimpl(trylast=True)  # after --durations: the last section before the short summary
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    faults.report(config, terminalreporter)


def pytest_collection_finish(session: pytest.Session) -> None:  # noqa: ARG001 - pytest hook signature
    """Freeze what collection made (every test module, torch, Qt, gRPC: ~200,000 objects) out of the cyclic GC, so
    that :func:`_garbage_dies_on_the_main_thread`'s collection after each test scans only what tests made."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _garbage_dies_on_the_main_thread(request: pytest.FixtureRequest):
    """After each test, its cyclic garbage dies here, on the main thread (tests/gui has its own fixture for this).

    Why: Python's cyclic GC otherwise frees it later, on whichever thread allocates at that moment: in a later
    test, a gloo worker running a DDP comm hook's callback, a gRPC thread or a trainer's heartbeat thread. Freed
    there, a gloo object aborts ("Resource deadlock avoided", seen once after an in-process run that raised:
    trainer/learn/train.py) and a Qt object segfaults (tests/gui/conftest.py). Stop 33's CI lost a worker in a test that
    only builds models on the meta device, after in-process training runs (what crashed was not printed:
    tests/faults.py now prints it). Collected here, a test's garbage cannot meet a later test's threads: only
    what a test makes while its own threads run can still be collected on one of them.
    """
    yield
    if not request.node.nodeid.startswith("tests/gui/"):
        gc.collect()


def _one_thread_per_worker() -> None:
    """An xdist worker's own torch computes on one thread, as the ranks the tests start do (``OMP_NUM_THREADS=1``):
    with `suite_workers` workers on as many cores, torch's default of one thread per core puts 2 threads on each
    core, and OpenMP threads waiting for each other spin, burning the other worker's CPU. (The environment is
    left alone: tests check what supervisors pass on of an inherited ``OMP_NUM_THREADS``.)"""
    import torch

    torch.set_num_threads(1)


# --- The suite on pytest-xdist workers (issue 20) -------------------------------------------------------------------
#
# `pytest` naming no tests (the README's and .ci/run's command: testpaths) runs on `suite_workers` xdist workers
# (pyproject.toml: 2) with `--dist loadgroup`; tests named on the command line run in this process, as do `-n 0`,
# `-p no:xdist` and a venv without pytest-xdist. `-n N` alone also gets `--dist loadgroup`. Not in addopts: `-n`
# there would make `-p no:xdist` (and a venv without xdist) a usage error.
#
# The groups come from XDIST_GROUPS by path, in the controller's scheduler, not from xdist_group marks:
# pytest-xdist 3.8 tags a worker's node ids with their mark's group by assigning ``item._nodeid``, which pytest 9.2's
# structured node ids ignore, so under pytest 9.2 `--dist loadgroup` on marks alone spreads a group over workers.

#: The xdist group of the tests under each path (first matching prefix). A group is one work unit: its tests run
#: one after another on one worker, in collection order. Tests in no group go one by one to whichever worker is free.
XDIST_GROUPS: tuple[tuple[str, str], ...] = (
    # One network-namespace bed at a time: every bed makes a bridge and a 10.77.N.0/24 (bed.py), and each test
    # file starts a 3-host farm (3 RQDs, 3-rank trainings on 2 cores).
    ("tests/multihost/", "netns"),
    # Its module-scoped `trained` run (training with the ONNX export) is made once, not once per worker.
    ("tests/trainer/export/test_export.py", "export"),
    # Its module-scoped pair of spawned DDP ranks serves both cases.
    ("tests/trainer/learn/test_noise_scale.py::test_ddp_", "noise-ddp"),
)


#: Test files whose tests start trainer processes, the costliest first (worker seconds per file in a profiled
#: suite, stop 28: multihost 153, e2e_recovery 207, elastic 76 in one test, ...). Under xdist the scheduler hands
#: tests out in collection order, a few queued per worker, so these go first and the run ends on short tests: in
#: collection order it ended with one worker running two 15 s tests while the other idled 37 s. Whole files move,
#: so a module's tests (and its module-scoped fixtures, e.g. a farm) stay together. Serial runs keep pytest's order.
HEAVY_FIRST: tuple[str, ...] = (
    "tests/multihost/", "tests/benchmarks/test_soak.py", "tests/cue_plugin/test_elastic.py",
    "tests/cue_plugin/test_e2e_recovery.py",
    "tests/trainer/learn/test_bf16.py", "tests/cue_plugin/test_shot_recovery.py", "tests/cue_plugin/test_e2e_memory.py",
    "tests/trainer/gang/test_formation.py", "tests/trainer/gang/test_stopvote.py", "tests/trainer/learn/test_train.py",
    "tests/cue_plugin/test_ranks_per_frame.py", "tests/cue_plugin/test_e2e_training.py",
    "tests/trainer/gang/test_regroup.py", "tests/trainer/record/test_trust.py", "tests/trainer/gang/test_compression.py",
    "tests/cue_plugin/test_frame.py", "tests/gui/test_cuegui_plugin.py", "tests/trainer/export/test_export.py",
    "tests/cue_plugin/test_infer_layer.py", "tests/trainer/learn/test_noise_scale.py", "tests/trainer/advise/test_advisor.py",
    "tests/trainer/gang/test_phase_guard.py", "tests/trainer/data/test_shot_loading.py", "tests/trainer/learn/test_train_reference.py",
)


def heavy_first_key(nodeid: str) -> int:
    """Sort key of a test under xdist: the index of its file in HEAVY_FIRST, after them all when not listed."""
    return next((i for i, prefix in enumerate(HEAVY_FIRST) if nodeid.startswith(prefix)), len(HEAVY_FIRST))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker, the HEAVY_FIRST files first (a stable sort: the same order on every worker)."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: heavy_first_key(item.nodeid))


def xdist_group_of(nodeid: str) -> str | None:
    """The XDIST_GROUPS group of a test's node id, None when it is in none."""
    return next((group for prefix, group in XDIST_GROUPS if nodeid.startswith(prefix)), None)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The controller: xdist on for a whole-suite run; `--dist loadgroup` (unless another --dist is asked for)
    scheduled by :class:`GroupScheduling`."""
    if not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput"):
        return
    option = config.option
    if (option.numprocesses is None and config.args_source == pytest.Config.ArgsSource.TESTPATHS
            and not option.collectonly and not option.usepdb):
        workers = int(config.getini("suite_workers"))
        if workers > 0:
            option.numprocesses = workers
            option.tx = ["popen"] * workers
    if option.numprocesses and option.dist == "no" and not option.distload:
        option.dist = "loadgroup"
    if option.dist == "loadgroup":
        config.pluginmanager.register(_GroupSchedulerPlugin(), "cuetrain-xdist-groups")
        if option.maxworkerrestart is None:
            # A worker that crashes (faulthandler prints why) fails its test and ends the run. With xdist's
            # default of replacing it, this group scheduling left the session waiting forever (a 13-test
            # repro hung; tests/test_suite_order.py), which on CI would be the whole 90 minutes.
            option.maxworkerrestart = 0


class _GroupSchedulerPlugin:
    """Registered only with xdist loaded: ``pytest_xdist_make_scheduler`` is xdist's hook, unknown without it."""

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log):
        from xdist.scheduler import LoadGroupScheduling

        class GroupScheduling(LoadGroupScheduling):
            """``--dist loadgroup`` whose groups are XDIST_GROUPS' (and any xdist_group mark xdist does tag)."""

            def _split_scope(self, nodeid: str) -> str:
                return xdist_group_of(nodeid) or super()._split_scope(nodeid)

        return GroupScheduling(config, log)


def astronaut_crops(frames: int, height: int, width: int) -> list[np.ndarray]:
    """``frames`` (height, width, 3) float32 crops of skimage's astronaut photo resized to twice that size, each
    5 px lower and 7 px further right than the one before (real image content that moves)."""
    from skimage import data, transform

    photo = transform.resize(data.astronaut(), (height * 2, width * 2), anti_aliasing=True).astype(np.float32)
    return [photo[i * 5:i * 5 + height, i * 7:i * 7 + width] for i in range(frames)]


def shot_folders(folder: Path) -> tuple[Path, Path]:
    """``folder/input`` and ``folder/target``, created."""
    inp, tgt = folder / "input", folder / "target"
    inp.mkdir(parents=True, exist_ok=True)
    tgt.mkdir(parents=True, exist_ok=True)
    return inp, tgt


def make_pairs(folder: Path, frames: int = 4, height: int = 40, width: int = 48, ext: str = "png") -> tuple[Path, Path]:
    """Write Input/Ground Truth sequences cut from skimage's astronaut photo (real image content).

    Ground truth: the photo; input: the photo with fixed Gaussian noise (sigma 0.05). Returns (input, target).
    """
    from trainer.data.images import write_image

    rng = np.random.default_rng(7)
    inp, tgt = shot_folders(folder)
    for i, clean in enumerate(astronaut_crops(frames, height, width)):
        noisy = np.clip(clean + rng.normal(0, 0.05, clean.shape), 0, 1).astype(np.float32)
        write_image(tgt / f"plate.{1001 + i:04d}.{ext}", clean)
        write_image(inp / f"plate.{1001 + i:04d}.{ext}", noisy)
    return inp, tgt


@pytest.fixture(autouse=True)
def _skip_onnx_export(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Training runs in tests write model.pt only (CUETRAIN_EXPORT_ONNX=0): an ONNX export costs 5-15 s
    on 2 cores. Tests marked ``onnx`` (tests/trainer/export/test_export.py) keep it and check model.onnx."""
    if "onnx" not in request.keywords:
        monkeypatch.setenv("CUETRAIN_EXPORT_ONNX", "0")


@pytest.fixture(autouse=True)
def _private_scratch(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Host copies of training shots (trainer.data.hostcache) go under this session's temporary folder, not /tmp."""
    monkeypatch.setenv("CUETRAIN_SCRATCH", str(tmp_path_factory.getbasetemp() / "scratch"))


def make_upres_pairs(folder: Path, scale: int = 2, frames: int = 4, height: int = 20, width: int = 24,
                     ext: str = "png") -> tuple[Path, Path]:
    """Write an upres shot cut from skimage's astronaut photo: Ground Truth frames of (scale*height, scale*width)
    and Input frames of (height, width), each the Ground Truth's scale x scale box mean. Returns (input, target)."""
    from trainer.data.images import write_image

    inp, tgt = shot_folders(folder)
    for i, clean in enumerate(astronaut_crops(frames, height * scale, width * scale)):
        small = clean.reshape(height, scale, width, scale, 3).mean(axis=(1, 3))
        write_image(tgt / f"plate.{1001 + i:04d}.{ext}", clean)
        write_image(inp / f"plate.{1001 + i:04d}.{ext}", small)
    return inp, tgt


def make_matte_pairs(folder: Path, frames: int = 4, height: int = 40, width: int = 48) -> tuple[Path, Path]:
    """Write a matte shot cut from skimage's astronaut photo: RGB PNG Inputs and RGBA PNG Ground Truths whose alpha
    is a matte of the Input (1 where its luminance is above the frame's median, softened by a 1 px box blur) and
    whose R, G, B hold the opposite (1 - alpha), so training on any channel but A learns the wrong matte.
    Returns (input, target)."""
    from PIL import Image

    from trainer.data.images import write_image

    inp, tgt = shot_folders(folder)
    for i, rgb in enumerate(astronaut_crops(frames, height, width)):
        luma = rgb @ np.array([0.2126, 0.7152, 0.0722], np.float32)
        hard = (luma > np.median(luma)).astype(np.float32)
        pad = np.pad(hard, 1, mode="edge")
        alpha = sum(pad[dy:dy + height, dx:dx + width] for dy in range(3) for dx in range(3)) / 9.0
        rgba = np.concatenate([np.repeat(1.0 - alpha[..., None], 3, axis=2), alpha[..., None]], axis=2)
        write_image(inp / f"plate.{1001 + i:04d}.png", rgb)
        Image.fromarray(np.round(rgba * 255).astype(np.uint8), mode="RGBA").save(tgt / f"plate.{1001 + i:04d}.png")
    return inp, tgt


@pytest.fixture
def pairs(tmp_path: Path) -> tuple[Path, Path]:
    """(input_dir, target_dir) with 4 PNG frames of 48x40 pixels."""
    return make_pairs(tmp_path / "data")


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``python -m trainer.cli ARGS`` in a subprocess (one thread, clean COPYCAT env)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("COPYCAT_", "MASTER_", "RANK", "WORLD_SIZE"))}
    full.update(OMP_NUM_THREADS="1", PYTHONPATH=CHILD_PYTHONPATH)
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "trainer.cli", *args], env=full, cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout)

"""Shared fixtures: a small real-photo training set and helpers to run the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config: pytest.Config) -> None:
    """Faulthandler everywhere (issue 20: an unexplained segfault in a worker thread of the multihost fixture).

    pytest's own faulthandler plugin covers this process (every thread's traceback on SIGSEGV, SIGFPE,
    SIGABRT, SIGBUS, SIGILL); ``PYTHONFAULTHANDLER=1`` makes every Python child the suite starts (ranks,
    frames, RQD, the Cuebot double) do the same, so a crash anywhere leaves its stacks in that process's log.
    """
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")


def make_pairs(folder: Path, frames: int = 4, height: int = 40, width: int = 48, ext: str = "png") -> tuple[Path, Path]:
    """Write Input/Ground Truth sequences cut from skimage's astronaut photo (real image content).

    Ground truth: the photo; input: the photo with fixed Gaussian noise (sigma 0.05). Returns (input, target).
    """
    from skimage import data, transform

    from trainer.images import write_image

    photo = transform.resize(data.astronaut(), (height * 2, width * 2), anti_aliasing=True).astype(np.float32)
    rng = np.random.default_rng(7)
    inp, tgt = folder / "input", folder / "target"
    inp.mkdir(parents=True, exist_ok=True)
    tgt.mkdir(parents=True, exist_ok=True)
    for i in range(frames):
        clean = photo[i * 5:i * 5 + height, i * 7:i * 7 + width]
        noisy = np.clip(clean + rng.normal(0, 0.05, clean.shape), 0, 1).astype(np.float32)
        write_image(tgt / f"plate.{1001 + i:04d}.{ext}", clean)
        write_image(inp / f"plate.{1001 + i:04d}.{ext}", noisy)
    return inp, tgt


@pytest.fixture(autouse=True)
def _skip_onnx_export(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Training runs in tests write model.pt only (CUETRAIN_EXPORT_ONNX=0): an ONNX export costs 5-15 s
    on 2 cores. Tests marked ``onnx`` (tests/trainer/test_export.py) keep it and check model.onnx."""
    if "onnx" not in request.keywords:
        monkeypatch.setenv("CUETRAIN_EXPORT_ONNX", "0")


@pytest.fixture
def pairs(tmp_path: Path) -> tuple[Path, Path]:
    """(input_dir, target_dir) with 4 PNG frames of 48x40 pixels."""
    return make_pairs(tmp_path / "data")


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``python -m trainer.cli ARGS`` in a subprocess (one thread, clean COPYCAT env)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("COPYCAT_", "MASTER_", "RANK", "WORLD_SIZE"))}
    full.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "trainer.cli", *args], env=full, cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout)

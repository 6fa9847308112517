"""The ``cuetrain train`` arguments and the TOML file form of :class:`trainer.core.config.TrainConfig`.

Owns the argparse group every command shares (train, local, submit, advise, a farm frame), reading
``--config FILE.toml`` and building the frozen config from both. No torch here.
"""

from __future__ import annotations

import argparse
import dataclasses
try:
    import tomllib
except ImportError:  # Python 3.10 (Nuke 15's interpreter)
    import tomli as tomllib  # type: ignore[no-redef]
from dataclasses import fields
from pathlib import Path
from typing import Any

from trainer.core.config import (ARCHITECTURES, AUGMENT_GRADES, DEFAULT_ARCHITECTURE, DEFAULT_DATA_CACHE_MB,
                                 GRAD_COMPRESSION, INIT_EMAS, LR_SCALINGS, LR_SCHEDULES, MATTE_LOSSES, MEMORY_FORMATS,
                                 MODEL_SIZES, OPTIMIZERS, PATH_FIELDS, PRECISIONS, SCALES, ConfigError, TrainConfig)
from trainer.core.recipe import (DEFAULT_LR, DEFAULT_LR_FLOOR, DEFAULT_MUON_LR, HEAD_START_ENCODER_LR, HEAD_START_FOCUS,
                                  HEAD_START_FOCUS_EVERY, HEAD_START_MUON_LR, MUON_LR_FLOOR)

#: ``--steps`` of a ``--time-budget`` run that gives none [steps]: high enough that the budget ends it.
BUDGET_STEP_CAP = 10_000_000


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``cuetrain train`` arguments to ``parser`` (shared by train, local, submit, advise).

    The three paths are optional here because ``--config`` may supply them; ``config_from_args``
    requires them.
    """
    d = {f.name: f.default for f in fields(TrainConfig) if f.default is not dataclasses.MISSING}
    g = parser.add_argument_group("training")
    g.add_argument("--input", dest="input_dir", help="Input image sequence folder")
    g.add_argument("--target", dest="target_dir", help="Ground Truth image sequence folder")
    g.add_argument("--run-dir", dest="run_dir", help="run directory (shared storage for farm runs)")
    g.add_argument("--config", help="TOML file with TrainConfig fields (CLI flags override it)")
    g.add_argument("--steps", type=int, help=f"training steps (default {d['steps']})")
    g.add_argument("--batch-size", type=int, help=f"global batch in crops (default {d['batch_size']})")
    g.add_argument("--crop-size", type=int, help=f"crop side in pixels (default {d['crop_size']})")
    g.add_argument("--model-size", choices=MODEL_SIZES, help=f"model size (default {d['model_size']})")
    g.add_argument("--architecture", choices=ARCHITECTURES,
                   help=f"network (default {DEFAULT_ARCHITECTURE}: v3 for colour, upres and colour+alpha, unet when "
                        "every target is a matte): v3 (added skips, sub-pixel upsampling), v1 (the first one) or unet "
                        "(a plain U-Net trunk); see trainer.learn.model")
    g.add_argument("--lr", type=float, help="learning rate at --lr-reference-batch (default by --model-size, Adam: "
                   + ", ".join(f"{k} {v:g}" for k, v in DEFAULT_LR.items()) + "; Muon: "
                   + ", ".join(f"{k} {v:g}" for k, v in DEFAULT_MUON_LR.items())
                   + "; a colour head start (--init-from) with Muon: "
                   + ", ".join(f"{k} {v:g}" for k, v in HEAD_START_MUON_LR.items()) + ")")
    g.add_argument("--lr-reference-batch", type=int, help="batch the --lr is tuned for (default 8)")
    g.add_argument("--lr-scaling", choices=LR_SCALINGS,
                   help="LR scaling with the effective batch: sqrt (default, for Adam), linear or none")
    g.add_argument("--warmup-steps", type=int, help=f"LR warmup in updates (default {d['warmup_steps']})")
    g.add_argument("--lr-schedule", choices=LR_SCHEDULES,
                   help="cosine (default: warmup, then cosine to --lr-floor) or onecycle (30%% rise from lr/25, "
                        "cosine to lr/1e4)")
    g.add_argument("--lr-floor", type=float, metavar="FRACTION",
                   help=f"where cosine ends, as a fraction of the peak lr (default {DEFAULT_LR_FLOOR:g}; with Muon: "
                        + "; ".join(f"{job} " + ", ".join(f"{size} {v:g}" for size, v in by_size.items())
                                    for job, by_size in MUON_LR_FLOOR.items()) + ")")
    g.add_argument("--ema-decay", type=float,
                   help="export an exponential moving average of the weights with this decay per update "
                        f"(default {d['ema_decay']}; its warm-up (1 + n) / (20 + n) stays below it for the first "
                        "~19,000 updates, so decays from 0.995 up give the same model in runs under ~3,800 updates; "
                        "0: the last weights)")
    g.add_argument("--optimizer", choices=OPTIMIZERS,
                   help="auto (default: muon for every task), adam, or muon: Muon for the hidden convolutions, "
                        "Adam for the rest")
    g.add_argument("--adam-beta1", type=float,
                   help=f"decay of Adam's gradient average (default {d['adam_beta1']}; 0.8 measured better with "
                        "Adam, --adam-beta2 0.9 and --lr 2e-3)")
    g.add_argument("--adam-beta2", type=float,
                   help=f"decay of Adam's squared-gradient average (default {d['adam_beta2']}; the demo uses "
                        "0.9, NAFNet's, with --lr 2e-3)")
    g.add_argument("--noise-interval", type=int,
                   help="one rank at --sync-interval 1: measure the gradient noise scale every N updates "
                        f"(default {d['noise_interval']}; each costs a second forward/backward pass; "
                        "0: off, with any gang)")
    g.add_argument("--checkpoint-interval", type=int,
                   help=f"steps between checkpoints (default {d['checkpoint_interval']})")
    g.add_argument("--contact-sheet-interval", type=int,
                   help=f"steps between contact sheets (default {d['contact_sheet_interval']})")
    g.add_argument("--log-interval", type=int, help=f"steps between progress lines (default {d['log_interval']})")
    g.add_argument("--keep-checkpoints", type=int, help="checkpoints to keep (default 3)")
    g.add_argument("--seed", type=int, help="random seed (default 0)")
    g.add_argument("--resume", action="store_true", default=None, help="continue from the latest checkpoint")
    g.add_argument("--grad-compression", choices=GRAD_COMPRESSION, help="DDP gradient compression (default none)")
    g.add_argument("--collective-timeout-s", type=float, help="collective timeout in seconds (default 60)")
    g.add_argument("--gang-timeout-s", type=float, help="wait for all ranks at most this long (default 600 s)")
    g.add_argument("--colorspace", help="OCIO colour space of the frames, e.g. 'Linear Rec.709 (sRGB)' (default: none)")
    g.add_argument("--working-space", help="OCIO colour space to train in, e.g. ACEScct (default: none)")
    g.add_argument("--precision", choices=PRECISIONS,
                   help="forward-pass precision; auto = bf16 on Ampere+ GPUs and AVX512-BF16/AMX CPUs, fp16 on "
                        "older GPUs, else fp32 (default auto)")
    g.add_argument("--memory-format", choices=MEMORY_FORMATS, help="activation layout (default channels_last)")
    g.add_argument("--compile", action="store_true", default=None, help="torch.compile the model (opt-in)")
    g.add_argument("--data-cache-mb", type=int,
                   help="decoded frames each rank keeps in memory, in MiB; crops of the others are read from the "
                        f"host's decoded copy on local scratch (CUETRAIN_SCRATCH) (default {DEFAULT_DATA_CACHE_MB})")
    g.add_argument("--shot-check-s", type=float,
                   help="seconds between looks at the shot's files while training; a changed file restarts the "
                        "gang (default 30)")
    g.add_argument("--scale", type=int, choices=SCALES,
                   help="upres: the Ground Truth is 2 or 4 times the Input's width and height (default 1: same size)")
    g.add_argument("--init-from", metavar="PATH",
                   help="start from an earlier model's weights: a run directory, a checkpoint or a model.pt of the "
                        "same architecture, size and scale (default: random weights)")
    g.add_argument("--init-ema", choices=INIT_EMAS,
                   help="with --init-from: fresh (default: the weight average's warm-up restarts) or source (it "
                        "counts on from the source's step)")
    g.add_argument("--init-focus", type=float, metavar="SHARE",
                   help="with --init-from: the share of each batch's crops drawn where the source model's error on "
                        "this shot is largest (default: " + ", ".join(f"{k} {v:g}" for k, v in HEAD_START_FOCUS.items())
                        + " for colour repair with Muon; else 0, every crop uniform)")
    g.add_argument("--init-encoder-lr", type=float, metavar="FRACTION",
                   help="with --init-from: the v3 network's encoder trains at this fraction of the peak lr (default: "
                        + ", ".join(f"{k} {v:g}" for k, v in HEAD_START_ENCODER_LR.items())
                        + " for colour repair with Muon; else 1, every layer at the peak lr)")
    g.add_argument("--init-focus-every", type=int, metavar="STEPS",
                   help=f"with a crop focus: every STEPS steps the focus follows the trained network's own error, "
                        f"e.g. 250 for a shot like the source's (default {HEAD_START_FOCUS_EVERY}: the source model's "
                        "error all run)")
    g.add_argument("--input-channels", metavar="NAMES",
                   help="Input channels the network reads, as the files name them (default R,G,B; e.g. R,G,B,A)")
    g.add_argument("--target-channels", metavar="NAMES",
                   help="Ground Truth channels to learn (default R,G,B; A or matte.A: a matte; R,G,B,A: colour+alpha)")
    g.add_argument("--matte-loss", choices=MATTE_LOSSES, help="loss of matte channels (default bce+l1)")
    g.add_argument("--augment", type=float, metavar="P",
                   help="probability per crop of a random rotation, scale and flip of both sides (default 0: off)")
    g.add_argument("--augment-grade", choices=AUGMENT_GRADES,
                   help="with --augment, a random grade too: auto (matte tasks only, default), on or off")
    g.add_argument("--preview", metavar="PATH",
                   help="a frame or a folder of a few frames outside the data set, rendered at every contact sheet")
    g.add_argument("--time-budget", metavar="DURATION|DEADLINE",
                   help="train until this wall-clock budget ends: 90s, 30m, 2h, or an ISO deadline with UTC offset "
                        "(2026-11-27T18:00+01:00); the lr schedule runs over it, the export fits inside it, --steps "
                        "stays a cap (default: off)")
    g.add_argument("--stop-when-flat", type=float, metavar="DB",
                   help="stop once the held-out gain (every 10th frame, held out) improved by less than DB over "
                        "--flat-window steps (default 0: off; e.g. 0.05)")
    g.add_argument("--flat-window", type=int, metavar="STEPS",
                   help=f"steps --stop-when-flat compares over (default {d['flat_window']})")
    g.add_argument("--stop-grace-s", type=float,
                   help="after SIGTERM/SIGINT: checkpoint and exit within this many seconds (default 20)")
    g.add_argument("--storage-full-grace-s", type=float,
                   help="ride out a full run directory (no space left, quota exceeded) for this many seconds, "
                        "holding metrics and the checkpoint in memory, before failing the run (default "
                        f"{d['storage_full_grace_s']:g})")


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read TrainConfig fields from a TOML file (top level or a ``[train]`` table).

    Raises:
        ConfigError: unreadable file, bad TOML, or unknown keys (the valid ones are listed).
    """
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    data = data.get("train", data)
    valid = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(data) - valid)
    if unknown:
        raise ConfigError(f"{path}: unknown keys {unknown}; valid keys are {sorted(valid)}")
    return data


def config_from_args(ns: argparse.Namespace) -> TrainConfig:
    """Build a TrainConfig from parsed arguments (``--config`` file first, flags override).

    Raises:
        ConfigError: a required path is missing or a value is invalid.
    """
    values: dict[str, Any] = load_toml(ns.config) if getattr(ns, "config", None) else {}
    for f in fields(TrainConfig):
        v = getattr(ns, f.name, None)
        if v is not None:
            values[f.name] = v
    missing = [flag for name, flag in PATH_FIELDS.items() if not values.get(name)]
    if missing:
        raise ConfigError(f"missing required argument(s) {' '.join(missing)} (or set them in --config FILE.toml)")
    if values.get("time_budget") and "steps" not in values:
        values["steps"] = BUDGET_STEP_CAP  # the budget ends the run; --steps would cap it
    for name in PATH_FIELDS:
        values[name] = str(Path(values[name]).expanduser().absolute())
    for name in ("init_from", "preview"):
        if values.get(name):
            values[name] = str(Path(values[name]).expanduser().absolute())
    try:
        return TrainConfig(**values)
    except TypeError as exc:
        raise ConfigError(f"bad config value: {exc}") from None

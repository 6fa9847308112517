"""Training configuration: one frozen dataclass, its choices and defaults, and its checks.

Its CLI arguments and TOML file form are :mod:`trainer.core.config_args`. No torch here: the farm and GUI code
build train arguments with it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Sequence

from trainer.core.budget import BudgetError, parse_time_budget
from trainer.core.channels import ChannelError, ChannelPlan
from trainer.core.exitcodes import ExitCode
from trainer.core.recipe import (DEFAULT_BETA2, ENCODER_MODULES, HEAD_START_FOCUS_EVERY, default_encoder_lr,
                                  default_floor, default_focus, default_lr, recipe_job)
from trainer.core.timeouts import GRACE

MODEL_SIZES = ("small", "medium", "large")
#: ``--architecture`` (see trainer.learn.model; v1 is the network cuetrain started with); ``auto`` picks one by case
#: (:attr:`TrainConfig.architecture_name`). v2 (a space-to-depth stem; never a default) is a benchmark's only
#: (benchmarks/lib/baselines.py); a v2 checkpoint is refused by name (``trainer.record.netcheck``).
ARCHITECTURES = ("auto", "v1", "v3", "unet")
#: ``--architecture`` when not given: ``auto``, v3 for colour and upres (docs/studies/time_to_quality.md), unet for a
#: matte (docs/studies/matte_network.md).
DEFAULT_ARCHITECTURE = "auto"
GRAD_COMPRESSION = ("none", "fp16", "powersgd")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # see trainer.learn.precision
MEMORY_FORMATS = ("channels_last", "contiguous")
INIT_EMAS = ("fresh", "source")  # TrainConfig.init_ema; see trainer.learn.resume._init_from
LR_SCHEDULES = ("cosine", "onecycle")  # see trainer.learn.schedule.lr_at
OPTIMIZERS = ("auto", "adam", "muon")  # see trainer.learn.schedule.build_optimizer and TrainConfig.optimizer_name
#: Default ``--data-cache-mb`` [MiB]: two ranks of a small farm node stay well inside 3 GiB (docs/scaling.md,
#: "Production plates").
DEFAULT_DATA_CACHE_MB = 512
#: ``--scale`` factors: the Ground Truth is this many times the Input's width and height (1: same size; 2 and 4:
#: upres, see ``trainer.learn.model``) [1].
SCALES = (1, 2, 4)
#: ``--matte-loss``: the loss of matte channels (``trainer.learn.loss``); the first is the default.
MATTE_LOSSES = ("bce+l1", "bce+l1+iou", "l1")
#: ``--augment-grade``: auto = a random grade on matte tasks only (``trainer.data.augment``).
AUGMENT_GRADES = ("auto", "on", "off")


class ConfigError(ValueError):
    """A configuration value or file is invalid; the message names the field/file and the fix (exit code 2)."""

    exit_code = int(ExitCode.USAGE)


#: ``--lr-scaling`` rules (``trainer.learn.schedule.effective_lr``); the first is the default.
LR_SCALINGS = ("sqrt", "linear", "none")


@dataclass(frozen=True)
class TrainConfig:
    """Everything one training run needs. Units in brackets.

    Attributes:
        input_dir: folder of the Input image sequence.
        target_dir: folder of the Ground Truth image sequence (paired by frame number).
        run_dir: run directory on shared storage (see ``trainer.record.rundir``).
        steps: number of training steps [steps]; one step = one batch on every rank.
        batch_size: global batch [crops per step], split across ranks.
        crop_size: side of the square random crops [pixels].
        model_size: ``small``, ``medium`` or ``large`` (see ``trainer.learn.model``).
        architecture: ``auto`` (the default, :data:`DEFAULT_ARCHITECTURE`: :attr:`architecture_name` picks ``v3``
            for colour and upres, ``unet`` for a matte), ``v3`` (added skips, sub-pixel upsampling), ``v1`` (the
            first network; checkpoints without an architecture are v1) or ``unet`` (a plain U-Net trunk) (see
            ``trainer.learn.model``).
        lr: Adam learning rate for ``lr_reference_batch`` crops per optimizer update; None = the model
            size's Adam lr, :data:`DEFAULT_LR` (small 1e-3, medium 5e-4, large 1e-4), or with Muon its
            :data:`DEFAULT_MUON_LR` (small 2e-3, medium 2e-3, large 1.6e-3), or for a colour head start
            (``init_from``) with Muon :data:`HEAD_START_MUON_LR` (small 3e-3); see :attr:`base_lr` [1].
        lr_reference_batch: batch the ``lr`` is tuned for [crops]; the effective batch of an update is
            ``batch_size x sync_interval`` (see ``lr_scaling``).
        lr_scaling: ``sqrt`` (default: lr x sqrt(effective batch / lr_reference_batch), the square-root rule for
            Adam, Malladi et al. 2022, "On the SDEs and Scaling Rules for Adaptive Gradient Algorithms"), ``linear``
            (lr x effective batch / lr_reference_batch, Goyal et al. 2017, derived for SGD; with Adam it trained worse
            at 4x and diverged at 16x, docs/studies/noise_scale.md) or ``none``.
        warmup_steps: linear LR warmup from lr/10 [optimizer updates] (Goyal et al. 2017, sec. 2.2).
        lr_floor: where ``cosine`` ends, as a fraction of the peak lr (0 to 1); None: with Muon
            :data:`MUON_LR_FLOOR` by job and size (small: repair, mattes and mixed 0.3, upres 0.5), else
            :data:`DEFAULT_LR_FLOOR` (0.1); see :attr:`cosine_floor` [1].
        lr_schedule: ``cosine`` (the default: ``warmup_steps`` then cosine decay to ``lr_floor``) or ``onecycle``
            (Smith & Topin 2019: linear rise from lr/25 over 30% of the updates, cosine fall to lr/1e4;
            ``warmup_steps`` is not used) (see ``trainer.learn.schedule.lr_at``).
        ema_decay: export (and show in contact sheets) an exponential moving average of the weights with this decay
            per update (0.999, warmed up: about the last 1/19 of the updates until ~19,000; ``trainer.learn.ema``); 0 =
            the last weights (chosen by the time-to-quality benchmark, docs/studies/time_to_quality.md) [1].
        optimizer: ``auto`` (the default: :attr:`optimizer_name` picks ``muon`` for colour, upres and mattes;
            docs/studies/default_recipe.md, docs/studies/matte_set.md), ``adam`` or ``muon``:
            ``torch.optim.Muon`` for every convolution but the first and last, Adam (these betas) for the rest, one lr
            (``trainer.learn.optim``). A checkpoint resumes with the optimizer it was written with.
        adam_beta1: decay of Adam's first-moment (gradient) average, its momentum [1]: 0.9 (Kingma & Ba, the
            default) or e.g. 0.8 (with Adam, beta2 0.9 and lr 2e-3: the same held-out quality sooner,
            docs/studies/time_to_quality.md). A resumed checkpoint keeps the value it was written with.
        adam_beta2: decay of Adam's second-moment (squared-gradient) average [1]; None = :data:`DEFAULT_BETA2` of the
            optimizer (:attr:`beta2`): 0.9 with Muon (NAFNet's, Chen et al. 2022), 0.999 with Adam alone (Kingma & Ba;
            docs/studies/time_to_quality.md). A resumed checkpoint keeps the value it was written with.
        noise_interval: one rank at sync interval 1 measures the gradient noise scale on every Nth optimizer update
            only: a measured step runs its batch as two halves, about twice a step's kernel launches
            (docs/studies/trainer_speed.md, "GPU figures"). Several ranks, or a sync interval above 1, measure every
            update at the cost of two squared norms (``trainer.learn.noise_scale``); 0 = off [optimizer updates].
        checkpoint_interval: write a checkpoint every N steps [steps].
        contact_sheet_interval: write a contact sheet every N steps [steps].
        log_interval: print ``[Step:N/M]`` and append to metrics.jsonl every N steps [steps].
        keep_checkpoints: keep the last K checkpoints [files].
        seed: random seed for weights and crops.
        resume: continue from the latest checkpoint in ``run_dir``.
        grad_compression: DDP communication hook: ``none``, ``fp16`` or ``powersgd``.
        collective_timeout_s: a collective that takes longer fails: how fast a hung rank is noticed [seconds].
        gang_timeout_s: how long ranks that are up wait for the rest of the gang before the whole gang
            fails (OpenCue starts frames one by one) [seconds].
        colorspace: OCIO colour space of the Input and Ground Truth frames ("" = no colour management;
            see ``trainer.data.colour``).
        working_space: OCIO colour space the network trains in, e.g. ``ACEScct`` ("" = none).
        precision: ``auto``, ``fp32``, ``bf16`` or ``fp16`` autocast of the forward pass; weights,
            gradients, optimizer state and loss stay float32 (see ``trainer.learn.precision``).
        memory_format: ``channels_last`` (NHWC activations, faster on oneDNN and cuDNN) or ``contiguous``.
        compile: ``torch.compile`` the training model (opt-in; the first steps compile).
        stop_grace_s: after SIGTERM/SIGINT, the gang stops at an agreed step and rank 0 checkpoints; a rank
            still running this long after the signal exits anyway (code 76) (see trainer.gang.stopvote) [seconds].
        data_cache_mb: decoded frames a rank keeps in its own memory, taken from the host's decoded copy of
            the shot (see ``trainer.data.hostcache``); crops of the other frames are read from that copy on local
            scratch, whatever the shot's length. 0 = none kept [MiB].
        shot_check_s: while training, every rank looks at the shot's files this often; a file deleted, truncated or
            rewritten stops the gang (exit 80) so it restarts on a consistent shot (``trainer.data.shot_loading``) [s].
        scale: upres factor: the Ground Truth is ``scale`` times the Input in both dimensions and the model
            returns frames that size; 1 = same size (repair), 2 or 4 = upres [1].
        input_channels: the Input channels the network reads, comma-separated as the files name them (``R,G,B``,
            ``R,G,B,A``, an EXR layer's ``beauty.R,beauty.G,beauty.B``; ``trainer.core.channels``).
        target_channels: the Ground Truth channels it learns to output (``R,G,B``; ``A`` or ``matte.A`` for a matte;
            ``R,G,B,A``); a channel the Input also has is learnt as a correction of it, a new alpha as a matte.
        matte_loss: loss of matte channels: ``bce+l1`` (the default: binary cross-entropy plus L1; with Muon at
            1,000 steps it beat ``bce+l1+iou`` on every shot of the matte set, docs/studies/matte_set.md),
            ``bce+l1+iou`` (plus a soft Jaccard term, the differentiable IoU) or ``l1`` (``trainer.learn.loss``).
        augment: probability per crop of a random rotation, scale and flip, applied alike to the Input and the
            Ground Truth crop (BigCat's "Automatic Data Augmentation"; ``trainer.data.augment``); 0 = off [1].
        augment_grade: with ``augment``, also a random grade: ``auto`` (matte tasks: the Input's colour only, the
            matte stays right), ``on`` (every task; a grade on both sides keeps a deblur or denoise right) or ``off``.
        preview: a frame, or a folder of a few frames, outside the data set: at every contact-sheet interval rank 0
            renders the model on them (``previews/``) ("" = none).
        init_from: start from another model's weights ("" = random weights): a run directory (its exported
            ``model.pt``), a checkpoint ``.pt`` or a ``model.pt``; only the weights are loaded, the optimizer and
            the schedule start fresh (``trainer.learn.init_from``). Ignored when ``--resume`` finds a checkpoint.
        init_ema: with ``init_from`` and ``ema_decay``, the weight average's warm-up (a copy of the loaded weights):
            ``fresh`` (it restarts, ``trainer.learn.ema``) or ``source`` (it counts on from the source's step).
        init_focus: with ``init_from``, the share of each batch's crops drawn where the source model's error on this
            shot is largest (0 to 1; ``trainer.data.crop_focus``); None: see :attr:`focus_share` [1].
        init_encoder_lr: with ``init_from``, the encoder's lr as a fraction of the peak lr (0 to 1; the v3 network's
            Muon weights in ``trainer.core.recipe.ENCODER_MODULES``); None: see :attr:`encoder_lr` [1].
        init_focus_every: with a crop focus, the trained network renders the frames again every this many steps and
            the focus follows its error (``trainer.learn.focus_map``; 0, the default: the source's map all run) [steps].
        time_budget: train until a wall-clock budget ends instead of for ``steps`` ("" = off): a duration (``90s``,
            ``30m``, ``2h``) or an ISO 8601 deadline with its UTC offset (``trainer.core.budget``). The lr schedule runs
            over the budget, rank 0 decides the last step, the export fits inside it; ``steps`` stays a cap.
        stop_when_flat: stop once the held-out gain improved by less than this over ``flat_window`` steps [dB]
            (0 = off). The held-out frames are every 10th frame of the shot, not trained on
            (``trainer.data.holdout``; the rule: ``trainer.core.stopping``). ``steps`` (and ``time_budget``) stay caps.
        flat_window: the window ``stop_when_flat`` compares over [steps].
        storage_full_grace_s: how long rank 0 rides out a full run directory (ENOSPC, or EDQUOT: quota exceeded)
            while training: metrics rows and the checkpoint that could not be written are held in memory and written
            when space returns; a write still failing this long after its first failure fails the run (exit 2,
            ``failure_kind`` ``storage_full``; ``trainer.record.storage``) [seconds].
    """

    input_dir: str
    target_dir: str
    run_dir: str
    steps: int = 1000
    batch_size: int = 8
    crop_size: int = 64
    model_size: str = "small"
    architecture: str = DEFAULT_ARCHITECTURE
    lr: float | None = None
    lr_reference_batch: int = 8
    lr_scaling: str = "sqrt"
    warmup_steps: int = 50
    lr_schedule: str = "cosine"
    lr_floor: float | None = None
    ema_decay: float = 0.999
    optimizer: str = "auto"
    adam_beta1: float = 0.9
    adam_beta2: float | None = None
    noise_interval: int = 50
    checkpoint_interval: int = 250
    contact_sheet_interval: int = 100
    log_interval: int = 10
    keep_checkpoints: int = 3
    seed: int = 0
    resume: bool = False
    grad_compression: str = "none"
    collective_timeout_s: float = 60.0
    gang_timeout_s: float = 600.0
    colorspace: str = ""
    working_space: str = ""
    precision: str = "auto"
    memory_format: str = "channels_last"
    compile: bool = False
    stop_grace_s: float = GRACE.checkpoint_s  # trainer.core.timeouts: supervisors SIGKILL strictly later
    data_cache_mb: int = DEFAULT_DATA_CACHE_MB
    shot_check_s: float = 30.0
    scale: int = 1
    init_from: str = ""
    init_ema: str = "fresh"
    init_focus: float | None = None
    init_encoder_lr: float | None = None
    init_focus_every: int = HEAD_START_FOCUS_EVERY
    input_channels: str = "R,G,B"
    target_channels: str = "R,G,B"
    matte_loss: str = MATTE_LOSSES[0]
    augment: float = 0.0
    augment_grade: str = "auto"
    preview: str = ""
    time_budget: str = ""
    stop_when_flat: float = 0.0
    flat_window: int = 500
    storage_full_grace_s: float = 300.0

    def __post_init__(self) -> None:
        _check_positive(self, ("steps", "batch_size", "crop_size", "lr_reference_batch", "checkpoint_interval",
                               "contact_sheet_interval", "log_interval", "keep_checkpoints"))
        if isinstance(self.data_cache_mb, bool) or not isinstance(self.data_cache_mb, int) or self.data_cache_mb < 0:
            raise ConfigError(f"data_cache_mb={self.data_cache_mb!r} must be a whole number of MiB >= 0 (e.g. 512)")
        for name, unit in (("warmup_steps", "steps"), ("noise_interval", "optimizer updates (0: off, e.g. 50)"),
                           ("init_focus_every", "steps (0: the source's map only)")):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be >= 0 {unit}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"ema_decay={self.ema_decay} must be 0 (off) or between 0 and 1 (e.g. 0.999)")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer={self.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        if not 0.0 <= self.adam_beta1 < 1.0:
            raise ConfigError(f"adam_beta1={self.adam_beta1} must be >= 0 and < 1 (e.g. 0.9 or 0.8)")
        if self.adam_beta2 is not None and not 0.0 < self.adam_beta2 < 1.0:
            raise ConfigError(f"adam_beta2={self.adam_beta2} must be between 0 and 1, exclusive (e.g. 0.9 or 0.999)")
        if self.lr is not None and not self.lr > 0:
            raise ConfigError(f"lr={self.lr} must be > 0 (try 1e-3)")
        if self.lr_floor is not None and not 0.0 <= self.lr_floor <= 1.0:
            raise ConfigError(f"lr_floor={self.lr_floor} must be a fraction of the peak lr from 0 to 1 (e.g. 0.1)")
        for name in ("collective_timeout_s", "gang_timeout_s", "stop_grace_s", "shot_check_s", "storage_full_grace_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)} must be > 0 seconds")
        _check_choice("model_size", self.model_size, MODEL_SIZES)
        _check_choice("architecture", self.architecture, ARCHITECTURES)
        _check_choice("lr_scaling", self.lr_scaling, LR_SCALINGS)
        _check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        _check_choice("grad_compression", self.grad_compression, GRAD_COMPRESSION)
        if bool(self.colorspace) != bool(self.working_space):
            raise ConfigError("--colorspace and --working-space go together: give both (e.g. --colorspace "
                              "'Linear Rec.709 (sRGB)' --working-space ACEScct) or neither")
        _check_choice("precision", self.precision, PRECISIONS)
        _check_choice("memory_format", self.memory_format, MEMORY_FORMATS)
        if isinstance(self.scale, bool) or self.scale not in SCALES:
            raise ConfigError(f"scale={self.scale!r} is not one of {', '.join(map(str, SCALES))} (the Ground Truth's "
                              "size over the Input's: 1 for repair, 2 or 4 for upres)")
        if not isinstance(self.init_from, str):
            raise ConfigError(f"init_from={self.init_from!r} must be a path (a run directory, a checkpoint or a "
                              "model.pt) or empty")
        try:
            ChannelPlan.parse(self.input_channels, self.target_channels)
        except ChannelError as exc:
            raise ConfigError(str(exc)) from None
        _check_choice("matte_loss", self.matte_loss, MATTE_LOSSES)
        _check_choice("init_ema", self.init_ema, INIT_EMAS)
        for name in ("init_focus", "init_encoder_lr"):
            if getattr(self, name) is not None and not (self.init_from and 0.0 <= getattr(self, name) <= 1.0):
                raise ConfigError(f"{name}={getattr(self, name)!r} needs init_from and a share from 0 to 1 (e.g. 0.5)")
        if self.encoder_lr != 1.0 and (self.optimizer_name != "muon" or self.architecture_name not in ENCODER_MODULES):
            raise ConfigError(f"init_encoder_lr={self.init_encoder_lr} slows the v3 network's encoder under Muon; this "
                              f"run trains {self.architecture_name} with {self.optimizer_name}: leave it out")
        _check_choice("augment_grade", self.augment_grade, AUGMENT_GRADES)
        if isinstance(self.augment, bool) or not 0.0 <= self.augment <= 1.0:
            raise ConfigError(f"augment={self.augment!r} must be a probability from 0 (off) to 1 (e.g. 0.5)")
        if self.time_budget:
            try:
                parse_time_budget(self.time_budget)
            except BudgetError as exc:
                raise ConfigError(str(exc)) from None
        if isinstance(self.stop_when_flat, bool) or not self.stop_when_flat >= 0.0:
            raise ConfigError(f"stop_when_flat={self.stop_when_flat!r} must be a gain in dB >= 0 (0: off, e.g. 0.05)")
        if isinstance(self.flat_window, bool) or not isinstance(self.flat_window, int) or self.flat_window < 1:
            raise ConfigError(f"flat_window={self.flat_window!r} must be a positive whole number of steps (e.g. 500)")
        if self.crop_size < 8:
            raise ConfigError(f"crop_size={self.crop_size} is too small; use at least 8 pixels (e.g. 64)")

    @property
    def channels(self) -> ChannelPlan:
        """The run's :class:`trainer.core.channels.ChannelPlan` (``input_channels`` -> ``target_channels``)."""
        return ChannelPlan.parse(self.input_channels, self.target_channels)

    @property
    def architecture_name(self) -> str:
        """The network trained: ``architecture``, or for ``auto`` the default recipe's choice by case: ``unet`` when
        every target is a matte (held-out IoU 0.9417 against v3's 0.9379, 3 seeds, docs/studies/matte_network.md),
        else ``v3``: colour (docs/studies/time_to_quality.md) and mixed targets such as ``R,G,B,A`` (+1.65 dB on the
        colour against unet's +1.27 dB, matte IoU 0.972 against 0.970, 2 seeds, docs/studies/matte_set.md)."""
        if self.architecture != "auto":
            return self.architecture
        return "unet" if all(self.channels.matte) else "v3"

    @property
    def optimizer_name(self) -> str:
        """The optimizer trained: ``optimizer``, or for ``auto`` ``muon`` for every task: colour and upres at every
        size (each optimizer at its size's lr: ahead in every cell, +0.5 to +2.9 dB, docs/studies/default_recipe.md)
        and mattes (IoU and edge error better on every decision shot of the semantic matte set at 1,000 and 3,000
        steps, docs/studies/matte_set.md)."""
        if self.optimizer != "auto":
            return self.optimizer
        return "muon"

    @property
    def optimizer_reason(self) -> str:
        """One sentence on why :attr:`optimizer_name` trains (``run.json``'s ``optimizer.reason``). The rule names no
        device: held-out gain per second picked the same optimizer on an AVX512-BF16 CPU (bf16) and on an AVX2-only
        node (fp32) for colour and upres (docs/studies/optimizer_per_second.md), as gain per step did there and on an
        H100 (docs/studies/default_recipe.md); for mattes the semantic matte set (docs/studies/matte_set.md) replaced
        the skin-key clip those per-second rows measured."""
        if self.optimizer != "auto":
            return f"--optimizer {self.optimizer}"
        if any(self.channels.matte):
            return ("auto: muon for a matte target (higher held-out IoU and lower edge error on every shot of the "
                    "semantic matte set at 1,000 and 3,000 steps: docs/studies/matte_set.md)")
        return ("auto: muon when every target channel corrects an Input channel (more held-out dB per step and per "
                "second on bf16 and fp32 CPUs and an H100: docs/studies/default_recipe.md, "
                "docs/studies/optimizer_per_second.md)")

    @property
    def beta2(self) -> float:
        """``adam_beta2``, or :data:`DEFAULT_BETA2` of :attr:`optimizer_name` when it is None [1]."""
        return DEFAULT_BETA2[self.optimizer_name] if self.adam_beta2 is None else self.adam_beta2

    @property
    def base_lr(self) -> float:
        """``lr``, or when it is None :func:`trainer.core.recipe.default_lr` of this job, optimizer and size [1]."""
        return self.lr if self.lr is not None else default_lr(self.recipe_job, self.optimizer_name, self.model_size,
                                                                head_start=bool(self.init_from))

    @property
    def focus_share(self) -> float:
        """``init_focus``, or when it is None :func:`trainer.core.recipe.default_focus` (0: every crop uniform) [1]."""
        return self.init_focus if self.init_focus is not None else default_focus(
            self.recipe_job, self.optimizer_name, self.model_size, head_start=bool(self.init_from))

    @property
    def encoder_lr(self) -> float:
        """``init_encoder_lr``, or when it is None :func:`trainer.core.recipe.default_encoder_lr` [1]."""
        return self.init_encoder_lr if self.init_encoder_lr is not None else default_encoder_lr(
            self.recipe_job, self.optimizer_name, self.model_size, self.architecture_name,
            head_start=bool(self.init_from))

    @property
    def recipe_job(self) -> str:
        """The job the measured tables are keyed by (:func:`trainer.core.recipe.recipe_job`: repair, upres, matte,
        mixed or other)."""
        return recipe_job(self.channels.task, self.scale)

    @property
    def cosine_floor(self) -> float:
        """``lr_floor``, or when it is None :func:`trainer.core.recipe.default_floor` of this job, optimizer and size
        (a fraction of the peak lr, 0 to 1) [1]."""
        return self.lr_floor if self.lr_floor is not None else default_floor(self.recipe_job, self.optimizer_name,
                                                                             self.model_size)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for run.json and checkpoints)."""
        return dataclasses.asdict(self)

    def to_argv(self) -> list[str]:
        """CLI arguments that reproduce this config with ``cuetrain train`` (defaults omitted)."""
        argv: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if f.name in PATH_FIELDS:
                argv += [PATH_FIELDS[f.name], str(value)]
            elif isinstance(value, bool):
                if value:
                    argv.append(flag)
            elif value != f.default:
                argv += [flag, str(value)]
        return argv


#: The three paths' flags by field (``to_argv`` writes them, ``trainer.core.config_args`` requires them).
PATH_FIELDS = {"input_dir": "--input", "target_dir": "--target", "run_dir": "--run-dir"}


def _check_positive(cfg: TrainConfig, names: Sequence[str]) -> None:
    for name in names:
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name}={value!r} must be a positive whole number")


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(choices)}")

"""The training recipe's measured defaults: the learning rate by model size and optimizer, a head start's own lr,
crop focus and encoder lr, where the schedule ends, and Adam's second-moment decay, with the functions that pick one
by job, optimizer and size. :class:`trainer.core.config.TrainConfig` applies them when a flag is not given; each table
cites the study that chose it. No torch here.
"""

#: The default ``--lr`` of each model size at ``lr_reference_batch`` crops [1]: wider networks take smaller
#: steps. On one H200 (batch 32, crop 128: a peak of 2x by the sqrt rule) medium at 1e-3 diverged in 3 of 4
#: runs and at 5e-4 trained smoothly (3 seeds) to a lower loss; large diverged at 1e-3 and 5e-4 and was
#: wiped out by a spike at 2.5e-4, hence 1e-4 (not yet run on a GPU) (docs/studies/trainer_speed.md,
#: "Default learning rate per model size").
DEFAULT_LR = {"small": 1e-3, "medium": 5e-4, "large": 1e-4}
#: Muon's default lr by model size [1], for ``lr_reference_batch`` crops: about one lr for every size, since
#: ``match_rms_adamw`` scales Muon's step to Adam's update size whatever the width. Searched on an H100 at batch 8,
#: 1,000 steps (``bench_recipe.py default-recipe``, docs/studies/default_recipe.md, "On a GPU"): medium best at
#: 2e-3 of 5e-4 to 8e-3 (+4.24 dB; 8e-3 diverged), large best at 1.6e-3 of 1e-4 to 3.2e-3 (+4.55 dB, +3.51 at
#: 3.2e-3); small 2e-3 is ``cuetrain demo``'s (4e-3 gained +0.08 dB more at 3,000 steps: within noise).
DEFAULT_MUON_LR = {"small": 2e-3, "medium": 2e-3, "large": 1.6e-3}
#: Muon's default lr for a head start (``--init-from``) by model size [1]: 1.5x a run from random weights. A
#: fine-tune has B's content to learn, not only to polish. On v3 small, in 13 runs paired with 2e-3 (two pairs of
#: shots, four source models, 333 to 1,500 steps, seeds), it won 9 by up to 0.15 dB and lost 4 by at most 0.04 dB
#: (the 6,000-step library source on carphone); mean +0.03 dB (bench_recipe.py head-start; docs/studies/head_start.md,
#: "The fine-tune's lr"). Measured on colour repair at scale 1 only: other sizes, mattes, mixed targets and upres keep
#: :data:`DEFAULT_MUON_LR`, Adam its :data:`DEFAULT_LR`.
HEAD_START_MUON_LR = {"small": 3e-3}
#: The share of a head start's crops drawn where the source model's error on the new shot is largest (``--init-focus``,
#: ``trainer.data.crop_focus``), by model size [1]: half, the rest uniform. v3 small, 1,500 steps from an augmented
#: source (bench_recipe.py head-start; docs/studies/head_start.md, "Crops where the source is wrong"). Measured on
#: colour repair at scale 1 only, as :data:`HEAD_START_MUON_LR`; every other run draws its crops uniformly.
HEAD_START_FOCUS = {"small": 0.5}
#: A head start's encoder lr (``--init-encoder-lr``) by model size, as a fraction of the peak lr [1]: the v3 network's
#: encoder levels and downsamplings (:data:`ENCODER_MODULES`) move at half the lr of its middle and
#: decoder: discriminative fine-tuning, the earlier layers moved less (Howard & Ruder 2018, "Universal Language Model
#: Fine-tuning for Text Classification"). v3 small, from an augmented source (bench_recipe.py head-start;
#: docs/studies/head_start.md, "The encoder at half the lr"): 1,500 steps gained +0.015 dB on the alike pair (five
#: seeds), +0.020 on bikes at 272x640 (three) and +0.021 on carphone (five, within its spread); at 500 steps it was
#: level (+0.002). A third of the lr gained less (+0.009 on the mean of the three pairs, two seeds), and the middle at
#: half as well lost 0.03 dB on the alike pair. Measured on colour repair with Muon only, as
#: :data:`HEAD_START_MUON_LR`; every other run trains every layer at one lr.
HEAD_START_ENCODER_LR = {"small": 0.5}
#: The modules that make up each architecture's encoder, by parameter-name prefix (``net.named_parameters()`` of
#: ``trainer.learn.model``'s networks): the levels ``--init-encoder-lr`` slows. v3's encoder is its residual blocks
#: before each downsampling and the strided convolutions that downsample; other architectures have none listed.
ENCODER_MODULES = {"v3": ("encoders", "downs")}
#: How often a head start's crop focus follows the network being trained (``--init-focus-every``) [steps]; 0: never,
#: the source's map all run. Every 250 steps (1,500 from an augmented source, five seeds) gained 0.040 dB on the alike
#: pair and lost 0.33 dB on carphone, against the source's map: 0 by the mean over the two
#: (docs/studies/head_start.md, "The focus follows the network"). An option for a shot like the source's.
HEAD_START_FOCUS_EVERY = 0
#: Where the cosine schedule ends, as a fraction of the peak lr (``--lr-floor``) [1]: a tenth (cuetrain's first
#: schedule) for every case that :data:`MUON_LR_FLOOR` does not list.
DEFAULT_LR_FLOOR = 0.1
#: Where the cosine ends with Muon, by job and model size [1]. The job is ``repair`` (colour at scale 1, from random
#: weights or a head start), ``upres`` (colour at scale 2 or 4), ``matte`` (every target a matte) or ``mixed``
#: (colour and a matte: ``R,G,B,A``). Adam and the medium and large sizes keep :data:`DEFAULT_LR_FLOOR`.
#:
#: The model an artist gets is the EMA of the weights. The average takes out the last steps' noise, as a low last lr
#: would, so a lr that stays higher keeps the network learning to the end. Stochastic weight averaging trains at a
#: constant or cyclical lr on the same grounds (Izmailov et al. 2018, "Averaging Weights Leads to Wider Optima and
#: Better Generalization"). Against a tenth (docs/studies/lr_floor.md):
#:
#: - repair, 0.3: +0.04 to +0.20 dB at 1,000 steps on four shots, one held out (cuetrain local, 2 ranks; 8 of 8 paired
#:   runs), and +0.02 to +0.06 dB at 3,000 (10 of 14). At 3,000, 0.5 and 1.0 were within a seed's spread of 0.3.
#: - upres, 0.5: x2 on two clips, two seeds (bench_recipe.py upscale). At 1,000 steps 0.5 gained +0.20 to +0.64 dB,
#:   at 3,000 +0.06 to +0.21 dB. It beat 0.3 on all 8 paired runs. 1.0 won more at 1,000 steps and lost one clip at
#:   3,000. x4 agreed at 1,000 steps.
#: - matte, 0.3: the matte set's three decision shots (bench_recipe.py matte-set). At 1,000 steps, over three seeds,
#:   IoU was level (-0.0001) and the edge error fell on every shot. At 3,000 steps (one seed) IoU rose on every shot
#:   (+0.0022) and the edge error was level. 0.5 and 1.0 lost IoU at 1,000 steps.
#: - mixed, 0.3: ``R,G,B,A`` on three of the matte set's shots, two seeds (bench_recipe.py matte-set --mixed). At
#:   1,000 steps the colour gained +0.10 to +0.26 dB in 6 of 6 paired runs; the mean IoU of the three shots rose
#:   0.9444 -> 0.9451 and the edge error fell on two of them. 0.5 gained less colour on the mean and lost IoU. The
#:   held-out shot, judged after: +0.09 / +0.15 dB, IoU +0.0023, the edge error lower on both seeds.
MUON_LR_FLOOR = {"repair": {"small": 0.3}, "upres": {"small": 0.5}, "matte": {"small": 0.3}, "mixed": {"small": 0.3}}
#: Adam's second-moment decay by optimizer when ``--adam-beta2`` is not given [1]: 0.9 with Muon (NAFNet's, Chen et
#: al. 2022; the demo's recipe), 0.999 with Adam alone (Kingma & Ba; 0.9 measured 0.2 dB worse at lr 1e-3).
DEFAULT_BETA2 = {"muon": 0.9, "adam": 0.999}


def recipe_job(task: str, scale: int) -> str:
    """The job the tables above are keyed by, from a channel plan's ``task`` (``trainer.core.channels``) and
    ``--scale``: ``repair`` (colour at scale 1), ``upres`` (colour at scale 2 or 4), ``matte`` (every target a matte),
    ``mixed`` (colour and a matte, ``colour+alpha``: ``R,G,B,A``), else ``other``."""
    if task == "colour":
        return "repair" if scale == 1 else "upres"
    return {"matte": "matte", "colour+alpha": "mixed"}.get(task, "other")


def _head_start(table: dict[str, float], job: str, optimizer: str, size: str, head_start: bool) -> float | None:
    """``table``'s value for ``size`` in the case it was measured on (a colour repair head start with Muon)."""
    return table.get(size) if head_start and job == "repair" and optimizer == "muon" else None


def default_lr(job: str, optimizer: str, size: str, *, head_start: bool) -> float:
    """The peak lr when ``--lr`` is not given: :data:`DEFAULT_LR` (Adam) or :data:`DEFAULT_MUON_LR` (Muon) of
    ``size``; a colour head start (``head_start``: ``--init-from``) with Muon takes :data:`HEAD_START_MUON_LR` where
    it lists the size."""
    lr = _head_start(HEAD_START_MUON_LR, job, optimizer, size, head_start)
    return lr if lr is not None else (DEFAULT_MUON_LR if optimizer == "muon" else DEFAULT_LR)[size]


def default_floor(job: str, optimizer: str, size: str) -> float:
    """Where the cosine ends when ``--lr-floor`` is not given: with Muon, :data:`MUON_LR_FLOOR` of ``job`` where it
    lists ``size``, else :data:`DEFAULT_LR_FLOOR` (a fraction of the peak lr)."""
    return (MUON_LR_FLOOR.get(job, {}) if optimizer == "muon" else {}).get(size, DEFAULT_LR_FLOOR)


def default_encoder_lr(job: str, optimizer: str, size: str, architecture: str, *, head_start: bool) -> float:
    """The encoder's share of the peak lr when ``--init-encoder-lr`` is not given: :data:`HEAD_START_ENCODER_LR` for a
    colour head start with Muon of a network with an encoder (:data:`ENCODER_MODULES`) where it lists ``size``, else 1
    (every layer at the peak lr)."""
    share = _head_start(HEAD_START_ENCODER_LR, job, optimizer, size, head_start)
    return 1.0 if share is None or architecture not in ENCODER_MODULES else share


def default_focus(job: str, optimizer: str, size: str, *, head_start: bool) -> float:
    """The share of crops drawn by the source's error when ``--init-focus`` is not given: :data:`HEAD_START_FOCUS`
    for a colour head start with Muon where it lists ``size``, else 0 (every crop uniform)."""
    return _head_start(HEAD_START_FOCUS, job, optimizer, size, head_start) or 0.0

"""Recipe variants outside the product: what docs/studies/time_to_quality.md's "Exploration" section measured.

Each variant trains through :func:`bench_time_to_quality.train_averages` (the same crops, seed, schedule code,
EMA and held-out evaluation as the time-to-quality benchmark), one after the other in this process, and
prints its held-out gain [dB] against training seconds. The variant networks are registered here only
(``VARIANT_SIZES``, added to ``baselines.MODEL_SIZES_V2`` at run time); three options the trainer does not
have are applied here (:class:`Variant`): ``clip`` (gradient-norm clipping before each Adam step, value in L2
norm) and ``transpose`` (crops also transposed: all 8 dihedral views). SkipInit (every residual block's second
convolution zero-initialised: De & Smith 2020; variants named ``z``), the loss, Adam's betas and the optimizer
(``mu``: the trainer's ``--optimizer muon``) are the recipe's (``ttq.Recipe.skip_init``, ``.loss``, ``.beta1``,
``.beta2``, ``.optimizer``). The ``v3*`` variants are stop 33's screen, ``v3-ema-c*`` (crop
sizes) stop 34's, ``v3-ema-z``/``-b9``/``-zb9``/``-lr3`` stop 35's, ``v3-ema-zb9-*``/``-zb8``/``-zb98`` stop 37's
(docs/studies/time_to_quality.md); the EMA's warm-up
constant (``Recipe.ema_warmup``) was TensorFlow's 10 then where they do not name one (``v3-ema-w10`` is that
default).

``--seeds N`` trains every variant with seeds ``--first-seed`` .. +N-1 (weights and crops) and ends with a
summary per clip: medians over seeds of the gain at fixed steps and of the steps to each seed's own ``v1`` final
gain (steps, so that a GPU's runs measure the per-step quality; CPU seconds are what the time-to-quality
benchmark reports). Parallel processes (one per seed or variant, each with its own ``--json``) are merged by
``--from-json``.

Usage::

    .venv/bin/python benchmarks/bench_recipe.py variants [--variants v1,v2-1c,...] [--clips bikes-blur-noise]
        [--scale 1.0] [--json out.json] [--seeds 6] [--device cuda --data carphone=FOLDER]
    .venv/bin/python benchmarks/bench_recipe.py variants --from-json a.json b.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import common  # noqa: F401  (puts the checkout on sys.path)
import torch
import torch.nn.functional as F

import bench_time_to_quality as ttq
from lib import clips
from trainer.record.rundir import atomic_write_json
from lib import baselines as model_mod  # v2 (benchmarks/lib/baselines.py) and the product's network classes
from trainer.data.crops import CropBatch, CropSampler
from trainer.learn.model import ModelConfigV3

#: Variant networks (v2 structure): ``w48`` 1.27 M parameters, ``w40d`` 0.94 M, ``s1`` = no space-to-depth stem;
#: ``fre`` (1.04 M) is :class:`FullResEnds`. Stop 33's v3 variants (stem 1): ``v3l3`` a third level (1.02 M),
#: ``v3s`` one block per way at the second level (0.22 M), ``v3e0`` no full-resolution block on the way down
#: (0.25 M), ``v3e0x`` that with three blocks per way at the second level.
VARIANT_SIZES = {
    "w48": ModelConfigV3(width=48, enc_blocks=(1, 1), mid_blocks=1, dec_blocks=(1, 1), stem=2),
    "w40d": ModelConfigV3(width=40, enc_blocks=(2, 1), mid_blocks=1, dec_blocks=(2, 1), stem=2),
    "s1": ModelConfigV3(width=16, enc_blocks=(1, 1), mid_blocks=1, dec_blocks=(1, 1), stem=1),
    "v3l3": ModelConfigV3(width=16, enc_blocks=(1, 1, 2), mid_blocks=2, dec_blocks=(1, 1, 2), stem=1),
    "v3e0": ModelConfigV3(width=16, enc_blocks=(0, 2), mid_blocks=2, dec_blocks=(1, 2), stem=1),
    "v3e0x": ModelConfigV3(width=16, enc_blocks=(0, 3), mid_blocks=2, dec_blocks=(1, 3), stem=1),
    "v3s": ModelConfigV3(width=16, enc_blocks=(1, 1), mid_blocks=2, dec_blocks=(1, 1), stem=1),
}


class FullResEnds(model_mod.CopyCatUNetV3):
    """v2 small with full-resolution ends (size name ``fre``): a 3x3 conv (3 -> 16, ReLU) before the space-to-depth
    stem and a 3x3 conv (16 -> 3, zero-initialised: the identity at the start) after the depth-to-space tail.
    (B, 3, H, W) -> (B, 3, H, W)."""

    def __init__(self, ch: int = 16) -> None:
        cfg = model_mod.MODEL_SIZES_V2["small"]
        super().__init__(cfg)
        self.pre = torch.nn.Conv2d(3, ch, 3, padding=1)
        self.head = torch.nn.Conv2d(ch * cfg.stem ** 2, cfg.width, 3, padding=1)
        self.tail = torch.nn.Conv2d(cfg.width, ch * cfg.stem ** 2, 3, padding=1)
        self.post = torch.nn.Conv2d(ch, 3, 3, padding=1)
        torch.nn.init.zeros_(self.post.weight)
        torch.nn.init.zeros_(self.post.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2], x.shape[-1]
        y = torch.relu(self.pre(model_mod.pad_to_multiple(x, self.multiple)))
        y = self.head(F.pixel_unshuffle(y, self.stem))
        skips = []
        for encoder, down in zip(self.encoders, self.downs):
            y = encoder(y)
            skips.append(y)
            y = down(y)
        y = self.middle(y)
        for i, (up, decoder) in enumerate(zip(self.ups, self.decoders)):
            y = decoder(F.pixel_shuffle(up(y), 2) + skips[len(skips) - 1 - i])
        y = torch.relu(F.pixel_shuffle(self.tail(y), self.stem))
        return x + self.post(y)[..., :h, :w]


@dataclass(frozen=True)
class Variant:
    """A recipe plus the options above: ``clip`` (max gradient L2 norm, 0 = off) and ``transpose`` (each crop pair
    also transposed (H <-> W) with probability 1/2, which with the sampler's flips gives all 8 dihedral views)."""

    recipe: ttq.Recipe
    clip: float = 0.0
    transpose: bool = False


class TransposingSampler(CropSampler):
    """``trainer.data.crops.CropSampler`` whose crops (square: (b, 3, c, c)) are transposed (H <-> W) with probability
    1/2 each, drawn from (seed, step) so that every run sees the same views."""

    def __init__(self, *args, seed: int = 0, **kwargs) -> None:  # noqa: ANN002, ANN003 - CropSampler's
        super().__init__(*args, seed=seed, **kwargs)
        self._seed = seed

    def batch(self, step: int) -> CropBatch:
        b = super().batch(step)
        g = torch.Generator().manual_seed(self._seed * 1_000_003 + step)
        flip = (torch.rand(b.input.shape[0], generator=g) < 0.5).to(b.input.device).view(-1, 1, 1, 1)
        fmt = torch.channels_last
        return CropBatch(*(torch.where(flip, x.transpose(-1, -2), x).contiguous(memory_format=fmt)
                               for x in (b.input, b.target)))


R = ttq.Recipe
ONE_CYCLE = {"schedule": "onecycle", "ema": 0.999}  # as ttq's v2-1cycle-ema: peak lr 2e-3, EMA 0.999
VARIANTS: dict[str, Variant] = {
    "v1": Variant(R("v1", "small", 3000)),
    "v2-1c": Variant(R("v2", "small", 3000, **ONE_CYCLE)),
    "v1-1c-lr4": Variant(R("v1", "small", 3000, lr=4e-3, **ONE_CYCLE)),
    "v2-1c-b4": Variant(R("v2", "small", 3000, batch=4, lr=1.4e-3, **ONE_CYCLE)),
    "v2-1c-c96": Variant(R("v2", "small", 1350, crop=96, **ONE_CYCLE)),
    "v2z-1c": Variant(R("v2", "small", 3000, **ONE_CYCLE, skip_init=True)),
    "s1z-1c": Variant(R("v2", "s1", 3000, **ONE_CYCLE, skip_init=True)),
    "w48-1c": Variant(R("v2", "w48", 3000, **ONE_CYCLE)),
    "w48z-1c": Variant(R("v2", "w48", 3000, **ONE_CYCLE, skip_init=True)),
    "w40d-1c": Variant(R("v2", "w40d", 3000, **ONE_CYCLE)),
    "w48-1c-clip": Variant(R("v2", "w48", 3000, **ONE_CYCLE), clip=0.1),
    "v2med-1c": Variant(R("v2", "medium", 1500, **ONE_CYCLE)),
    "fre-1c": Variant(R("v2", "fre", 3000, **ONE_CYCLE)),
    "v3-ema": Variant(R("v3", "small", 3000, ema=0.999)),
    "v3-ema-b4": Variant(R("v3", "small", 6000, batch=4, lr=1.4e-3, warmup=100, ema=0.9995)),
    "v3-ema-b99": Variant(R("v3", "small", 3000, ema=0.999, beta2=0.99)),
    "v3l3-ema": Variant(R("v2", "v3l3", 3000, ema=0.999)),
    "v3s-ema": Variant(R("v2", "v3s", 3000, ema=0.999)),
    "v3e0-ema": Variant(R("v2", "v3e0", 3000, ema=0.999)),
    "v3e0x-ema": Variant(R("v2", "v3e0x", 3000, ema=0.999)),
    "v3-ema9995": Variant(R("v3", "small", 3000, ema=0.9995)),
    "v3-ema-w10": Variant(R("v3", "small", 3000, ema=0.999, ema_warmup=10.0)),
    "v3-ema-w4": Variant(R("v3", "small", 3000, ema=0.999, ema_warmup=4.0)),
    "v3-ema-w2": Variant(R("v3", "small", 3000, ema=0.999, ema_warmup=2.0)),
    "v3-ema-w20": Variant(R("v3", "small", 3000, ema=0.999, ema_warmup=20.0)),
    "v3-ema-w40": Variant(R("v3", "small", 3000, ema=0.999, ema_warmup=40.0)),
    # Stop 34: the same pixels per step (~32,800) in fewer, larger crops or more, smaller ones
    "v3-ema-c96b4": Variant(R("v3", "small", 3000, batch=4, crop=96, ema=0.999)),
    "v3-ema-c128b2": Variant(R("v3", "small", 3000, batch=2, crop=128, ema=0.999)),
    "v3-ema-c48b14": Variant(R("v3", "small", 3000, batch=14, crop=48, ema=0.999)),
    "v3-ema-c48b16": Variant(R("v3", "small", 3000, batch=16, crop=48, ema=0.999)),
    "v3-ema-c40b20": Variant(R("v3", "small", 3000, batch=20, crop=40, ema=0.999)),
    "v3-ema-c32b32": Variant(R("v3", "small", 3000, batch=32, crop=32, ema=0.999)),
    # Stop 35: free per-update knobs on the default, over seeds (--seeds): SkipInit, NAFNet's betas, a higher peak
    "v3-ema-z": Variant(R("v3", "small", 3000, ema=0.999, skip_init=True)),
    "v3-ema-b9": Variant(R("v3", "small", 3000, ema=0.999, beta2=0.9)),
    "v3-ema-zb9": Variant(R("v3", "small", 3000, ema=0.999, beta2=0.9, skip_init=True)),
    "v3-ema-lr3": Variant(R("v3", "small", 3000, lr=3e-3, ema=0.999)),
    # the same two at the trainer's own default lr for the small size (1e-3; the demo and the variants above: 2e-3)
    "v3-ema-lr1": Variant(R("v3", "small", 3000, lr=1e-3, ema=0.999)),
    "v3-ema-zb9-lr1": Variant(R("v3", "small", 3000, lr=1e-3, ema=0.999, beta2=0.9, skip_init=True)),
    "v3-ema-z-lr1": Variant(R("v3", "small", 3000, lr=1e-3, ema=0.999, skip_init=True)),
    "v3-ema-b9-lr1": Variant(R("v3", "small", 3000, lr=1e-3, ema=0.999, beta2=0.9)),
    # stop 37: the loss and Adam's betas around the default (v3-ema-zb9 = cuetrain demo's recipe)
    "v3-ema-zb9-mse": Variant(R("v3", "small", 3000, ema=0.999, beta2=0.9, skip_init=True, loss="mse")),
    "v3-ema-zb9-psnr": Variant(R("v3", "small", 3000, ema=0.999, beta2=0.9, skip_init=True, loss="psnr")),
    "v3-ema-zb8": Variant(R("v3", "small", 3000, ema=0.999, beta1=0.8, beta2=0.8, skip_init=True)),
    "v3-ema-zb95": Variant(R("v3", "small", 3000, ema=0.999, beta1=0.95, beta2=0.95, skip_init=True)),
    "v3-ema-zb9-b1": Variant(R("v3", "small", 3000, ema=0.999, beta1=0.8, beta2=0.9, skip_init=True)),
    "v3-ema-zb9-t": Variant(R("v3", "small", 3000, ema=0.999, beta2=0.9, skip_init=True), transpose=True),
    "v3-ema-zb9-mu1": Variant(R("v3", "small", 3000, ema=0.999, beta2=0.9, skip_init=True, optimizer="muon")),
    "v3-ema-zb9-b17": Variant(R("v3", "small", 3000, ema=0.999, beta1=0.7, beta2=0.9, skip_init=True)),
    "v3-ema-zb98": Variant(R("v3", "small", 3000, ema=0.999, beta2=0.8, skip_init=True)),
}


def run_variant(v: Variant, train: list, held: list, evals: int, scale: float = 1.0, seed: int = 0,
                device: torch.device = torch.device("cpu")) -> list[tuple[float, int, float]]:
    """Train ``v`` as ``ttq.train_recipe`` does (``seed``, ``device`` as there), with its ``clip`` applied, its crops
    transposed and the ``fre`` network built (handed to ``ttq.train_averages``; nothing global is patched); returns
    the curve [(training seconds, step, held-out PSNR dB)]."""

    def built(size: str, architecture: str = "v1", skip_init: bool = False) -> torch.nn.Module:
        if size != "fre":
            return model_mod.build_model(size, architecture, skip_init)
        return model_mod.zero_residual_branches(FullResEnds()) if skip_init else FullResEnds()

    class ClippedAdam(torch.optim.Adam):
        def step(self, closure=None):  # noqa: ANN001, ANN202 - torch's signature
            params = [p for g in self.param_groups for p in g["params"] if p.grad is not None]
            torch.nn.utils.clip_grad_norm_(params, v.clip)
            return super().step(closure)

    return ttq.train_averages(v.recipe, train, held, scale, evals, "auto", seed=seed, device=device, build=built,
                              adam=ClippedAdam if v.clip else torch.optim.Adam,
                              sampler=TransposingSampler if v.transpose else CropSampler)[0]


def at_step(curve: list, step: float) -> float:
    """Held-out PSNR [dB] of ``curve`` at ``step``, linear between its evaluations (its last one past its end)."""
    for (_, s0, p0), (_, s1, p1) in zip(curve, curve[1:]):
        if s1 >= step:
            return p0 + (p1 - p0) * (step - s0) / (s1 - s0)
    return curve[-1][2]


def steps_to(curve: list, target: float) -> float | None:
    """First step at which ``curve`` reaches ``target`` dB, linear between evaluations; None if it never does."""
    for (_, s0, p0), (_, s1, p1) in zip(curve, curve[1:]):
        if p1 >= target:
            return s0 + (s1 - s0) * (target - p0) / (p1 - p0) if p1 > p0 else s1
    return None


def summary(clip: str, record: dict) -> list[str]:
    """Per variant, medians over seeds: gain at 1/3, 1/2, 2/3 and all of ``v1``'s steps, and the steps at which it
    reaches its seed's ``v1`` final gain as a fraction of ``v1``'s steps (seeds without a ``v1`` run are left out).
    ``record``: ``{"input_psnr": dB, "runs": {variant: {seed: curve}}}``. Steps, not seconds: on another device
    only the per-step quality transfers (ms/step is the device's)."""
    runs, base = record["runs"], record["input_psnr"]
    v1 = runs.get("v1", {})
    seeds = sorted(v1, key=int)
    if not seeds:
        return [f"{clip}: no v1 run to compare with"]
    total = v1[seeds[0]][-1][1]
    marks = [round(total * f) for f in (1 / 3, 1 / 2, 2 / 3, 1)]
    med = statistics.median
    lines = [f"{clip}: {len(seeds)} seed(s), v1 final gain median {med(v1[sd][-1][2] - base for sd in seeds):+.2f} dB "
             f"at {total} steps; medians over seeds (range of the steps ratio)",
             f"  {'variant':<14}" + "".join(f"  at {m:>5}" for m in marks) + "   to v1's final (x v1)  ms/step"]
    for name, per_seed in runs.items():
        common_seeds = [sd for sd in seeds if sd in per_seed]
        if not common_seeds:
            continue
        gains = [med(at_step(per_seed[sd], m) - base for sd in common_seeds) for m in marks]
        ratios = [steps_to(per_seed[sd], v1[sd][-1][2]) for sd in common_seeds]
        ratios = [r / total if r is not None else float("inf") for r in ratios]
        ms = med(c[-1][0] / c[-1][1] * 1000 for c in per_seed.values())
        lines.append(f"  {name:<14}" + "".join(f" {g:+7.2f}" for g in gains)
                     + f"   {med(ratios):5.2f} ({min(ratios):.2f}-{max(ratios):.2f})       {ms:6.1f}")
    return lines


def main(argv: list[str] | None = None, prog: str | None = None) -> None:
    """Parse ``argv`` (the arguments after the task's name) and run; ``prog`` names the command in --help."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"from {', '.join(VARIANTS)}")
    ap.add_argument("--clips", default=",".join(clips.CLIPS))
    ap.add_argument("--evals", type=int, default=15, help="held-out evaluations per run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of every variant's steps")
    ap.add_argument("--json", help="write the curves here")
    ap.add_argument("--seeds", type=int, default=1, help="seeds per variant, from --first-seed (default 1)")
    ap.add_argument("--first-seed", type=int, default=0, help="first seed (default 0: docs' single-seed figures)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda: per-step quality, not CPU seconds")
    ap.add_argument("--data", action="append", default=[], metavar="CLIP=FOLDER",
                    help="read a clip from a folder trainer.demo.extract wrote instead of decoding it (repeatable)")
    ap.add_argument("--from-json", nargs="+", help="print the summary of these --json files (merged) and exit")
    a = ap.parse_args(argv)
    if a.from_json:
        merged = merge([json.loads(Path(f).read_text()) for f in a.from_json])
        print("\n".join(line for clip, rec in merged.items() for line in summary(clip, rec)))
        return
    unknown = [n for n in a.variants.split(",") if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    model_mod.MODEL_SIZES_V2.update(VARIANT_SIZES)
    torch.set_num_threads(a.threads)
    bad = [d for d in a.data if "=" not in d or d.split("=", 1)[0] not in clips.CLIPS]
    if bad:
        raise SystemExit(f"--data {bad[0]!r}: give CLIP=FOLDER with CLIP one of {', '.join(clips.CLIPS)}")
    folders = dict(d.split("=", 1) for d in a.data)
    results: dict[str, dict] = {}
    for clip in a.clips.split(","):
        train, held = clips.load_extracted(Path(folders[clip])) if clip in folders else clips.load_clip(clip)
        base = clips.input_psnr(held)
        results[clip] = {"input_psnr": base, "runs": {}}
        for seed in range(a.first_seed, a.first_seed + a.seeds):
            for name in a.variants.split(","):
                curve = run_variant(VARIANTS[name], train, held, a.evals, a.scale, seed, torch.device(a.device))
                results[clip]["runs"].setdefault(name, {})[str(seed)] = curve
                print(f"{clip} {name} seed {seed}: final {curve[-1][2] - base:+.2f} dB in {curve[-1][0]:.0f} s "
                      f"(best {max(p for _, _, p in curve) - base:+.2f} dB)", flush=True)
                if a.json:
                    atomic_write_json(a.json, results)
        print("\n".join(summary(clip, results[clip])), flush=True)


def merge(records: list[dict]) -> dict:
    """One ``{clip: {"input_psnr", "runs": {variant: {seed: curve}}}}`` from several ``--json`` files (e.g. one per
    process of a parallel screen); older files' single-seed ``curves`` count as seed 0."""
    out: dict[str, dict] = {}
    for rec in records:
        for clip, r in ((c, r) for c, r in rec.items() if isinstance(r, dict)):  # a "what" line is not a clip
            dest = out.setdefault(clip, {"input_psnr": r["input_psnr"], "runs": {}})
            runs = r.get("runs") or {name: {"0": c} for name, c in r.get("curves", {}).items()}
            for name, per_seed in runs.items():
                dest["runs"].setdefault(name, {}).update(per_seed)
    return out


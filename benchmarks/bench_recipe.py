"""Recipes side by side: one network or recipe against another, trained on the same crops, held-out quality.

Run ``benchmarks/bench_recipe.py TASK [options]`` (``TASK --help`` lists a task's options and what it prints). Every
in-process task trains through ``common.train_loop``; ``head-start`` and ``time-budget`` run the real trainer (``cuetrain local``).

===============  ===========================================================================================
task             what it prints
===============  ===========================================================================================
matte            a matte from 12 keyframes: held-out IoU and MAE per variant (the trainer's matte model, a
                 plain U-Net, ...) and seed, and of the mean and the nearest keyframe (``lib/matte.py``)
matte-set        matte recipes on the four-shot matte evaluation set (``lib/matte_set.py``) at the farm's
                 1,000 steps: held-out IoU, edge MAE, MAE and flicker per shot, variant and seed, beside the
                 plain U-Net and the keyframe baselines (``lib/matte_recipes.py``)
upscale          upres x2 on two clips: held-out PSNR over bicubic of cuetrain's network and a plain ESPCN;
                 ms per 2K output frame (``lib/upscale.py``)
default-recipe   Muon against Adam over global batch, model size, run length and clip; ``NAME@F`` searches
                 the lr; ``--cells`` for ``gpu_default_recipe.sh`` (``lib/default_recipe.py``)
variants         a screen of recipe variants outside the product: held-out gain at fixed steps and steps to
                 v1's final gain, medians over seeds (``lib/variants.py``)
head-start       shot B from shot A's model (``--init-from``) with a third of the steps against shot B from
                 random weights, through ``cuetrain local`` (``lib/head_start.py``)
time-budget      ``--time-budget`` against a run of as many steps (held-out gain ratio, command seconds);
                 ``--stop-when-flat``'s saved steps and cost in dB, through ``cuetrain local`` (``lib/time_budget.py``)
===============  ===========================================================================================

Run (under the heavy lock on a shared host):
    flock /tmp/cuetrain-heavy.lock .venv/bin/python benchmarks/bench_recipe.py matte --seeds 0,1,2
"""

from __future__ import annotations

import importlib
import sys

import common  # noqa: F401  (puts the checkout on sys.path)

#: Task name -> the module under ``benchmarks/lib/`` that runs it (imported only when chosen: a GPU host without
#: PyAV imports only what its task needs).
TASKS = {"matte": "lib.matte", "matte-set": "lib.matte_recipes", "upscale": "lib.upscale", "default-recipe": "lib.default_recipe",
         "variants": "lib.variants", "head-start": "lib.head_start", "time-budget": "lib.time_budget"}


def main(argv: list[str] | None = None) -> int:
    """Run the task named by ``argv[0]`` with the rest of ``argv``; exit code 2 (and the task list) for a missing or
    unknown task, 0 for ``--help``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in TASKS:
        help_asked = bool(argv) and argv[0] in ("-h", "--help")
        if argv and not help_asked:
            print(f"bench_recipe.py: unknown task {argv[0]!r}; choose from {', '.join(TASKS)}", file=sys.stderr)
        print(__doc__, file=sys.stdout if help_asked else sys.stderr)
        return 0 if help_asked else 2
    importlib.import_module(TASKS[argv[0]]).main(argv[1:], prog=f"bench_recipe.py {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

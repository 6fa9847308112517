"""Support modules of the benchmarks, not scripts: the tasks of ``bench_recipe.py`` (``matte``, ``upscale``,
``default_recipe``, ``variants``, ``head_start``), the bare DDP loop ``bench_trainer.py`` launches (``bare_ddp``),
the network namespaces of ``bench_advisor.py`` (``netns``) and the plates of ``bench_plates.py`` (``plates``)."""

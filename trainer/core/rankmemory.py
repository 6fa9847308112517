"""How much memory one rank needs, as the farm counts it (RSS, ``trainer.core.procstat``): the figure the job builder
checks against a template's ``memory_mb`` and ``cuetrain advise`` reports. No torch here.

    rank memory = trainer process + --data-cache-mb + decode and crop buffers

- trainer process: the rank's RSS with no decoded frames kept, measured with ``benchmarks/bench_plates.py``
  (small model, batch 16, crop 64, 2 ranks on 4K plates, ``--data-cache-mb 0``; docs/scaling.md): about
  0.5 GiB on a CPU. On a GPU the CUDA context, cuDNN and cuBLAS add host memory; :data:`PROCESS_MB` takes
  3 GiB there, a figure not measured on this project's machines (none has a GPU): measure a GPU node with
  ``bench_plates.py`` and adjust it when one is at hand.
- ``--data-cache-mb``: decoded frames the rank keeps (``trainer.data.hostcache``); it holds no more than the shot.
- decode and crop buffers: a band of 64 rows in float32 and its conversions while decoding, crop batches,
  and on a GPU one whole image while the frames are uploaded: :data:`BUFFERS_MB`.

The host copy itself lives in the page cache behind ``pread``, which RQD does not count.
"""

from __future__ import annotations

#: The trainer process without decoded frames [MiB], by device kind (module doc).
PROCESS_MB = {"cpu": 768, "gpu": 3072}
#: Decode and crop buffers [MiB] (module doc).
BUFFERS_MB = 256


def rank_memory_mb(data_cache_mb: int, gpu: bool) -> int:
    """Memory one rank needs [MiB]: process + ``data_cache_mb`` + buffers (module doc)."""
    return PROCESS_MB["gpu" if gpu else "cpu"] + data_cache_mb + BUFFERS_MB


def largest_data_cache_mb(memory_mb: int, gpu: bool) -> int:
    """The largest ``--data-cache-mb`` that fits in ``memory_mb`` per rank [MiB] (negative: nothing fits)."""
    return memory_mb - PROCESS_MB["gpu" if gpu else "cpu"] - BUFFERS_MB

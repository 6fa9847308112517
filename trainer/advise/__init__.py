"""``cuetrain advise``: how many machines, from a measured probe and the scaling model.

Modules (its public surface; names starting with ``_`` stay inside their module):

- :mod:`trainer.advise.advisor`: ``cuetrain advise``: how many machines? A short measured probe plus the scaling
  model.
- :mod:`trainer.advise.budget`: The advisor's time budget: how the probe plans its measurements to fit it, and how
  sure its answer is (no torch).
- :mod:`trainer.advise.costmodel`: The scaling model behind ``cuetrain advise``: pure functions of measured figures
  (no torch, no I/O).
- :mod:`trainer.advise.critical_batch`: The critical batch measured directly: short trainings at global batches B, 4
  B and 16 B.
- :mod:`trainer.advise.link`: The link probe behind ``cuetrain advise link``: bandwidth and per-hop latency of the
  all-reduce.
- :mod:`trainer.advise.probe`: The compute probe behind ``cuetrain advise``, and the probe processes it shares with
  the link probe.
- :mod:`trainer.advise.progress`: What ``cuetrain advise`` shows while it measures: a progress bar on a terminal,
  JSON lines for the submit dialog.
- :mod:`trainer.advise.quality`: Steps to a fixed quality against the global batch: McCandlish et al. 2018's S(B)
  (pure functions, no torch).
"""

__all__ = [
    'advisor',
    'budget',
    'costmodel',
    'critical_batch',
    'link',
    'probe',
    'progress',
    'quality',
]

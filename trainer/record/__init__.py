"""The run directory and ``run.json``: the files shared between trainer, farm and GUI (stdlib only).

Modules (its public surface; names starting with ``_`` stay inside their module):

- :mod:`trainer.record.initsource`: ``--init-from PATH``: what PATH is, which file holds its weights, and what its
  metadata says (stdlib only).
- :mod:`trainer.record.netcheck`: Which network a recorded model is, and whether it fits a run's: the one
  compatibility check (stdlib only).
- :mod:`trainer.record.rankfailure`: A rank's structured failure record: what the node agent reads instead of
  scraping ``rank_N.log``.
- :mod:`trainer.record.recordlock`: The exclusive lock every write of ``run.json`` holds: ``fcntl.lockf`` on
  ``run.json.lock`` beside it.
- :mod:`trainer.record.rundir`: The run directory: the one contract between trainer, farm and GUI.
- :mod:`trainer.record.runrecord`: ``run.json``: the one typed, versioned record of a run, and its one state table.
- :mod:`trainer.record.sections`: The typed sections of ``run.json`` that other processes own: ``farm`` and
  ``gang``.
- :mod:`trainer.record.storage`: Riding out a full disk: ENOSPC and EDQUOT while a run writes its run directory.
"""

__all__ = [
    'initsource',
    'netcheck',
    'rankfailure',
    'recordlock',
    'rundir',
    'runrecord',
    'sections',
    'storage',
]

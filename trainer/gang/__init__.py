"""The gang: rendezvous, process group, the stop vote and gradient compression (torch.distributed).

Modules (its public surface; names starting with ``_`` stay inside their module):

- :mod:`trainer.gang.compression`: Gradient compression through DDP communication hooks
  (``torch.distributed.algorithms.ddp_comm_hooks``).
- :mod:`trainer.gang.distributed`: Process-group setup from a :class:`trainer.core.envvars.DistEnv`
  (torch.distributed, TCP rendezvous).
- :mod:`trainer.gang.formation`: Forming the gang before training, and explaining its failures afterwards.
- :mod:`trainer.gang.stopvote`: Stopping on SIGTERM/SIGINT (exit 75) and regrouping on SIGUSR1 (exit 79 at the next
  periodic checkpoint).
"""

__all__ = [
    'compression',
    'distributed',
    'formation',
    'stopvote',
]

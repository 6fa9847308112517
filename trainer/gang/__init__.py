"""The gang: rendezvous, process group, the stop vote and gradient compression (torch.distributed).

Modules (its public surface; names starting with ``_`` stay inside their module):

- :mod:`trainer.gang.compression`: Gradient compression through DDP communication hooks
  (``torch.distributed.algorithms.ddp_comm_hooks``).
- :mod:`trainer.gang.distributed`: Process-group setup from a :class:`trainer.core.envvars.DistEnv`
  (torch.distributed, TCP rendezvous).
- :mod:`trainer.gang.formation`: Forming the gang before training (rank claims, job tokens, bounded phases), and the
  errors a gang fails with.
- :mod:`trainer.gang.heartbeat`: Heartbeats during training, and naming the rank that died when a collective fails.
- :mod:`trainer.gang.stopvote`: Stopping on SIGTERM/SIGINT (exit 75) and regrouping on SIGUSR1 (exit 79 at the next
  periodic checkpoint).
"""

__all__ = [
    'compression',
    'distributed',
    'formation',
    'heartbeat',
    'stopvote',
]

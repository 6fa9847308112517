"""Supervising rank processes: the node agent's loop, the rank supervisor and ``cuetrain local`` (no torch).

Modules (its public surface; names starting with ``_`` stay inside their module):

- :mod:`trainer.agent.launch`: ``cuetrain local``: run a gang of N ranks on this machine, each exactly as a farm
  frame would.
- :mod:`trainer.agent.nodeagent`: The node agent: ONE loop that forms a gang generation, runs its ranks, and decides
  what comes next.
- :mod:`trainer.agent.progress`: What a person's terminal shows while ``cuetrain local`` or ``cuetrain demo``
  trains: one progress bar.
- :mod:`trainer.agent.supervise`: The one rank supervisor: run L trainer processes of a gang on this host, relay
  their output, stop them all together.
"""

__all__ = [
    'launch',
    'nodeagent',
    'progress',
    'supervise',
]

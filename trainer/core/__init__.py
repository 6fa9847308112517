"""Configuration, environment, exit codes, signals and timeouts, ports, addresses: stdlib, for every process.

Modules (its public surface; names starting with ``_`` stay inside their module):

- :mod:`trainer.core.allocator`: Process-level tuning of the trainer on CPU hosts.
- :mod:`trainer.core.budget`: Training time: a run length in steps, a wall-clock budget (``--time-budget``) or a
  held-out plateau (``--stop-when-flat``): the torch-free parsing.
- :mod:`trainer.core.channels`: The channels a run reads and writes (``--input-channels``, ``--target-channels``).
- :mod:`trainer.core.config`: Training configuration: one frozen dataclass, its choices and defaults, and its
  checks.
- :mod:`trainer.core.config_args`: The ``cuetrain train`` arguments and the TOML file form of ``TrainConfig``.
- :mod:`trainer.core.envvars`: Every environment variable cuetrain reads, in one table, turned into frozen values.
- :mod:`trainer.core.exitcodes`: Every exit code of ``cuetrain train``, ``cuetrain local`` and a farm frame, in one
  table.
- :mod:`trainer.core.logsetup`: Logging for every entry point (CLI, demo, farm frames), and the two line formats a
  rank prints.
- :mod:`trainer.core.netaddr`: Which IP frame 0 publishes and which interface each rank's collectives use, with no
  hand settings.
- :mod:`trainer.core.ports`: Rank 0's TCP port: reserved, never "picked free, closed and hoped for".
- :mod:`trainer.core.procstat`: What Linux says about a process's I/O and memory (``/proc``), read the way the farm
  reads it.
- :mod:`trainer.core.rankmemory`: How much memory one rank needs, as the farm counts it (RSS,
  ``trainer.core.procstat``): the figure the job builder checks against a template's ``memory_mb`` and ``cuetrain
  advise`` reports. No torch here.
- :mod:`trainer.core.stopping`: When a run stops: ``--steps`` (the cap), ``--time-budget`` and ``--stop-when-flat``,
  decided in one place (no torch).
- :mod:`trainer.core.signals`: The signal policy: what each cuetrain process does on each signal, and the exit code
  that follows.
- :mod:`trainer.core.timeouts`: The grace table: how long each process waits between SIGTERM and SIGKILL, in one
  place.
"""

__all__ = [
    'allocator',
    'budget',
    'channels',
    'config',
    'config_args',
    'envvars',
    'exitcodes',
    'logsetup',
    'netaddr',
    'ports',
    'procstat',
    'rankmemory',
    'signals',
    'stopping',
    'timeouts',
]

"""``python -m trainer TRAIN_ARGS``: one rank of a gang; how every rank process starts.

Both rank supervisors start ranks through :data:`trainer.agent.supervise.TRAINER_COMMAND` with the train
arguments appended: a farm frame's node agent (``cue_plugin.node.frame``) and ``cuetrain local``
(:mod:`trainer.agent.launch`). It runs ``cuetrain train TRAIN_ARGS`` (:mod:`trainer.cli`): the same parsing,
errors, failure record (trainer/record/rankfailure.py) and exit codes (trainer/core/exitcodes.py). One fixed command
line also lets the Runs panel find a local run's ranks in ``/proc`` (``gui/localranks.py``).

The process ends through :func:`trainer.core.signals.exit_rank`, without interpreter finalization (see there); it
dies with the supervisor that started it (:func:`trainer.core.signals.die_with_supervisor`), so a killed ``cuetrain
local`` or node agent leaves no orphaned gang writing its run directory.
"""

from __future__ import annotations

import sys
from typing import Sequence

from trainer.core.envvars import EnvError, read_agent_pid_env
from trainer.core.signals import die_with_supervisor, exit_rank


def main(argv: Sequence[str] | None = None) -> int:
    """Run one rank with ``argv`` (default ``sys.argv[1:]``) as its train arguments; returns its exit code
    (2 for a bad ``CUETRAIN_AGENT_PID``)."""
    try:
        die_with_supervisor(read_agent_pid_env())  # before the imports of torch: a second or two
    except EnvError as exc:
        print(f"cuetrain: error: {exc}", file=sys.stderr)
        return exc.exit_code
    from trainer.cli import main as cli_main  # the front door; it imports nothing of this module

    return cli_main(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    exit_rank(main)

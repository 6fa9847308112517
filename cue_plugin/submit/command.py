"""A frame's command as one POSIX shell line, and the arguments a job spec cannot carry.

Quoting. pyoutline puts a layer's ``command`` into ``<cmd>`` as is (a list is joined with single
spaces, no quoting). Cuebot replaces the ``#IFRAME#``-style tokens in that text, and RQD writes it
into a command file that ``/usr/bin/time`` executes: the file has no ``#!`` line, so ``execvp``
falls back to ``/bin/sh`` (with ``RQD_BECOME_JOB_USER``, ``su -c FILE`` runs it in the user's
shell the same way). So the command is one POSIX shell line: every argument is quoted with
:func:`shlex.quote`, which survives spaces, quotes, ``$(...)``, globs and ``;``. Arguments that
cannot survive the trip are refused: control characters (XML 1.0 cannot carry most of them and
normalizes ``\\r``), text that is not valid Unicode, and Cuebot's ``#TOKEN#`` names.

Both layers' builders use it (:mod:`cue_plugin.submit.builder`, :mod:`cue_plugin.submit.infer`).
"""

from __future__ import annotations

import shlex
from typing import Sequence

from cue_plugin.submit.spec import FarmError

#: Tokens Cuebot substitutes in a layer command (DispatchSupportService.prepareRqdRunFrame).
CUEBOT_TOKENS = ("#ZFRAME#", "#IFRAME#", "#FRAME_START#", "#FRAME_END#", "#FRAME_CHUNK#", "#LAYER#", "#JOB#",
                 "#FRAMESPEC#", "#FRAME#")


def check_argument(arg: str) -> None:
    """Refuse an argument that would not reach the frame unchanged.

    Raises:
        FarmError: control characters, invalid Unicode (e.g. undecodable file names), or a Cuebot token.
    """
    bad = [c for c in arg if ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or 0xD800 <= ord(c) < 0xE000
           or ord(c) in (0xFFFE, 0xFFFF)]
    if bad:
        raise FarmError(f"argument {arg!r} contains control or invalid characters {sorted(set(bad))!r} that a job "
                        "spec cannot carry; rename the file or folder")
    for token in CUEBOT_TOKENS:
        if token in arg:
            raise FarmError(f"argument {arg!r} contains {token}, which Cuebot would replace with a frame value; "
                            "rename the file or folder")


def shell_command(argv: Sequence[str], tokens: Sequence[str] = ("#IFRAME#",)) -> str:
    """One POSIX shell line that runs ``argv`` exactly (each argument :func:`shlex.quote`-d).

    Args:
        argv: the frame's argv.
        tokens: Cuebot tokens allowed as whole arguments (default ``#IFRAME#``, the training frame's number;
            the inference layer passes ``#FRAME_START#``/``#FRAME_END#``).

    Raises:
        FarmError: an argument fails :func:`check_argument`.
    """
    for arg in argv:
        if arg not in tokens:
            check_argument(arg)
    return " ".join(shlex.quote(a) for a in argv)

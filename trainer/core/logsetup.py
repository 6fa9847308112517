"""Logging levels for every entry point (CLI, demo, farm frames): ours at INFO, third-party at WARNING.

Libraries such as ``onnx_ir``/``onnxscript`` (about 13 INFO lines per ONNX export), ``torch`` and ``urllib3`` log
at INFO through the root logger; an artist's terminal and a frame's log should show only our progress and
anyone's warnings.
"""

from __future__ import annotations

import logging
import sys

#: Our logger trees; everything else is third-party.
OUR_LOGGERS = ("cuetrain", "trainer", "cue_plugin", "gui", "__main__")


def configure_logging(fmt: str = "%(asctime)s %(levelname)s %(name)s: %(message)s") -> None:
    """Log to stderr: the root (third-party) at WARNING, :data:`OUR_LOGGERS` at INFO. Idempotent."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format=fmt)
    logging.getLogger().setLevel(logging.WARNING)
    for name in OUR_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)

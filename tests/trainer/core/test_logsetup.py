"""configure_logging: ours at INFO, third-party (onnx_ir, torch) at WARNING, as the CLI sets it."""

import logging

from trainer.core.logsetup import OUR_LOGGERS, configure_logging


def test_third_party_info_is_hidden_and_ours_shown():
    root = logging.getLogger()
    saved = root.level, {name: logging.getLogger(name).level for name in OUR_LOGGERS}
    try:
        root.setLevel(logging.INFO)
        configure_logging()
        assert not logging.getLogger("onnx_ir.passes").isEnabledFor(logging.INFO)
        assert logging.getLogger("onnx_ir.passes").isEnabledFor(logging.WARNING)
        assert logging.getLogger("trainer.learn.train").isEnabledFor(logging.INFO)
        assert logging.getLogger("cuetrain").isEnabledFor(logging.INFO)
        assert logging.getLogger("cue_plugin.frame").isEnabledFor(logging.INFO)
    finally:
        root.setLevel(saved[0])
        for name, level in saved[1].items():
            logging.getLogger(name).setLevel(level)

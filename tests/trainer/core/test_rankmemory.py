"""What one rank needs in memory (trainer.core.rankmemory), as ``cuetrain advise`` reports it."""

import json

from tests.trainer.advise.test_advisor import make_probe
from trainer.advise import advisor as advise
from trainer.core.rankmemory import BUFFERS_MB, PROCESS_MB, largest_data_cache_mb, rank_memory_mb


def test_rank_memory_is_process_plus_data_cache_plus_buffers_and_the_largest_cache_fills_the_rest():
    assert rank_memory_mb(2048, gpu=False) == PROCESS_MB["cpu"] + 2048 + BUFFERS_MB
    assert rank_memory_mb(0, gpu=True) == PROCESS_MB["gpu"] + BUFFERS_MB
    room = largest_data_cache_mb(7680, gpu=True)
    assert rank_memory_mb(room, gpu=True) == 7680 and rank_memory_mb(room + 1, gpu=True) > 7680


def test_the_advisor_reports_the_memory_each_rank_needs_in_words_and_json(pairs, capsys, monkeypatch):
    monkeypatch.setattr(advise, "run_probe", lambda cfg, sizes, **kw: make_probe(batch_size=cfg.batch_size))
    assert advise.main(["--input", str(pairs[0]), "--target", str(pairs[1]), "--batch-size", "4", "--max-world-size",
                        "2", "--sync-intervals", "1", "--data-cache-mb", "2048", "--json"]) == 0
    out = capsys.readouterr().out
    need = PROCESS_MB["cpu"] + 2048 + BUFFERS_MB
    assert f"memory per rank: about {need} MiB to reserve (trainer process ~{PROCESS_MB['cpu']} MiB + " \
           f"--data-cache-mb 2048 + decode buffers {BUFFERS_MB} MiB)" in out
    assert json.loads(out.strip().splitlines()[-1])["rank_memory_mb"] == need

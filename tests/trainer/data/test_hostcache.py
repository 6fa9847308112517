"""The host's decoded copy of a shot (trainer.data.hostcache) and the shot's signatures (trainer.data.shot)."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import make_pairs
from trainer.data import hostcache
from trainer.data.colour import ColourSpec
from trainer.data.hostcache import HostCache, ScratchError
from trainer.data.images import DataError, write_image
from trainer.data.sequences import load_pairs, pair_frames
from trainer.data.shot import ShotChanged, list_shot

H, W = 70, 100  # not a multiple of the 64 px tile: the copy pads


@pytest.fixture
def shot_dirs(tmp_path: Path) -> tuple[Path, Path]:
    return make_pairs(tmp_path / "data", frames=3, height=H, width=W, ext="exr")


def _cache(shot_dirs, scratch: Path, cache_mb: int = 0, **kw) -> HostCache:
    return HostCache(scratch, list_shot(str(shot_dirs[0]), str(shot_dirs[1]), **kw), ColourSpec(), cache_mb)


@pytest.mark.parametrize("cache_mb", [0, 1])  # 0: every crop is read from the copy; 1 MiB: all 3 frames resident
def test_crops_and_images_of_the_copy_are_the_decoded_frames_bit_for_bit(shot_dirs, tmp_path, cache_mb):
    frames = load_pairs(pair_frames(*shot_dirs))
    cache = _cache(shot_dirs, tmp_path / "scratch", cache_mb)
    assert cache.build() == 3 and all(cache.done(k) for k in range(3))
    assert cache.load_resident() == (3 if cache_mb else 0)
    assert cache.decoded_bytes == cache.shot.bytes
    rng = np.random.default_rng(1)
    for _ in range(200):
        k, side, c = int(rng.integers(3)), int(rng.integers(2)), int(rng.integers(1, 65))
        y, x = int(rng.integers(H - c + 1)), int(rng.integers(W - c + 1))
        got = cache.crop(2 * k + side, y, x, c)
        assert got.dtype == np.float16 and np.array_equal(got, frames[k][side][y:y + c, x:x + c]), (k, side, y, x, c)
    assert np.array_equal(cache.image(3), frames[1][1])
    cache.close()


def test_a_second_process_on_the_host_reuses_the_copy_and_decodes_nothing(shot_dirs, tmp_path):
    first = _cache(shot_dirs, tmp_path / "s")
    first.build()
    second = _cache(shot_dirs, tmp_path / "s")
    assert second.folder == first.folder and second.build() == 0 and second.decoded_bytes == 0
    assert oct(second.folder.parent.stat().st_mode & 0o777) == "0o700"


def _build_in_child(dirs: tuple[str, str], scratch: str, queue: "mp.Queue") -> None:
    cache = HostCache(scratch, list_shot(*dirs), ColourSpec(), 0)
    queue.put((cache.build(start=os.getpid() % 3), cache.decoded_bytes))


def test_the_ranks_of_a_host_share_the_decoding_and_read_each_file_once(tmp_path):
    dirs = make_pairs(tmp_path / "data", frames=12, height=H, width=W, ext="exr")
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_build_in_child, args=((str(dirs[0]), str(dirs[1])), str(tmp_path / "s"), queue))
             for _ in range(3)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
    shot = list_shot(str(dirs[0]), str(dirs[1]))
    assert sum(frames for frames, _ in results) == 12  # every frame decoded by exactly one process
    assert sum(b for _, b in results) == shot.bytes  # so the host read the shot once
    cache = HostCache(tmp_path / "s", shot, ColourSpec(), 0)
    assert all(cache.done(k) for k in range(12))


def _hold_claim(folder: str, frame: int, ready: "mp.Event") -> None:
    import fcntl

    fd = os.open(Path(folder) / "claims", os.O_RDWR)
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, frame)
    ready.set()
    time.sleep(600)


def test_a_rank_that_dies_while_decoding_leaves_its_frame_to_the_others(shot_dirs, tmp_path):
    cache = _cache(shot_dirs, tmp_path / "s")
    ctx = mp.get_context("spawn")
    ready = ctx.Event()
    holder = ctx.Process(target=_hold_claim, args=(str(cache.folder), 1, ready))
    holder.start()
    assert ready.wait(60)
    t0 = time.monotonic()
    killer = ctx.Process(target=_kill_later, args=(holder.pid, 1.0))
    killer.start()
    assert cache.build() == 3  # it waited for frame 1, then decoded it itself
    assert time.monotonic() - t0 >= 0.9 and all(cache.done(k) for k in range(3))
    holder.join(10)
    killer.join(10)


def _kill_later(pid: int, delay: float) -> None:
    time.sleep(delay)
    os.kill(pid, 9)


def test_copies_nobody_uses_are_deleted_when_another_is_opened(shot_dirs, tmp_path):
    old = _cache(shot_dirs, tmp_path / "s")
    old.build()
    in_use = HostCache(tmp_path / "s", list_shot(str(shot_dirs[1]), str(shot_dirs[0])), ColourSpec(), 0)  # swapped
    old.close()
    write_image(shot_dirs[0] / "plate.1001.exr", np.zeros((H, W, 3), np.float32))  # a new shot: a new copy
    new = _cache(shot_dirs, tmp_path / "s")
    assert not old.folder.exists() and in_use.folder.exists() and new.folder.exists()


def test_scratch_too_small_names_the_sizes_and_the_fix(shot_dirs, tmp_path, monkeypatch):
    monkeypatch.setattr(hostcache.shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10, 10, 1000))
    with pytest.raises(ScratchError, match=r"has 0\.0 GiB free, but the decoded shot \(3 pairs of 100x70\) needs "
                                           r"0\.0 GiB; set CUETRAIN_SCRATCH to a larger local disk"):
        _cache(shot_dirs, tmp_path / "s")


def test_a_scratch_folder_open_to_other_users_is_refused(shot_dirs, tmp_path):
    (tmp_path / "s" / f"cuetrain-{os.getuid()}").mkdir(parents=True, mode=0o755)
    os.chmod(tmp_path / "s" / f"cuetrain-{os.getuid()}", 0o755)
    with pytest.raises(ScratchError, match="open to other users .mode 755.; decoded plates must stay private"):
        _cache(shot_dirs, tmp_path / "s")


@pytest.mark.parametrize("change, words", [
    (lambda p: p.unlink(), "was deleted"),
    (lambda p: os.truncate(p, p.stat().st_size // 2), "was truncated"),
    (lambda p: (p.write_bytes(p.read_bytes() + b"x" * 10), os.utime(p, ns=(1, 1))), "was rewritten"),
])
def test_a_file_that_changes_after_the_listing_is_a_shot_change_naming_it(shot_dirs, tmp_path, change, words):
    cache = _cache(shot_dirs, tmp_path / "s")
    victim = shot_dirs[1] / "plate.1002.exr"
    change(victim)
    with pytest.raises(ShotChanged, match=f"{victim}.*{words}"):
        cache.build()
    assert cache.shot.changes().startswith(f"{victim} {words}")


def test_an_unreadable_file_is_bad_input_unless_the_run_read_it_before(shot_dirs, tmp_path):
    victim = shot_dirs[0] / "plate.1003.exr"
    victim.write_bytes(victim.read_bytes()[:300])  # truncated before the run listed it
    with pytest.raises(DataError, match=f"cannot (read|decode) image {victim}") as info:
        _cache(shot_dirs, tmp_path / "s").build()
    assert not isinstance(info.value, ShotChanged)  # exit 2: fix the plate
    recorded = list_shot(str(shot_dirs[0]), str(shot_dirs[1])).record()
    with pytest.raises(ShotChanged, match="this run read it before"):  # --resume: it was readable once
        _cache(shot_dirs, tmp_path / "s2", recorded=recorded).build()


def test_resuming_keeps_the_recorded_frames_and_names_the_ones_that_are_gone(shot_dirs, tmp_path):
    recorded = list_shot(str(shot_dirs[0]), str(shot_dirs[1])).record()
    write_image(shot_dirs[0] / "plate.1009.exr", np.zeros((H, W, 3), np.float32))  # added since: left out
    write_image(shot_dirs[1] / "plate.1009.exr", np.zeros((H, W, 3), np.float32))
    assert [p.frame for p in list_shot(str(shot_dirs[0]), str(shot_dirs[1]), recorded).pairs] == [1001, 1002, 1003]
    (shot_dirs[1] / "plate.1002.exr").unlink()  # one side only: not a pairing error here, a change
    with pytest.raises(ShotChanged, match=r"1 file\(s\) of the shot this run trained on are gone from the file server: "
                                          rf"{shot_dirs[1] / 'plate.1002.exr'}; restore them"):
        list_shot(str(shot_dirs[0]), str(shot_dirs[1]), recorded)
    for side in shot_dirs:
        (side / "plate.1002.exr").unlink(missing_ok=True)
    with pytest.raises(ShotChanged, match=rf"2 file\(s\) .*: {shot_dirs[0] / 'plate.1002.exr'}, "
                                          rf"{shot_dirs[1] / 'plate.1002.exr'}; restore"):
        list_shot(str(shot_dirs[0]), str(shot_dirs[1]), recorded)


def test_bad_pixels_keep_the_messages_of_read_image(shot_dirs, tmp_path):
    bad = np.zeros((H, W, 3), np.float32)
    bad[65, 3] = np.nan  # one pixel (3 values) in the second band of rows
    write_image(shot_dirs[1] / "plate.1001.exr", bad)
    with pytest.raises(DataError, match=r"plate\.1001\.exr has 3 NaN or infinite values in rows 64-69"):
        _cache(shot_dirs, tmp_path / "s").build()


def test_a_frame_of_another_size_names_the_first_frame(shot_dirs, tmp_path):
    write_image(shot_dirs[1] / "plate.1003.exr", np.zeros((H, W + 2, 3), np.float32))
    with pytest.raises(DataError, match=r"plate\.1003\.exr is 102x70 but the first frame 1001 \(.*\) is 100x70"):
        _cache(shot_dirs, tmp_path / "s").build()

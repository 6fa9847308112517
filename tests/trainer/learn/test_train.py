"""The training loop: DDP correctness, sync interval, resume, outputs of rank 0."""

from __future__ import annotations

import json
from dataclasses import replace
import logging
import math
import os
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli
from trainer.learn import run_writer as outputs_mod
from trainer.learn import train as train_mod
from trainer.core.config import ConfigError, TrainConfig
from trainer.core.envvars import DistEnv, read_dist_env
from trainer.learn.model import build_model
from trainer.learn.run_writer import load_latest_checkpoint
from trainer.record.rundir import RunPaths, read_metrics

NON_DIST = DistEnv(distributed=False, missing=("COPYCAT_MAIN_ADDR",))


def cfg(pairs, run_dir, **kw) -> TrainConfig:
    base = dict(input_dir=str(pairs[0]), target_dir=str(pairs[1]), run_dir=str(run_dir), steps=8, batch_size=4,
                crop_size=16, checkpoint_interval=4, contact_sheet_interval=4, log_interval=2, warmup_steps=2)
    base.update(kw)
    return TrainConfig(**base)


def final_weights(run_dir) -> dict[str, torch.Tensor]:
    ckpt = load_latest_checkpoint(RunPaths.of(run_dir))
    assert ckpt is not None, f"no checkpoint in {run_dir}"
    return ckpt["model"]


def assert_same_weights(a, b, atol=1e-6):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=atol, rtol=1e-5), k


def assert_mixed_precision_match(w1, w2, c: TrainConfig, rel: float = 0.02) -> None:
    """2 ranks vs 1 rank under bf16/fp16 autocast: the same training up to 16-bit rounding.

    With autocast each rank's weight gradients are rounded to 16 bits before DDP adds them, so the
    2-rank gradient (two rounded halves) and the 1-rank one (one rounded sum) differ by about one
    rounding, relative 2**-8 for bf16 (8 significant bits; fp16 has 11). Adam's update
    ``lr x m/sqrt(v)`` is scale-free, so where a gradient is near zero that rounding can flip an
    update's sign: per weight the runs can differ by up to ``2 x sum(lr_t)`` (the hard bound
    checked first). In aggregate the rounding is small: the difference of the two runs must be
    under ``rel`` (2%) of how far training moved the weights, where a wrong crop split or a missing
    all-reduce gives differences of the order of the whole update (100%).
    """
    peak = train_mod.effective_lr(c, 1)
    bound = 2 * sum(train_mod.lr_at(u, c.steps, peak, c.warmup_steps, floor=c.cosine_floor) for u in range(c.steps))
    torch.manual_seed(c.seed)
    w0 = build_model(c.model_size, c.architecture_name).state_dict()
    assert_same_weights(w1, w2, atol=bound)
    flat = lambda w: torch.cat([w[k].flatten() for k in sorted(w)])  # noqa: E731
    moved, diff = (flat(w1) - flat(w0)).norm(), (flat(w2) - flat(w1)).norm()
    print(f"{c.precision}: |w2 - w1| / |w1 - w0| = {float(diff / moved):.5f}")
    assert diff <= rel * moved, f"2 ranks differ from 1 rank by {float(diff / moved):.1%} of the update"


@pytest.mark.parametrize("sync, precision, optimizer", [(1, "fp32", "adam"), (2, "fp32", "adam"),
                                                      (1, "bf16", "adam"), (1, "fp16", "adam"), (1, "fp32", "muon")])
def test_two_ranks_equal_one_rank_with_the_same_global_batch(pairs, tmp_path, sync, precision, optimizer, caplog):
    """2 ranks x B crops with DDP == 1 rank x 2B crops fed the same crops (allclose weights), in each precision
    and with ``--optimizer muon`` (whose Newton-Schulz iterations run in bf16: compared as 16-bit runs are, within
    5% of the update instead of 2%; a wrong crop split or a missing all-reduce is ~100%).

    The 1-rank reference trains in this process (``train`` with the environment read as a rank reads it:
    only ``COPYCAT_SYNC_INTERVAL`` set); the 2 ranks are ``cuetrain local``'s processes. Under 16-bit
    autocast the 1-rank run splits every step in two halves (``noise_interval=1``), so its gradient is
    rounded as the two ranks' is (two rounded halves, added); in one pass (the default between noise
    samples) the rounding differs and the runs drift apart by ~3.5% of the update in 6 steps (bf16)."""
    split = {} if precision == "fp32" else {"noise_interval": 1}
    c = cfg(pairs, tmp_path / "one", steps=6, checkpoint_interval=6, precision=precision, optimizer=optimizer,
            **split)
    with caplog.at_level(logging.INFO, logger="trainer"):
        train_mod.train(c, read_dist_env({"COPYCAT_SYNC_INTERVAL": str(sync)}))
    assert "training non-distributed: COPYCAT_MAIN_ADDR, COPYCAT_MAIN_PORT, COPYCAT_RANK, COPYCAT_WORLD_SIZE not set" \
        in caplog.text
    assert f"precision {precision} (set by --precision), memory format channels_last" in caplog.text
    two_dir = tmp_path / "two"
    verbose = ["-v"] if sync == 2 else []  # one run shows every rank line; the others one progress bar
    two = run_cli("local", "--world-size", "2", "--sync-interval", str(sync), *verbose,
                  *cfg(pairs, two_dir, steps=6, checkpoint_interval=6, precision=precision,
                       optimizer=optimizer).to_argv())
    assert two.returncode == 0, two.stdout + two.stderr
    assert "[Step:6/6]" in RunPaths.of(two_dir).rank_log(1).read_text()  # the log files get every line
    if verbose:
        assert "[rank 1] [Step:6/6]" in two.stdout and " INFO [rank 1] " in two.stdout
    else:
        assert "[Step:" not in two.stdout and " INFO " not in two.stdout + two.stderr, two.stdout + two.stderr
        assert "6/6" in two.stderr  # the progress bar's last line (a plain line: stderr is not a terminal)
    w1, w2 = final_weights(tmp_path / "one"), final_weights(two_dir)
    if precision == "fp32" and optimizer == "adam":
        assert_same_weights(w1, w2)
    else:  # Muon: fp32 gradients that differ in the last bits round to different bf16 in its Newton-Schulz
        # iterations, which amplify the matrices' small singular directions: 1.95% of the update measured
        assert_mixed_precision_match(w1, w2, c, rel=0.02 if optimizer == "adam" else 0.05)
    assert not torch.equal(w1["tail.weight"], torch.zeros_like(w1["tail.weight"]))  # it trained
    assert all(v.dtype == torch.float32 for v in w2.values())  # master weights stay float32
    record = json.loads(RunPaths.of(two_dir).run_json.read_text())
    assert record["world_size"] == 2
    assert record["precision"] == {"precision": precision, "requested": precision, "device": "cpu",
                                   "reason": "set by --precision"}
    if optimizer == "muon":  # the Newton-Schulz dtype this CPU multiplies fast (trainer.learn.optim)
        from trainer.learn.optim import orthogonalisation_dtype

        ns = str(orthogonalisation_dtype(torch.device("cpu"))).removeprefix("torch.")
        assert record["optimizer"] == {"name": "muon", "requested": "muon", "reason": "--optimizer muon",
                                       "newton_schulz": ns}


@pytest.mark.parametrize("compression", ["fp16", "powersgd"])
def test_compression_hooks_work_under_bf16_autocast(pairs, tmp_path, compression):
    """Autocast leaves the gradients float32, so the fp16 and PowerSGD hooks get the buckets they expect."""
    c = cfg(pairs, tmp_path / "run", steps=4, checkpoint_interval=4, precision="bf16", grad_compression=compression)
    two = run_cli("local", "--world-size", "2", *c.to_argv())
    assert two.returncode == 0, two.stdout + two.stderr
    logs = [RunPaths.of(tmp_path / "run").rank_log(r).read_text() for r in (0, 1)]  # the ranks' INFO records
    assert all(f"gradient compression: {compression}" in log for log in logs)
    rows = read_metrics(RunPaths.of(tmp_path / "run"))
    assert [r["step"] for r in rows] == [2, 4] and all(0 < r["loss"] < 1 for r in rows)
    assert all(v.dtype == torch.float32 for v in final_weights(tmp_path / "run").values())


def test_mixed_precision_short_run_matches_fp32_loss(pairs, tmp_path):
    """Quality parity in a short run: bf16 autocast logs the same losses as fp32 within 2% at every
    logged step (the full demo comparison is benchmarks/studies/bench_quality.py)."""
    base = dict(steps=30, batch_size=4, crop_size=24, warmup_steps=5, log_interval=10, lr=3e-3)
    runs = {p: train_mod.train(cfg(pairs, tmp_path / p, precision=p, **base), NON_DIST) for p in ("fp32", "bf16")}
    losses = {p: [r["loss"] for r in read_metrics(RunPaths.of(tmp_path / p))] for p in runs}
    assert len(losses["fp32"]) == 3
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.02)
    assert runs["bf16"].model.tail.weight.abs().max() > 0  # it trained
    assert all(p.dtype == torch.float32 for p in runs["bf16"].model.parameters())  # master weights


def test_sync_interval_changes_the_result(pairs, tmp_path):
    a = train_mod.train(cfg(pairs, tmp_path / "a"), NON_DIST)
    b = train_mod.train(cfg(pairs, tmp_path / "b"), DistEnv(distributed=False, sync_interval=2))
    assert not torch.equal(a.model.tail.weight, b.model.tail.weight)


def _crash_after_step_4(monkeypatch, config: TrainConfig) -> None:
    """Train ``config`` until its step-4 checkpoint is written, then fail as a lost node would."""
    original = train_mod._Loop._outputs

    def crash_after_step_4(self, step, update):
        original(self, step, update)
        if step == 4:
            self.writer.flush()
            raise RuntimeError("simulated node loss")

    monkeypatch.setattr(train_mod._Loop, "_outputs", crash_after_step_4)
    with pytest.raises(RuntimeError, match="simulated node loss"):
        train_mod.train(config, NON_DIST)
    monkeypatch.setattr(train_mod._Loop, "_outputs", original)


@pytest.mark.parametrize("optimizer", ["adam", "muon"])
def test_resume_continues_to_the_same_result(pairs, tmp_path, monkeypatch, optimizer):
    straight = train_mod.train(cfg(pairs, tmp_path / "straight", optimizer=optimizer), NON_DIST)
    _crash_after_step_4(monkeypatch, cfg(pairs, tmp_path / "resumed", optimizer=optimizer))
    record = json.loads(RunPaths.of(tmp_path / "resumed").run_json.read_text())
    assert record["state"] == "failed" and "simulated node loss" in record["error"]
    resumed = train_mod.train(cfg(pairs, tmp_path / "resumed", resume=True, optimizer=optimizer), NON_DIST)
    assert resumed.start_step == 4 and resumed.step == 8
    for (k, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), k
    record = json.loads(RunPaths.of(tmp_path / "resumed").run_json.read_text())
    assert [a["start_step"] for a in record["attempts"]] == [0, 4] and record["state"] == "succeeded"
    steps = [r["step"] for r in read_metrics(RunPaths.of(tmp_path / "resumed"))]
    assert steps == [2, 4, 6, 8]


def test_a_run_in_flight_when_auto_changed_resumes_with_its_checkpoints_optimizer(pairs, tmp_path, monkeypatch):
    """A colour run written by Adam (auto's old choice; the command line omits the default) resumes under
    ``--optimizer auto``, which now picks Muon, with Adam and Adam's lr: bit for bit the run that never stopped.
    An explicit ``--optimizer muon`` is still refused."""
    straight = train_mod.train(cfg(pairs, tmp_path / "straight", optimizer="adam"), NON_DIST)
    _crash_after_step_4(monkeypatch, cfg(pairs, tmp_path / "resumed", optimizer="adam"))
    assert cfg(pairs, tmp_path / "resumed").optimizer_name == "muon"  # what auto picks for a new colour run
    with pytest.raises(ConfigError, match=r"trained with --optimizer adam, but --optimizer is muon"):
        train_mod.train(cfg(pairs, tmp_path / "resumed", resume=True, optimizer="muon"), NON_DIST)
    resumed = train_mod.train(cfg(pairs, tmp_path / "resumed", resume=True), NON_DIST)
    assert resumed.start_step == 4 and resumed.step == 8
    for (k, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), k
    record = json.loads(RunPaths.of(tmp_path / "resumed").run_json.read_text())
    assert record["state"] == "succeeded" and record["config"]["optimizer_name"] == "adam"
    assert record["optimizer"] == {"name": "adam", "requested": "auto", "reason": "auto: resumed with adam, the "
                                   "optimizer of the checkpoint (auto picks muon for a new run)"}
    fresh = json.loads(RunPaths.of(tmp_path / "straight").run_json.read_text())["optimizer"]
    assert fresh == {"name": "adam", "requested": "adam", "reason": "--optimizer adam"}


def test_rank0_outputs_follow_the_run_directory_contract(pairs, tmp_path):
    from trainer.data.images import read_image

    run = RunPaths.of(tmp_path / "run")
    result = train_mod.train(cfg(pairs, run.root, steps=12, keep_checkpoints=2, noise_interval=1), NON_DIST)
    record = json.loads(run.run_json.read_text())
    assert record["state"] == "succeeded" and record["world_size"] == 1
    assert record["config"]["steps"] == 12 and "torch" in record["versions"] and record["started_at"]
    assert record["config"]["base_lr"] == cfg(pairs, run.root).base_lr  # the lr in use, also without --lr
    assert record["config"]["cosine_floor"] == cfg(pairs, run.root).cosine_floor  # where its cosine ends
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [2, 4, 6, 8, 10, 12]
    assert set(rows[0]) - {"noise_scale"} == {"step", "loss", "lr", "images_per_s", "wall_s"}
    noise = [r["noise_scale"] for r in rows if "noise_scale" in r]  # trainer.learn.noise_scale: B_simple [crops]
    assert noise and all(math.isfinite(v) and v > 0 for v in noise)
    assert [s for s, _ in run.list_contact_sheets()] == [4, 8, 12]
    sheet = read_image(run.contact_sheet(12))
    cell = 16 * outputs_mod.sheet_scale(16)  # crops enlarged so the column labels fit
    assert sheet.shape == (outputs_mod.SHEET_HEADER + 3 * cell + 4, 3 * cell + 4, 3)  # 3 crops x 3 columns
    assert [s for s, _ in run.list_checkpoints()] == [8, 12]  # keep last 2
    assert [(s, p.read_bytes()) for s, p in run.list_checkpoint_copies()] == [  # each with its second copy
        (s, p.read_bytes()) for s, p in run.list_checkpoints()]
    scripted = torch.jit.load(str(run.model))
    assert all(p.dtype == torch.float32 and p.is_contiguous() for p in scripted.parameters())  # hosts expect fp32
    x = torch.rand(1, 3, 29, 41)
    ema = build_model("small", "v3")  # model.pt holds the default EMA of the weights (--ema-decay 0.999)
    ema.load_state_dict(load_latest_checkpoint(run)["ema"]["model"])
    with torch.no_grad():
        assert torch.allclose(scripted(x), ema(x), atol=1e-6)
        assert not torch.allclose(scripted(x), result.model(x), atol=1e-6)  # not the last weights
    meta = json.loads(run.model_meta.read_text())
    assert meta["model_size"] == "small" and meta["step"] == 12 and meta["parameters"] == 252_627  # v3 small
    assert record["precision"]["requested"] == "auto" and record["precision"]["precision"] == meta["trained_precision"]


@pytest.mark.parametrize("interval, split_updates", [(1, 8), (3, 3), (0, 0)])
def test_one_rank_splits_a_step_for_the_noise_scale_every_noise_interval_updates(pairs, tmp_path, monkeypatch,
                                                                                 interval, split_updates):
    """--noise-interval: a split step runs the network twice (two halves); 8 steps at interval 3 split
    updates 0, 3 and 6 only, and at 0 none (no noise scale is measured)."""
    passes = []
    real_loss = train_mod.per_crop_loss

    def counting_loss(out, target, *args):  # the loss of each forward pass (the identity loss's input needs no grad)
        if out.requires_grad:
            passes.append(out.shape[0])
        return real_loss(out, target, *args)

    monkeypatch.setattr(train_mod, "per_crop_loss", counting_loss)
    run = RunPaths.of(tmp_path / "run")
    train_mod.train(cfg(pairs, run.root, noise_interval=interval, ema_decay=0.0), NON_DIST)
    assert len(passes) == 8 + split_updates
    assert sum(passes) == 8 * 4  # every crop once: the halves of a split step are the batch
    noise = [r["noise_scale"] for r in read_metrics(run) if "noise_scale" in r]
    if interval == 0:
        assert noise == []
    if interval == 1:  # a sample every update: positive estimates from the first windows on
        assert noise and all(v > 0 for v in noise)


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)  # as the fault soak does (benchmarks/lib/soak_local.py)


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside a tensor's bytes: torch.load alone loads it silently
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_truncate, _flip_a_byte])
def test_a_damaged_newest_checkpoint_is_taken_from_its_second_copy(pairs, tmp_path, caplog, damage):
    """The newest checkpoint damaged after it landed: the resume takes the same step from ``checkpoints/copy/``
    (trainer.record.ckptcopies), not the step before (a whole interval more lost); both copies damaged: the step
    before, as before the copies."""
    run = RunPaths.of(tmp_path / "run")
    train_mod.train(cfg(pairs, run.root), NON_DIST)
    intact = torch.load(run.checkpoint(8), weights_only=True)["model"]
    damage(run.checkpoint(8))
    with caplog.at_level(logging.WARNING, logger="trainer.learn.run_writer"):
        ckpt = load_latest_checkpoint(run)
    assert ckpt["step"] == 8
    assert_same_weights(ckpt["model"], intact, atol=0)
    assert f"skipping damaged checkpoint {run.checkpoint(8)} (step 8)" in caplog.text
    damage(run.checkpoint_copy(8))
    assert load_latest_checkpoint(run)["step"] == 4


def test_a_resume_after_the_newest_checkpoint_was_truncated_continues_from_its_step(pairs, tmp_path, monkeypatch):
    """A crash after step 4, checkpoint 4 truncated: ``--resume`` starts at step 4 from its copy, not from
    scratch (no checkpoint before it), and ends where the run that never stopped ends."""
    straight = train_mod.train(cfg(pairs, tmp_path / "straight", optimizer="adam"), NON_DIST)
    _crash_after_step_4(monkeypatch, cfg(pairs, tmp_path / "resumed", optimizer="adam"))
    run = RunPaths.of(tmp_path / "resumed")
    _truncate(run.checkpoint(4))
    resumed = train_mod.train(cfg(pairs, run.root, resume=True, optimizer="adam"), NON_DIST)
    assert resumed.start_step == 4 and resumed.step == 8
    assert_same_weights(straight.model.state_dict(), resumed.model.state_dict(), atol=0)


def test_rank0_removes_the_temp_files_a_killed_write_left_and_nothing_else(pairs, tmp_path, caplog):
    """A SIGKILL while rank 0 writes a checkpoint leaves ``.step_NNNNNN.pt.XXXXXXXX.tmp`` (``atomic_write_bytes``);
    the next start removes such files where rank 0 writes, and keeps every other file."""
    import tempfile

    run = RunPaths.of(tmp_path / "run")
    run.create()

    def temp_of(target):  # the name atomic_write_bytes gives the temp file of ``target``
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        return Path(name)

    stale = [temp_of(run.checkpoint(175)), temp_of(run.contact_sheet(4)), temp_of(run.run_json), temp_of(run.model)]
    kept = [temp_of(run.lease), temp_of(run.rank_failure(1)), run.checkpoints / "notes.tmp",
            run.root / ".hidden.tmp", run.checkpoints / "step_000175.pt.abcdefgh.tmp"]
    for path in kept[2:]:
        path.write_bytes(b"not cuetrain's temp file")
    with caplog.at_level(logging.INFO, logger="trainer.record.recordlock"):
        train_mod.train(cfg(pairs, run.root, steps=2, checkpoint_interval=2, contact_sheet_interval=2, log_interval=1,
                            warmup_steps=1), NON_DIST)
    assert [p for p in stale if p.exists()] == []
    assert [p for p in kept if not p.exists()] == []
    assert all(str(p) in caplog.text for p in stale)


def test_the_default_lr_follows_the_model_size_and_the_optimizer():
    """Without --lr, Adam's wider networks take smaller steps (trainer.core.recipe.DEFAULT_LR: medium and large
    diverged at 1e-3 with Adam on a GPU, docs/scaling.md); Muon, the default on colour tasks at every size, takes its
    own (DEFAULT_MUON_LR, searched per size); --lr overrides both and travels in the frames' command lines."""
    for size, adam, muon in (("small", 1e-3, 2e-3), ("medium", 5e-4, 2e-3), ("large", 1e-4, 1.6e-3)):
        c = TrainConfig("i", "t", "r", model_size=size, batch_size=32)
        assert c.lr is None and c.optimizer_name == "muon"
        assert c.base_lr == pytest.approx(muon)
        assert train_mod.effective_lr(c, 1) == pytest.approx(2 * muon)  # sqrt(32 / 8) x the size's lr
        assert "--lr" not in c.to_argv() and "--optimizer" not in c.to_argv()
        assert TrainConfig("i", "t", "r", model_size=size, optimizer="adam").base_lr == adam
        assert TrainConfig("i", "t", "r", model_size=size, target_channels="A").base_lr == muon  # a matte: Muon too
    c = TrainConfig("i", "t", "r", model_size="large", lr=3e-4)
    assert c.base_lr == 3e-4 and c.to_argv()[-2:] == ["--lr", "0.0003"]


def test_a_colour_head_start_takes_its_own_default_lr_where_it_was_measured():
    """HEAD_START_MUON_LR: --init-from on colour at scale 1, v3 small with Muon, trains at 3e-3 without --lr
    (docs/studies/head_start.md); what was not measured keeps the size's default, and --lr wins."""
    def lr(**kw) -> float:
        return TrainConfig("i", "t", "r", init_from="earlier_run", **kw).base_lr

    assert lr() == 3e-3 and TrainConfig("i", "t", "r").base_lr == 2e-3
    assert [lr(model_size="medium"), lr(target_channels="A"), lr(target_channels="R,G,B,A"), lr(scale=2)] == [2e-3] * 4
    assert (lr(optimizer="adam"), lr(lr=1e-3)) == (1e-3, 1e-3)
    assert "--lr" not in TrainConfig("i", "t", "r", init_from="earlier_run").to_argv()


def test_muon_ends_its_cosine_where_it_was_measured_by_job_and_the_rest_at_a_tenth():
    """MUON_LR_FLOOR (docs/studies/lr_floor.md), v3/unet small with Muon: repair (colour at scale 1, from random
    weights or a head start) and mattes 0.3, upres 0.5; what was not measured (mixed targets, Adam, other sizes) keeps
    0.1; --lr-floor wins."""
    def floor(**kw) -> float:
        return TrainConfig("i", "t", "r", **kw).cosine_floor

    assert (floor(), floor(init_from="earlier_run"), floor(lr=1e-3), floor(target_channels="A")) == (0.3,) * 4
    assert (floor(scale=2), floor(scale=4)) == (0.5, 0.5)
    assert floor(target_channels="R,G,B,A") == 0.3
    assert [floor(target_channels="R,G,B,A", optimizer="adam"), floor(optimizer="adam"), floor(target_channels="A", optimizer="adam"),
            floor(scale=2, optimizer="adam"), floor(model_size="medium"), floor(scale=2, model_size="large")] == [0.1] * 6
    assert floor(lr_floor=0.0) == 0.0 and "--lr-floor" not in TrainConfig("i", "t", "r").to_argv()
    assert [TrainConfig("i", "t", "r", **kw).recipe_job for kw in ({}, {"scale": 2}, {"target_channels": "A"},
                                                                  {"target_channels": "R,G,B,A"})] == [
        "repair", "upres", "matte", "mixed"]


def test_auto_picks_muon_for_colour_and_for_mattes_with_its_beta2_and_says_why():
    colour, matte = TrainConfig("i", "t", "r"), TrainConfig("i", "t", "r", target_channels="A")
    both = TrainConfig("i", "t", "r", target_channels="R,G,B,A")
    assert [(c.optimizer_name, c.beta2, c.base_lr) for c in (colour, matte, both)] == [("muon", 0.9, 2e-3)] * 3
    assert "matte_set.md" in matte.optimizer_reason and "matte_set.md" not in colour.optimizer_reason
    assert (matte.matte_loss, TrainConfig("i", "t", "r", target_channels="A", optimizer="adam").optimizer_name) == (
        "bce+l1", "adam")
    assert TrainConfig("i", "t", "r", scale=2).optimizer_name == "muon"
    pinned = TrainConfig("i", "t", "r", optimizer="adam", adam_beta2=0.9)
    assert (pinned.optimizer_name, pinned.beta2, pinned.to_argv()) == ("adam", 0.9, [
        "--input", "i", "--target", "t", "--run-dir", "r", "--optimizer", "adam", "--adam-beta2", "0.9"])


def test_lr_schedule_is_sqrt_scaled_warmed_up_and_decayed():
    c = TrainConfig("i", "t", "r", batch_size=16, lr=1e-3, lr_reference_batch=8)
    peak = train_mod.effective_lr(c, sync_interval=2)
    assert peak == pytest.approx(2e-3)  # 16 crops x 2 steps per update = 4x the reference batch: sqrt(4) x lr
    assert train_mod.effective_lr(replace(c, lr_scaling="linear"), 2) == pytest.approx(4e-3)  # Goyal et al.'s rule
    assert train_mod.effective_lr(replace(c, lr_scaling="none"), 2) == pytest.approx(1e-3)
    assert train_mod.effective_lr(replace(c, batch_size=8), 1) == pytest.approx(1e-3)  # the reference batch: lr
    assert train_mod.lr_at(0, 100, peak, 10) == pytest.approx(2e-4)
    assert train_mod.lr_at(10, 100, peak, 10) == pytest.approx(peak)
    assert train_mod.lr_at(100, 100, peak, 10) == pytest.approx(2e-4)


def test_the_cosine_ends_at_the_lr_floor_and_a_bad_floor_is_refused():
    """``--lr-floor``: the cosine falls from the peak to ``peak x floor`` (warmup untouched); outside 0..1 is refused
    with the field's name."""
    assert train_mod.lr_at(100, 100, 1.0, 10, floor=0.3) == pytest.approx(0.3)
    assert train_mod.lr_at(55, 100, 1.0, 10, floor=0.3) == pytest.approx(0.65)  # half way down the cosine
    assert train_mod.lr_at(100, 100, 1.0, 10, floor=0.0) == 0.0
    assert train_mod.lr_at(0, 100, 1.0, 10, floor=0.3) == pytest.approx(0.1)  # the warmup's start is its own
    c = TrainConfig("i", "t", "r", lr_floor=0.5)
    assert c.cosine_floor == 0.5 and c.to_argv()[-2:] == ["--lr-floor", "0.5"]
    for bad in (-0.1, 1.5):
        with pytest.raises(ConfigError, match=f"lr_floor={bad} must be a fraction of the peak lr from 0 to 1"):
            TrainConfig("i", "t", "r", lr_floor=bad)


def test_same_input_and_ground_truth_folder_warns_at_the_start(tmp_path):
    from tests.conftest import make_pairs, run_cli

    inp, _ = make_pairs(tmp_path / "data")
    result = run_cli("train", "--input", str(inp), "--target", str(inp), "--run-dir", str(tmp_path / "run"),
                     "--steps", "1", "--batch-size", "2", "--crop-size", "16", "--precision", "fp32")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "WARNING" in result.stderr and "Input and Ground Truth are the same folder" in result.stderr

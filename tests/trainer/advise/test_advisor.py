"""The scaling advisor: the model (pure), the probe, the link fit and the CLI."""

from __future__ import annotations

import contextlib
import math
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.advise import advisor as advise
from trainer.advise import link as advise_link
from trainer.advise import probe as advise_probe
from trainer.advise.budget import ProbeSettings
from trainer.advise.link import fit_link
from trainer.advise.probe import monotone, probe_batches, run_probe
from trainer.advise.costmodel import Prediction, Probe, allreduce_seconds, format_table, predict, recommend
from trainer.core.config import TrainConfig


def make_probe(**kw) -> Probe:
    base = dict(model_size="small", parameters=169_843, crop_size=64, batch_size=8, compression="none",
                fb_s=((1, 0.010), (2, 0.014), (4, 0.022), (8, 0.038)), optimizer_s=0.004, contact_sheet_s=0.05,
                checkpoint_s=0.1, contact_sheet_interval=100, checkpoint_interval=250, sync_bytes=679_372,
                sync_calls=1, log_interval=25)
    base.update(kw)
    return Probe(**base)


def test_allreduce_time_is_the_ring_formula():
    assert allreduce_seconds(1, 1e9, 3, 10, 1e-3) == 0.0  # one rank runs without DDP
    # 2(N-1)/N x 1 GB at 8 Gb/s = 1 s for N = 2, plus 2 (N-1) hops of 1 ms
    assert allreduce_seconds(2, 1e9, 1, 8, 1e-3) == pytest.approx(1.0 + 0.002)
    assert allreduce_seconds(4, 1e9, 2, 8, 0) == pytest.approx(1.5)


def test_predict_models_the_trainers_step():
    probe = make_probe()
    preds = {(p.world_size, p.sync_interval): p for p in predict(probe, [1, 2, 3], [1, 4], 1.0, 1e-4)}
    outputs = 0.05 / 100 + 0.1 / 250
    one = preds[(1, 1)]
    assert one.step_s == pytest.approx(0.038 + 0.004 + outputs)
    assert one.images_per_s == pytest.approx(8 / one.step_s) and one.efficiency == pytest.approx(1.0)
    three = preds[(3, 4)]  # ceil(8/3) = 3 crops: interpolated between 2 and 4
    sync = 2 * 2 / 3 * 679_372 * 8 / 1e9 + 2 * 2 * 1e-4
    log_ar = (2 * 2 / 3 * 16 * 8 / 1e9 + 2 * 2 * 1e-4) / 25
    assert three.per_rank_batch == 3
    assert three.step_s == pytest.approx(0.018 + 0.004 / 4 + outputs + sync / 4 + log_ar)
    assert three.speedup == pytest.approx(three.images_per_s / one.images_per_s)
    assert three.efficiency == pytest.approx(three.speedup / 3)


def test_predict_leaves_out_world_sizes_above_the_batch():
    assert {p.world_size for p in predict(make_probe(batch_size=2), range(1, 5), [1])} == {1, 2}
    with pytest.raises(ValueError):
        predict(make_probe(), [0, 1], [1])
    with pytest.raises(ValueError):
        predict(make_probe(), [1], [1], bandwidth_gbps=0)


def test_a_slow_link_makes_sync_intervals_pay_off():
    fast = predict(make_probe(), [2], [1, 8], bandwidth_gbps=100)
    slow = predict(make_probe(), [2], [1, 8], bandwidth_gbps=0.1)
    assert fast[0].efficiency > 0.75 and slow[0].efficiency < 0.5
    assert slow[1].images_per_s > 2 * slow[0].images_per_s


def pred(n: int, k: int, ips: float) -> Prediction:
    return Prediction(n, k, 1, 0.0, 0.0, 1 / ips, ips, ips / 100, ips / 100 / n)


def test_recommend_takes_the_fewest_ranks_near_the_best_efficient_setting():
    preds = [pred(1, 1, 100), pred(2, 1, 190), pred(2, 4, 195), pred(4, 1, 330), pred(4, 4, 370), pred(8, 4, 390),
             pred(8, 1, 380)]
    # efficiency >= 0.7 leaves out 8 ranks (0.49); best is 4 ranks / sync 4 (370); 4/1 (330) is > 5% below
    assert recommend(preds, 0.7) == pred(4, 4, 370)
    assert recommend(preds, 0.45) == pred(8, 1, 380)  # 380 is within 5% of 390: sync 1 preferred
    assert recommend([pred(2, 1, 120)], 0.9) == pred(2, 1, 120)  # nothing qualifies: fewest ranks
    with pytest.raises(ValueError):
        recommend([])


def test_format_table_has_a_row_per_world_size_and_marks_the_choice():
    preds = predict(make_probe(), [1, 2, 4], [1, 2, 4, 8])
    chosen = recommend(preds)
    text = format_table(preds, chosen)
    lines = text.splitlines()
    assert "sync 1" in lines[0] and "sync 8" in lines[0] and "images/s" in lines[1]
    assert [int(line.split()[0]) for line in lines[3:]] == [1, 2, 4]
    assert text.count("*") == 1
    row = next(line for line in lines[3:] if int(line.split()[0]) == chosen.world_size)
    assert f"{chosen.images_per_s:.1f}" in row and "*" in row


def test_fb_interpolates_and_extrapolates():
    probe = make_probe()
    assert probe.fb_at(4) == pytest.approx(0.022)
    assert probe.fb_at(3) == pytest.approx(0.018)
    assert probe.fb_at(16) == pytest.approx(0.038 + 8 * 0.004)  # slope of the last segment
    assert make_probe(fb_s=((4, 0.02),)).fb_at(2) == pytest.approx(0.01)  # one point: proportional


@given(st.lists(st.floats(0.001, 1.0), min_size=1, max_size=12))
def test_monotone_fit_is_non_decreasing_and_keeps_the_total(times):
    fitted = monotone(list(enumerate(times, start=1)))
    ys = [t for _, t in fitted]
    assert [b for b, _ in fitted] == list(range(1, len(times) + 1))
    assert all(a <= b + 1e-12 for a, b in zip(ys, ys[1:]))
    assert sum(ys) == pytest.approx(sum(times))
    if times == sorted(times):
        assert ys == pytest.approx(times)


@given(st.integers(1, 4096), st.integers(1, 256))
def test_probe_batches_cover_the_table(batch, max_world):
    got = probe_batches(batch, range(1, max_world + 1))
    need = sorted({math.ceil(batch / n) for n in range(1, min(batch, max_world) + 1)})
    assert got[0] == need[0] and got[-1] == need[-1] and set(got) <= set(need)
    assert len(got) == min(len(need), advise_probe.MAX_PROBE_POINTS)


@settings(max_examples=50)
@given(st.integers(2, 64), st.integers(1, 2 ** 30), st.floats(1e-6, 1e-2), st.floats(1e-3, 10.0))
def test_fit_link_reproduces_both_measurements(n, payload, small, transfer):
    link = fit_link(n, payload, small, small + transfer, "test")
    assert allreduce_seconds(n, 0, 1, link.bandwidth_gbps, link.latency_s) == pytest.approx(small, rel=1e-3)
    assert allreduce_seconds(n, payload, 1, link.bandwidth_gbps, link.latency_s) == pytest.approx(
        small + transfer, rel=1e-3, abs=1e-9)


def test_probe_times_the_real_step(pairs, tmp_path):
    cfg = TrainConfig(str(pairs[0]), str(pairs[1]), str(tmp_path / "run"), batch_size=4, crop_size=16)
    probe = run_probe(cfg, [1, 2, 3, 4], ProbeSettings(warmup=1, iters=2))
    assert [b for b, _ in probe.fb_s] == [1, 2, 4]
    # Real timings on a shared machine: only loose bounds here; what is taken from the clock (warm-up
    # dropped, medians, data+forward+backward apart from the Adam step) is checked exactly below.
    assert all(1e-6 < t < 30 for _, t in probe.fb_s) and 1e-7 < probe.optimizer_s < 30
    assert 1e-6 < probe.contact_sheet_s < 30 and 1e-6 < probe.checkpoint_s < 30
    assert (probe.sync_bytes, probe.sync_calls, probe.parameters) == (1_010_508, 1, 252_627)  # v3 small, fp32
    assert (probe.threads, probe.device, probe.warmup, probe.iters, probe.ranks_per_host) == (1, "cpu", 1, 2, 1)
    assert not (tmp_path / "run").exists()  # the probe writes nothing into the run directory


@pytest.mark.parametrize("architecture,parameters", [("v1", 169_843), ("unet", 118_691)])
def test_probe_times_the_configured_architecture(pairs, tmp_path, architecture, parameters):
    """The probe builds the network the run would train (it built v1 whatever --architecture said)."""
    cfg = TrainConfig(str(pairs[0]), str(pairs[1]), str(tmp_path / "run"), batch_size=2, crop_size=16,
                      architecture=architecture)
    probe = run_probe(cfg, [1], ProbeSettings(warmup=1, iters=1))
    assert (probe.parameters, probe.sync_bytes) == (parameters, 4 * parameters)


class FakeClock:
    """``advise_probe.device_now`` for the in-process probe below: time moves only when a fake cost is added."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self, device=None) -> float:
        return self.now


def test_probe_takes_warm_up_free_medians_of_each_phase(pairs, tmp_path, monkeypatch):
    """The probe's bookkeeping against a fake clock: a step costs 1 ms per crop for data + forward +
    backward (x5 on the 2nd timed iteration, x1000 on the warm-up one), 2 ms per Adam step, 50 ms
    per contact sheet and 100 ms per checkpoint. Medians drop the x5; keeping the warm-up, taking
    means, or mixing up the phases changes the numbers."""
    import multiprocessing as mp
    import threading

    from trainer.learn import run_writer as outputs

    clock = FakeClock()
    factor = {0: 1000.0, 1: 1.0, 2: 5.0, 3: 1.0}  # iteration -> cost factor (warm-up = iteration 0)

    class CostedSampler(advise_probe.CropSampler):
        def batch(self, step):
            clock.now += factor[step] * 1e-3 * self.local_batch
            return super().batch(step)

    def adam_step(self, closure=None):
        clock.now += 2e-3

    monkeypatch.setattr(advise_probe, "device_now", clock)
    monkeypatch.setattr(advise_probe, "CropSampler", CostedSampler)
    monkeypatch.setattr(torch.optim.Adam, "step", adam_step)
    monkeypatch.setattr(outputs.RunWriter, "contact_sheet", lambda *a, **k: setattr(clock, "now", clock.now + 0.05))
    monkeypatch.setattr(outputs.RunWriter, "checkpoint", lambda *a, **k: setattr(clock, "now", clock.now + 0.1))
    cfg = TrainConfig(str(pairs[0]), str(pairs[1]), str(tmp_path / "run"), batch_size=4, crop_size=16)
    gang = advise_probe._Gang(threading.Barrier(1), mp.get_context("spawn").Value("i", 1))
    probe = advise_probe._probe(cfg, [1, 2, 4], ProbeSettings(warmup=1, iters=3), time.time() + 90, gang)
    assert [b for b, _ in probe.fb_s] == [1, 2, 4]
    assert [t for _, t in probe.fb_s] == pytest.approx([1e-3, 2e-3, 4e-3])
    assert probe.optimizer_s == pytest.approx(2e-3)
    assert (probe.contact_sheet_s, probe.checkpoint_s) == pytest.approx((0.05, 0.1))
    assert (probe.warmup, probe.iters) == (1, 3)


@pytest.mark.slow
def test_colocated_probe_times_ranks_sharing_the_host(pairs, tmp_path):
    cfg = TrainConfig(str(pairs[0]), str(pairs[1]), str(tmp_path / "run"), batch_size=2, crop_size=16)
    probe = run_probe(cfg, [1, 2], ProbeSettings(warmup=1, iters=2, ranks_per_host=2, timeout_s=120))
    assert probe.ranks_per_host == 2 and [b for b, _ in probe.fb_s] == [1, 2]
    assert all(1e-6 < t < 30 for _, t in probe.fb_s)


def test_cli_prints_probe_link_table_and_recommendation(pairs, capsys, monkeypatch):
    calls = []

    def fake_probe(cfg, sizes, **kw):  # the real probe is tested above; this checks the wiring
        calls.append((cfg, list(sizes), kw))
        return make_probe(batch_size=cfg.batch_size, crop_size=cfg.crop_size, compression=cfg.grad_compression,
                          sync_bytes=339_686, warmup=kw["settings"].warmup, iters=kw["settings"].iters)

    monkeypatch.setattr(advise, "run_probe", fake_probe)
    code = advise.main(["--input", str(pairs[0]), "--target", str(pairs[1]), "--batch-size", "4",
                        "--crop-size", "16", "--grad-compression", "fp16", "--max-world-size", "6",
                        "--sync-intervals", "1", "4", "--bandwidth-gbps", "1", "--latency-us", "50",
                        "--warmup", "1", "--iters", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert calls[0][1] == [1, 2, 3, 4, 5, 6]
    assert calls[0][2]["settings"] == ProbeSettings(threads=1, warmup=1, iters=2, ranks_per_host=1, budget_s=90.0)
    assert "model small (169,843 parameters), crop 16 px, global batch 4, gradient compression fp16" in out
    assert "1 thread(s) per rank, 1 rank(s) timed at once, 1 warm-up + 2 timed iterations" in out
    assert "gradient sync: 339,686 bytes in 1 all-reduce call(s)" in out
    assert "link: 1 Gb/s, 50 us per hop (stated" in out
    assert "world sizes above the global batch (4) are left out" in out
    assert "recommended: " in out and out.count("*") == 1


@pytest.mark.slow
def test_link_probe_between_two_local_processes():
    link = advise_link.measure_link(None, mb=1, repeats=2, timeout_s=60)
    assert link.bandwidth_gbps > 0.01 and 0 < link.latency_s < 0.1
    assert "loopback" in link.source


def test_ranks_sharing_a_host_use_the_intra_link_inside_it_and_the_network_between_hosts():
    from trainer.advise.costmodel import Link, shared_host_allreduce_seconds

    net, box = Link(10, 100e-6), Link(100, 10e-6)
    # one rank per host: the flat ring formula over the network
    flat = allreduce_seconds(4, 1e9, 2, 10, 100e-6)
    assert shared_host_allreduce_seconds(4, 1, 1e9, 2, net, box) == pytest.approx(flat)
    # all 4 ranks on one host: only the intra link
    inside = allreduce_seconds(4, 1e9, 2, 100, 10e-6)
    assert shared_host_allreduce_seconds(4, 4, 1e9, 2, net, box) == pytest.approx(inside)
    # 2 hosts x 2 ranks: each of the 6 ring steps waits for the slower, inter-host hop
    assert shared_host_allreduce_seconds(4, 2, 1e9, 1, net, box) == pytest.approx(6 * (1e9 * 8 / 4 / 10e9 + 100e-6))
    preds = predict(make_probe(), range(1, 9), [1], 1.0, 1e-4, ranks_per_frame=2, intra=box)
    assert [(p.world_size, p.frames) for p in preds] == [(2, 1), (4, 2), (6, 3), (8, 4)]  # multiples of 2 only
    flat = {p.world_size: p for p in predict(make_probe(), [2, 4], [1], 1.0, 1e-4)}
    assert preds[0].comm_s < flat[2].comm_s  # 2 ranks on one host talk over the fast intra link
    assert preds[1].comm_s == pytest.approx(flat[4].comm_s, rel=0.05)  # across hosts the network paces the ring
    table = format_table(preds, recommend(preds))
    assert "frames" in table.splitlines()[0]


def test_cli_ranks_per_frame_probes_that_many_at_once_and_predicts_multiples(pairs, capsys, monkeypatch):
    calls = []

    def fake_probe(cfg, sizes, **kw):
        calls.append((list(sizes), kw))
        return make_probe(batch_size=cfg.batch_size, ranks_per_host=kw["settings"].ranks_per_host)

    monkeypatch.setattr(advise, "run_probe", fake_probe)
    assert advise.main(["--input", str(pairs[0]), "--target", str(pairs[1]), "--batch-size", "8",
                        "--max-world-size", "8", "--ranks-per-frame", "2", "--sync-intervals", "1"]) == 0
    out = capsys.readouterr().out
    assert calls[0][0] == [1, 2, 4, 6, 8] and calls[0][1]["settings"].ranks_per_host == 2
    assert "inside a host (2 ranks per frame): 20 Gb/s, 50 us per hop (stated)" in out
    line = next(x for x in out.splitlines() if x.startswith("recommended:"))
    assert " frame(s) x 2 ranks" in line


def test_the_probe_step_trains_the_runs_own_loss_on_a_matte():
    """The probe's step updates the weights exactly as the trainer's loss (``per_crop_loss`` of the run's channels
    and --matte-loss) does, not as plain L1 would: on a matte they differ."""
    import numpy as np

    from trainer.core.channels import ChannelPlan
    from trainer.data.crops import CropSampler
    from trainer.learn.loss import per_crop_loss
    from trainer.learn.model import build_model

    plan = ChannelPlan(("R", "G", "B"), ("A",))
    rng = np.random.default_rng(0)
    frames = [(rng.random((24, 24, 3)).astype(np.float16), (rng.random((24, 24, 1)) > 0.5).astype(np.float16))]
    cpu = torch.device("cpu")

    def stepped(loss_of) -> dict:
        torch.manual_seed(0)
        net = build_model("small", "unet", channels=plan)
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        sampler = CropSampler(frames, 16, 2, seed=0, device=cpu, channels=plan)
        if loss_of is None:
            advise_probe._Step(net, opt, contextlib.nullcontext, torch.amp.GradScaler(enabled=False), cpu, plan,
                               "bce+l1+iou")(sampler, 3)
        else:
            batch = sampler.batch(3)
            loss_of(net(batch.input), batch.target).sum().div(2).backward()
            opt.step()
        return {k: v.clone() for k, v in net.state_dict().items()}

    probed = stepped(None)
    trainer = stepped(lambda out, tgt: per_crop_loss(out, tgt, plan, "bce+l1+iou"))
    plain_l1 = stepped(lambda out, tgt: (out - tgt).abs().mean(dim=(1, 2, 3)))
    assert all(torch.allclose(probed[k], trainer[k], atol=1e-6) for k in probed)
    assert not all(torch.allclose(probed[k], plain_l1[k], atol=1e-6) for k in probed)

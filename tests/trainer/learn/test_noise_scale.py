"""The gradient noise scale (trainer/learn/noise_scale.py) against cases whose answer is known.

The analytic case: a quadratic with known gradient noise. Example ``i`` has loss
``0.5 |theta - x_i|^2`` with ``x_i ~ N(mu, sigma^2 I_d)``, so its gradient is ``theta - x_i``: the true
gradient is ``G = theta - mu`` and the per-example covariance ``Sigma = sigma^2 I_d``, hence
``B_simple = tr(Sigma) / |G|^2 = d sigma^2 / |theta - mu|^2`` exactly (McCandlish et al. 2018, eq. 2.6
with appendix A's estimators). theta is held fixed, so the target does not move.
"""

from __future__ import annotations

import math
import os
import multiprocessing as mp
from datetime import timedelta

import numpy as np
import pytest
import torch
from torch import nn

from trainer.learn.noise_scale import SMOOTHING_SAMPLES, SMOOTHING_UPDATES, GradNoise, NoiseSampling, estimates, parameter_grads, squared_norm

D, SIGMA = 64, 1.0


class Quadratic(nn.Module):
    """theta in R^d; forward(x) -> (b,) per-example losses 0.5 |theta - x_i|^2."""

    def __init__(self, theta: torch.Tensor) -> None:
        super().__init__()
        self.theta = nn.Parameter(theta.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * (self.theta - x).pow(2).sum(dim=1)


def problem(seed: int = 0, distance: float = 3.0) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(theta, mu, exact B_simple) with |theta - mu| = distance."""
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(D, generator=g)
    step = torch.randn(D, generator=g)
    theta = mu + distance * step / step.norm()
    return theta, mu, D * SIGMA ** 2 / distance ** 2


def test_estimates_are_appendix_a():
    # |G_B|^2 = |G|^2 + tr(Sigma)/B exactly, for |G|^2 = 2 and tr(Sigma) = 12: B = 4 gives 5, B = 12 gives 3
    g2, trace = estimates(4, 5.0, 12, 3.0)
    assert g2 == pytest.approx(2.0) and trace == pytest.approx(12.0)
    with pytest.raises(ValueError, match="b_small < b_big"):
        estimates(8, 1.0, 8, 1.0)


def test_micro_batch_estimate_of_the_quadratic_is_within_10_percent():
    """One rank: the gradient of the first half of each batch is the small one, as trainer.learn.train splits it."""
    theta, mu, exact = problem()
    model = Quadratic(theta)
    noise = GradNoise()
    rng = torch.Generator().manual_seed(1)
    batch = 8
    for _ in range(3000):
        x = mu + SIGMA * torch.randn(batch, D, generator=rng)
        half = batch // 2
        for first, stop in ((0, half), (half, batch)):
            (model(x[first:stop]).sum() / batch).backward()
            if first == 0:  # the gradient so far is (half / batch) x the half's mean gradient
                noise.observe_small(squared_norm(parameter_grads(model)) * (batch / stop) ** 2)
        noise.add_sync(half, batch, squared_norm(parameter_grads(model)))
        model.zero_grad(set_to_none=True)
    value = noise.smooth(*noise.window(), updates=3000)
    print(f"micro-batches: estimated B_simple {value:.2f}, exact {exact:.2f}")
    assert value == pytest.approx(exact, rel=0.10)


DDP_BATCHES = ([4, 4], [3, 2])  # per-rank batches [crops]: even, and uneven as trainer.data.crops splits 5 over 2 ranks


def _ddp_rank(rank: int, world: int, port: int, batch_sets: list[list[int]], steps: int, queue) -> None:
    """One DDP rank of the quadratic, run once per entry of ``batch_sets`` (a fresh model and DDP each): local
    gradients observed by the trainer's hook before the all-reduce. Puts ``(index, rank, smoothed B_simple)``."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from trainer.gang.compression import register_hook
    from trainer.data.crops import rank_loss_weight

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    try:
        for index, batches in enumerate(batch_sets):
            theta, mu, _ = problem()
            model = Quadratic(theta)
            noise = GradNoise()
            ddp = DDP(model)
            register_hook(ddp, "none", observe=noise.observe_bucket)
            local, total = batches[rank], sum(batches)
            weight = rank_loss_weight(local, total, world)  # uneven batches, as trainer.data.crops weights them
            rng = torch.Generator().manual_seed(100 + rank)
            for _ in range(steps):
                x = mu + SIGMA * torch.randn(local, D, generator=rng)
                (ddp(x).sum() / local * weight).backward()
                noise.add_sync(local, total, squared_norm(parameter_grads(model)), small_scale=weight)
                model.zero_grad(set_to_none=True)
            sums = torch.tensor(noise.window(), dtype=torch.float64)
            dist.all_reduce(sums)  # as trainer.learn.train reduces them with the loss
            queue.put((index, rank, noise.smooth(*sums.tolist(), updates=steps)))
    finally:
        dist.destroy_process_group()
    queue.close()
    queue.join_thread()  # every result is in the pipe before the hard exit
    # Skip interpreter finalization, as every rank does (trainer.core.signals.exit_rank): gloo's threads can abort it
    # ("terminate called without an active exception"), seen once in a fresh clone's suite after all results arrived.
    os._exit(0)


@pytest.fixture(scope="module")
def ddp_estimates() -> dict[int, dict[int, float]]:
    """Two spawned gloo ranks run every case of DDP_BATCHES (one process pair for both: a rank process pays
    seconds of imports); returns ``{case index: {rank: smoothed B_simple}}``."""
    from trainer.core.ports import free_port

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_ddp_rank, args=(r, 2, port, list(DDP_BATCHES), 600, queue)) for r in range(2)]
    for p in procs:
        p.start()
    results: dict[int, dict[int, float]] = {}
    for _ in range(len(DDP_BATCHES) * len(procs)):
        index, rank, value = queue.get(timeout=120)
        results.setdefault(index, {})[rank] = value
    for p in procs:
        p.join(timeout=30)
    assert all(p.exitcode == 0 for p in procs)
    return results


@pytest.mark.parametrize("case", range(len(DDP_BATCHES)), ids=["-".join(map(str, b)) for b in DDP_BATCHES])
def test_ddp_estimate_of_the_quadratic_is_within_10_percent(ddp_estimates, case):
    """Two gloo ranks: each rank's gradient before the all-reduce (its local batch) against the all-reduced one."""
    _, _, exact = problem()
    results = ddp_estimates[case]
    print(f"DDP {DDP_BATCHES[case]}: estimated B_simple {results}, exact {exact:.2f}")
    assert results[0] == pytest.approx(results[1])  # every rank reports the same smoothed value
    assert results[0] == pytest.approx(exact, rel=0.10)


def test_smoothing_weights_windows_by_their_updates_and_skips_overflows():
    noise = GradNoise()
    assert noise.smooth(0.0, 0.0, 0.0, updates=10) is None  # nothing measured yet
    assert noise.smooth(2.0, 20.0, 2.0, updates=10) == pytest.approx(10.0)  # first window taken as is
    noise.smooth(3.0, 0.0, 1.0, updates=int(SMOOTHING_UPDATES))  # |G|^2 3, tr 0 for one time constant
    w = 1 - math.exp(-1)
    assert noise.g2 == pytest.approx(1 + w * 2) and noise.trace == pytest.approx(10 * (1 - w))
    # an fp16 overflow (non-finite norms) adds no sample
    noise.observe_small(torch.tensor(float("inf")))
    noise.add_sync(4, 8, torch.tensor(1.0))
    assert noise.window() == [0.0, 0.0, 0.0]
    state = noise.state_dict()
    other = GradNoise()
    other.load_state_dict(state)
    assert other.value == pytest.approx(noise.value)


def test_sparse_samples_are_smoothed_over_at_least_smoothing_samples():
    """One rank samples every --noise-interval updates: the time constant spans SMOOTHING_SAMPLES samples."""
    assert GradNoise().time_constant == SMOOTHING_UPDATES
    sparse = GradNoise(sample_interval=50)
    assert sparse.time_constant == SMOOTHING_SAMPLES * 50 > SMOOTHING_UPDATES
    sparse.smooth(1.0, 10.0, 1.0, updates=50)
    sparse.smooth(1.0, 0.0, 1.0, updates=50)  # one sample 50 updates later: weight 1 - exp(-50 / 500)
    assert sparse.trace == pytest.approx(10.0 * math.exp(-50 / sparse.time_constant))
    with pytest.raises(ValueError, match="sample_interval=0"):
        GradNoise(sample_interval=0)


@pytest.mark.parametrize("world, sync, local, interval, every, split, sizes", [
    (1, 1, 8, 50, 50, True, (4, 8, 1.0)),  # one rank: halves of the batch, every 50th update
    (1, 1, 8, 0, 0, False, (4, 8, 1.0)),  # --noise-interval 0: never
    (1, 1, 1, 50, 50, False, None),  # one crop cannot be halved: no sample
    (1, 4, 8, 50, 1, False, (8, 32, 1.0)),  # sync 4: first micro-batch vs the update, every update
    (2, 1, 3, 50, 1, False, (3, 5, 0.75)),  # 2 ranks, global batch 5: this rank's 3 crops vs the 5
    (2, 1, 3, 0, 0, False, (3, 5, 0.75)),  # --noise-interval 0 switches it off in a gang too
    (1, 4, 8, 0, 0, False, (8, 32, 1.0)),  # ... and at sync 4
])
def test_sampling_plan_per_gang_shape(world, sync, local, interval, every, split, sizes):
    plan = NoiseSampling(world, sync, local, 5 if world > 1 else local, interval)
    assert plan.every == every
    assert tuple(u for u in range(101) if plan.due(u)) == (tuple(range(0, 101, every)) if every else ())
    assert plan.split(0) is split and not plan.split(1)
    assert plan.batches(0.75) == sizes
    assert plan.observes_buckets is (world > 1 and every > 0)  # the DDP hook: a gang that samples


def test_one_rank_reads_its_small_gradient_only_in_a_sampled_update():
    split = NoiseSampling(1, 1, 8, 8, 50)  # halves every 50th update
    assert split.reads_small(0, 1, first_half=True) and not split.reads_small(0, 1, first_half=False)
    assert not split.reads_small(1, 1, first_half=True)  # not a sample
    accumulating = NoiseSampling(1, 4, 8, 8, 50)  # sync 4: the first of 4 micro-steps, every update
    assert [accumulating.reads_small(7, m, False) for m in (1, 2, 3, 4)] == [True, False, False, False]
    assert not NoiseSampling(1, 4, 8, 8, 0).reads_small(0, 1, False)  # off
    assert not NoiseSampling(2, 1, 4, 8, 50).reads_small(0, 1, True)  # a gang: the DDP hook reads it


def test_loss_scale_is_divided_out():
    a, b = GradNoise(), GradNoise()
    a.observe_small(torch.tensor(5.0))
    a.add_sync(4, 12, torch.tensor(3.0))
    b.observe_small(torch.tensor(5.0 * 1024 ** 2))
    b.add_sync(4, 12, torch.tensor(3.0 * 1024 ** 2), scale=torch.tensor(1024.0))
    assert np.allclose(a.window(), b.window())

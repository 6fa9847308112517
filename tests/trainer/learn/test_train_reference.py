"""The training loop against references written here, not through the loop's own code.

- Gradient accumulation (``COPYCAT_SYNC_INTERVAL=k``): a plain loop in this file accumulates the
  gradients of k steps and averages them by hand; the trainer's gradient at every optimizer update
  and its final weights must match it (``allclose``). Adam is nearly invariant to a constant
  gradient scale, so the weights alone would not show a wrong average: the gradients are compared.
- Uneven split of the global batch (5 crops on 2 ranks: 3 + 2): 2 DDP ranks must end with the
  weights of 1 rank training on the whole batch, which needs the per-rank loss weight
  (``trainer.data.crops.rank_loss_weight``).

Both compare float32-exact numerics, so both pin ``precision="fp32"``: under ``--precision auto`` a CPU with
AVX512-BF16/AMX trains in bfloat16 (``trainer.learn.precision``), and the bfloat16 path has its own equivalence tests
with tolerances derived from its 8-bit mantissa (tests/trainer/learn/test_train.py, tests/trainer/learn/test_bf16.py).
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import run_cli
from trainer.learn import train as train_mod
from trainer.core.config import TrainConfig
from trainer.data.crops import CropSampler
from trainer.core.envvars import DistEnv
from trainer.data.sequences import load_pairs, pair_frames
from trainer.learn.model import build_model
from trainer.learn.run_writer import load_latest_checkpoint
from trainer.record.rundir import RunPaths


def _cfg(pairs, run_dir, **kw) -> TrainConfig:
    base = dict(input_dir=str(pairs[0]), target_dir=str(pairs[1]), run_dir=str(run_dir), steps=8, batch_size=4,
                crop_size=16, checkpoint_interval=8, contact_sheet_interval=8, log_interval=4, warmup_steps=1,
                precision="fp32", optimizer="adam")  # the hand-written references below run plain float32 Adam
    base.update(kw)
    return TrainConfig(**base)


def _reference_run(cfg: TrainConfig, sync: int) -> tuple[list[list[torch.Tensor]], dict[str, torch.Tensor]]:
    """Plain accumulation: for each update, k forward/backward passes of the batch-mean L1 loss,
    each gradient kept, their mean set by hand, one Adam step. Returns (gradients per update, weights)."""
    frames = load_pairs(pair_frames(cfg.input_dir, cfg.target_dir))
    sampler = CropSampler(frames, cfg.crop_size, cfg.batch_size, 0, 1, cfg.seed)
    torch.manual_seed(cfg.seed)
    net = build_model(cfg.model_size, cfg.architecture_name)
    params = list(net.parameters())
    ratio = cfg.batch_size * sync / cfg.lr_reference_batch  # the default square-root scaling rule, by hand
    peak = cfg.base_lr * (ratio if cfg.lr_scaling == "linear" else ratio ** 0.5)
    opt = torch.optim.Adam(params, lr=peak, betas=(cfg.adam_beta1, cfg.adam_beta2))  # the trainer's betas
    updates = cfg.steps // sync
    grads_per_update = []
    for update in range(updates):
        step_grads = []
        for step in range(update * sync + 1, (update + 1) * sync + 1):
            batch = sampler.batch(step)
            net.zero_grad(set_to_none=True)
            (net(batch.input) - batch.target).abs().mean().backward()  # L1 over the whole batch
            step_grads.append([p.grad.detach().clone() for p in params])
        mean = [torch.stack(gs).sum(0) / sync for gs in zip(*step_grads)]
        for p, g in zip(params, mean):
            p.grad = g.clone()
        for group in opt.param_groups:
            group["lr"] = train_mod.lr_at(update, updates, peak, cfg.warmup_steps, floor=cfg.cosine_floor)
        opt.step()
        grads_per_update.append(mean)
    return grads_per_update, {k: v.detach().clone() for k, v in net.state_dict().items()}


def test_sync_interval_accumulates_the_mean_gradient_of_k_steps(pairs, tmp_path, monkeypatch):
    sync = 4
    cfg = _cfg(pairs, tmp_path / "run", adam_beta1=0.8, adam_beta2=0.99)  # not torch's: the trainer must pass them on
    seen: list[list[torch.Tensor]] = []
    betas: set[tuple] = set()
    original = train_mod._Loop._update

    def record(self):  # the trainer's accumulated gradient, just before its optimizer step
        seen.append([p.grad.detach().clone() for p in self.net.parameters()])
        betas.add(tuple(group["betas"] for group in self.opt.param_groups))
        original(self)

    monkeypatch.setattr(train_mod._Loop, "_update", record)
    result = train_mod.train(cfg, DistEnv(distributed=False, sync_interval=sync))
    expected_grads, expected_weights = _reference_run(cfg, sync)

    assert len(seen) == len(expected_grads) == 2
    assert betas == {((0.8, 0.99),)}  # the config's --adam-beta1/2, which the reference run uses too
    for update, (got, want) in enumerate(zip(seen, expected_grads)):
        for i, (g, w) in enumerate(zip(got, want)):
            assert torch.allclose(g, w, rtol=1e-4, atol=1e-8), f"update {update}, parameter {i}"
    assert any(float(w.abs().max()) > 0 for w in expected_grads[-1])  # gradients flowed (not all zero)
    weights = result.model.state_dict()
    for k, w in expected_weights.items():
        assert torch.allclose(weights[k], w, rtol=1e-5, atol=1e-6), k


@pytest.mark.slow
def test_uneven_batch_split_on_two_ranks_equals_one_rank(pairs, tmp_path):
    """Global batch 5 on 2 ranks (rank 0: 3 crops, rank 1: 2) == 1 rank with all 5 (allclose weights)."""
    one = train_mod.train(_cfg(pairs, tmp_path / "one", steps=6, batch_size=5, checkpoint_interval=6),
                          DistEnv(distributed=False))
    two_dir = tmp_path / "two"
    two = run_cli("local", "--world-size", "2",
                  *_cfg(pairs, two_dir, steps=6, batch_size=5, checkpoint_interval=6).to_argv())
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
    logs = [RunPaths.of(two_dir).rank_log(rank).read_text() for rank in (0, 1)]  # the ranks' INFO records
    assert "3 crops/step on this rank" in logs[0] and "2 crops/step on this rank" in logs[1]
    ckpt = load_latest_checkpoint(RunPaths.of(two_dir))
    assert ckpt is not None and ckpt["step"] == 6
    weights = one.model.state_dict()
    assert not torch.equal(weights["tail.weight"], torch.zeros_like(weights["tail.weight"]))  # it trained
    for k, w in ckpt["model"].items():
        assert torch.allclose(weights[k], w, rtol=1e-5, atol=1e-6), k

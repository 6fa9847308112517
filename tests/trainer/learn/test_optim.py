"""trainer/learn/optim.py: Muon on views of the hidden conv weights, Adam for the rest, one lr."""

from __future__ import annotations

import copy

import pytest
import torch

from trainer.learn import optim, precision
from trainer.learn.model import build_model
from trainer.learn.optim import DeviceMuon, MuonAdam, newton_schulz, orthogonalisation_dtype


def _net(fmt: torch.memory_format = torch.channels_last) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("small", "v3").to(memory_format=fmt)


def _grads(net: torch.nn.Module, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.rand(2, 3, 16, 16, generator=g), torch.rand(2, 3, 16, 16, generator=g)
    (net(x.contiguous(memory_format=torch.channels_last)) - y).abs().mean().backward()


@pytest.mark.parametrize("fmt", [torch.channels_last, torch.contiguous_format])
def test_muon_steps_are_torchs_muon_on_each_hidden_filter_bank_as_a_matrix(fmt):
    net = _net(fmt)
    reference = copy.deepcopy(net)
    opt = MuonAdam(net, 2e-3, (0.8, 0.9), ns_dtype=torch.bfloat16)  # torch's Newton-Schulz dtype
    convs = [m for m in reference.modules() if isinstance(m, torch.nn.Conv2d)]
    order = (0, 2, 3, 1) if fmt == torch.channels_last else (0, 1, 2, 3)  # the matrix's columns: (kh, kw, I) or (I, kh, kw)

    def matrix(w: torch.Tensor) -> torch.Tensor:
        return w.detach().permute(order).reshape(w.shape[0], -1)

    mats = [torch.nn.Parameter(matrix(c.weight).clone()) for c in convs[1:-1]]
    ref_muon = torch.optim.Muon(mats, lr=2e-3, weight_decay=0.0, adjust_lr_fn="match_rms_adamw")
    hidden = {id(c.weight) for c in convs[1:-1]}
    ref_adam = torch.optim.Adam([p for p in reference.parameters() if id(p) not in hidden], lr=2e-3,
                                betas=(0.8, 0.9), fused=True)
    for step in range(3):
        for n in (net, reference):
            _grads(n, seed=step)
        for m, c in zip(mats, convs[1:-1]):
            m.grad = matrix(c.weight.grad)
        opt.step(), ref_muon.step(), ref_adam.step()
        for m, c in zip(mats, convs[1:-1]):  # the reference network trains on with the matrices' new values
            o, i, kh, kw = c.weight.shape
            shape = (o, kh, kw, i) if fmt == torch.channels_last else (o, i, kh, kw)
            c.weight.data.copy_(m.detach().view(shape).permute(order if order[1] == 1 else (0, 3, 1, 2)))
        opt.zero_grad(), ref_muon.zero_grad(), ref_adam.zero_grad(), reference.zero_grad()
    got = [c for c in net.modules() if isinstance(c, torch.nn.Conv2d)]
    for c, m in zip(got[1:-1], mats):  # Muon's own update of the (O, I kh kw) matrix, in the network's weights
        assert torch.allclose(matrix(c.weight), m.detach(), atol=1e-5)
        assert c.weight.is_contiguous(memory_format=fmt)  # updated in place: the layout the network trains in
    for name in ("head.weight", "head.bias", "tail.weight", "middle.0.conv1.bias"):  # Adam's
        assert torch.allclose(net.state_dict()[name], reference.state_dict()[name], atol=1e-6), name
    assert all(p.grad is None for p in net.parameters())  # zero_grad cleared the 4-D weights too
    assert not torch.equal(net.state_dict()["middle.0.conv1.weight"], _net(fmt).state_dict()["middle.0.conv1.weight"])


def test_the_schedule_sets_one_lr_and_a_resumed_optimizer_continues_the_same():
    net, twin = _net(), _net()
    opt = MuonAdam(net, 1e-3, (0.9, 0.9))
    for group in opt.param_groups:  # as trainer.learn.train sets the schedule's lr
        group["lr"] = 5e-4
    _grads(net)
    opt.step()
    assert opt.muon.param_groups[0]["lr"] == 5e-4 and opt.adam.param_groups[0]["lr"] == 5e-4
    twin.load_state_dict(net.state_dict())
    resumed = MuonAdam(twin, 1e-3, (0.9, 0.9))
    resumed.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert resumed.param_groups[-1]["lr"] == 5e-4
    for n, o in ((net, opt), (twin, resumed)):
        o.zero_grad()
        _grads(n, seed=7)
        o.step()
    for k, v in net.state_dict().items():  # the momentum buffers and Adam moments came back with the state
        assert torch.equal(v, twin.state_dict()[k]), k
    for group in resumed.param_groups:  # load_state_dict replaced Adam's group dicts: the schedule still reaches them
        group["lr"] = 1e-4
    resumed.step()
    assert resumed.adam.param_groups[0]["lr"] == resumed.muon.param_groups[0]["lr"] == 1e-4
    with pytest.raises(ValueError, match="not --optimizer muon's"):
        resumed.load_state_dict(torch.optim.Adam(net.parameters()).state_dict())


def test_a_loss_scaler_unscales_the_muon_weights_before_the_step():
    net, twin = _net(), _net()
    opt, ref = MuonAdam(net, 1e-3, (0.9, 0.9)), MuonAdam(twin, 1e-3, (0.9, 0.9))
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    g = torch.Generator().manual_seed(3)
    x, y = torch.rand(2, 3, 16, 16, generator=g), torch.rand(2, 3, 16, 16, generator=g)
    scaler.scale((net(x) - y).abs().mean()).backward()
    (twin(x) - y).abs().mean().backward()
    scaler.step(opt)  # unscale_ walks param_groups: the 4-D Muon weights are in the last one
    ref.step()
    for k, v in net.state_dict().items():
        assert torch.allclose(v, twin.state_dict()[k], atol=1e-6), k


def test_bad_networks_are_refused_by_name():
    with pytest.raises(ValueError, match="3 or more convolutions, this one has 1"):
        MuonAdam(torch.nn.Conv2d(3, 3, 3), 1e-3, (0.9, 0.9))
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Conv2d(4, 4, 3), torch.nn.Conv2d(4, 3, 3))
    net[1].weight.data = net[1].weight.data.transpose(0, 1).contiguous().transpose(0, 1)  # neither layout
    with pytest.raises(ValueError, match="neither contiguous nor channels_last"):
        MuonAdam(net, 1e-3, (0.9, 0.9))


def _exact(g: torch.Tensor) -> torch.Tensor:
    return newton_schulz(g[None].double(), torch.float64)[0]


@pytest.mark.parametrize("shape", [(16, 144), (64, 576), (128, 64), (256, 2304)])  # v3 small's and medium's shapes
def test_newton_schulz_in_fp32_is_the_exact_iteration_and_in_bf16_is_torchs(shape):
    """Tolerances, as a share of the exact update's RMS (max abs difference): float32 within 1e-4 of the iteration
    run in float64; bfloat16 within 1e-2 of ``torch.optim.Muon``'s own (bit-equal on the CPUs measured); torch's
    bfloat16 is 7-14% off the exact iteration, so float32 is the more exact of the two."""
    from torch.optim._muon import _zeropower_via_newtonschulz as torchs

    g = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    exact = _exact(g).float()
    rms = exact.pow(2).mean().sqrt()
    ours32 = newton_schulz(g[None], torch.float32)[0]
    ours16 = newton_schulz(g[None], torch.bfloat16)[0].float()
    theirs = torchs(g, optim.NS_COEFFICIENTS, optim.NS_STEPS, optim.NS_EPS).float()
    assert ours32.dtype == torch.float32 and (ours32 - exact).abs().max() <= 1e-4 * rms
    assert (ours16 - theirs).abs().max() <= 1e-2 * rms
    assert (theirs - exact).abs().max() > 10 * (ours32 - exact).abs().max()


def test_same_shape_matrices_are_orthogonalised_together_as_each_alone():
    stack = torch.randn(3, 32, 288, generator=torch.Generator().manual_seed(1))
    together = newton_schulz(stack, torch.float32)
    for g, t in zip(stack, together):
        assert torch.allclose(newton_schulz(g[None], torch.float32)[0], t, atol=1e-6)
    with pytest.raises(ValueError, match=r"\(N, R, C\) stacked matrices, got shape \(32, 288\)"):
        newton_schulz(stack[0], torch.float32)


def test_the_newton_schulz_dtype_follows_the_cpus_bf16(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: False)
    assert orthogonalisation_dtype(torch.device("cpu")) == torch.float32
    assert MuonAdam(_net(), 1e-3, (0.9, 0.9)).muon.ns_dtype == torch.float32  # an AVX2 CPU: never emulated bf16
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: True)
    assert orthogonalisation_dtype(torch.device("cpu")) == torch.bfloat16
    assert MuonAdam(_net(), 1e-3, (0.9, 0.9)).muon.ns_dtype == torch.bfloat16


def test_an_fp32_muon_trains_on_from_torchs_muon_state_and_back():
    """A checkpoint written by torch's Muon (every run before DeviceMuon) loads, and DeviceMuon's loads in torch's."""
    mats = [torch.nn.Parameter(torch.randn(32, 288)), torch.nn.Parameter(torch.randn(64, 576))]
    theirs = torch.optim.Muon(mats, lr=1e-3, weight_decay=0.0, adjust_lr_fn="match_rms_adamw")
    for m in mats:
        m.grad = torch.randn_like(m)
    theirs.step()
    ours = DeviceMuon(mats, lr=1e-3, ns_dtype=torch.float32)
    ours.load_state_dict(copy.deepcopy(theirs.state_dict()))
    assert torch.equal(ours.state[mats[0]]["momentum_buffer"], theirs.state[mats[0]]["momentum_buffer"])
    before = [m.detach().clone() for m in mats]
    ours.step()
    assert all(not torch.equal(b, m) for b, m in zip(before, mats))
    torch.optim.Muon(mats, lr=1e-3).load_state_dict(ours.state_dict())

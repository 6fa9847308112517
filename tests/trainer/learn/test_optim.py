"""trainer/learn/optim.py: Muon on views of the hidden conv weights, Adam for the rest, one lr."""

from __future__ import annotations

import copy

import pytest
import torch

from trainer.learn.model import build_model
from trainer.learn.optim import MuonAdam


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
    opt = MuonAdam(net, 2e-3, (0.8, 0.9))
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
        assert torch.allclose(matrix(c.weight), m.detach(), atol=1e-6)
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

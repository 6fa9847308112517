"""The networks: documented parameter counts, identity at init, any frame size, TorchScript export."""

import pytest
import torch

from trainer.core.config import DEFAULT_ARCHITECTURE, TrainConfig
from trainer.learn.model import ARCHITECTURES, MODEL_SIZES, build_model, count_parameters


@pytest.mark.parametrize("size,params", [("small", 169_843), ("medium", 4_730_211), ("large", 42_790_419)])
def test_documented_parameter_counts(size, params):
    assert count_parameters(build_model(size, "v1")) == params


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_untrained_model_is_the_identity_and_keeps_odd_sizes(architecture):
    x = torch.rand(2, 3, 37, 51)
    assert torch.equal(build_model("small", architecture)(x), x)


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURES))
def test_fully_convolutional_after_training_step_and_scriptable(architecture):
    torch.manual_seed(0)
    m = build_model("small", architecture)
    x = torch.rand(1, 3, 33, 20)
    (m(x) - 0.5).abs().mean().backward()
    with torch.no_grad():
        for p in m.parameters():
            p -= 0.1 * p.grad
    y = m(x)
    assert y.shape == x.shape and not torch.equal(y, x)
    assert torch.allclose(torch.jit.script(m)(x), y, atol=1e-6)


def test_unknown_size_lists_valid_names():
    with pytest.raises(ValueError, match="small, medium, large"):
        build_model("huge", "v1")
    assert set(MODEL_SIZES) == {"small", "medium", "large"}


@pytest.mark.parametrize("shape", [(1, 3, 37, 50), (2, 3, 1, 1), (1, 5, 16, 9), (3, 3, 8, 8), (1, 3, 15, 130)])
@pytest.mark.parametrize("multiple", [1, 4, 16])
def test_pad_to_multiple_equals_replicate_f_pad(shape, multiple):
    import torch.nn.functional as F

    from trainer.learn.model import pad_to_multiple

    x = torch.rand(*shape)
    h, w = shape[-2:]
    ph, pw = (multiple - h % multiple) % multiple, (multiple - w % multiple) % multiple
    expected = F.pad(x, [0, pw, 0, ph], mode="replicate")
    got = pad_to_multiple(x, multiple)
    assert got.shape == expected.shape and torch.equal(got, expected)


def test_pad_to_multiple_gradients_equal_replicate_f_pad():
    import torch.nn.functional as F

    from trainer.learn.model import pad_to_multiple

    x = torch.rand(2, 3, 13, 22)
    weight = torch.rand(2, 3, 16, 32)
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    (pad_to_multiple(a, 16) * weight).sum().backward()
    (F.pad(b, [0, 10, 0, 3], mode="replicate") * weight).sum().backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-5)  # sums of up to 40 terms: order differs


@pytest.mark.parametrize("size,params", [("small", 252_627), ("medium", 4_220_579), ("large", 38_483_379)])
def test_v3_parameter_counts_and_full_resolution_first_level(size, params):
    net = build_model(size, "v3")
    assert count_parameters(net) == params
    assert net.head.in_channels == 3 and net.tail.out_channels == 3  # no space-to-depth stem: full resolution
    assert DEFAULT_ARCHITECTURE == "auto" and TrainConfig("i", "t", "r").architecture_name == "v3"  # colour: v3


def test_unknown_architecture_is_named():
    with pytest.raises(ValueError, match="'v4' is not one of v1, v3, unet"):
        build_model("small", "v4")
    with pytest.raises(ValueError, match="'v2' is not one of v1, v3, unet"):  # a benchmark's only (issue 49)
        build_model("small", "v2")


def test_v3_residual_blocks_start_as_the_identity_and_only_they_change():
    from trainer.learn.model import ResBlock

    torch.manual_seed(0)
    skip = build_model("small", "v3")  # SkipInit: the default for v3 since stop 35
    torch.manual_seed(0)
    plain = build_model("small", "v3", skip_init=False)
    blocks = [m for m in skip.modules() if isinstance(m, ResBlock)]
    assert len(blocks) == 8 and all(not b.conv2.weight.any() and not b.conv2.bias.any() for b in blocks)
    x = torch.rand(1, 16, 8, 8)
    assert torch.equal(blocks[0](x), x)
    a, b = skip.state_dict(), plain.state_dict()
    assert {k for k in a if not torch.equal(a[k], b[k])} == {k for k in a if ".conv2." in k}  # the rest: same draw
    net = build_model("small", "v1")  # torch's init, as its runs and checkpoints were made
    assert all(m.conv2.weight.any() for m in net.modules() if isinstance(m, ResBlock))
    forced = build_model("small", "v1", skip_init=True)
    assert not any(m.conv2.weight.any() for m in forced.modules() if isinstance(m, ResBlock))

"""``--init-from``: real sources of each kind load into the network exactly; another network is refused whole.

Sources are built as the trainer writes them: ``model.pt`` with ``trainer.export.formats.torchscript_bytes`` and
``model.json`` beside it, checkpoints as ``torch.save`` of a dict shaped like ``trainer.learn.train``'s.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path

import pytest
import torch

from trainer.export.formats import torchscript_bytes
from trainer.learn.init_from import apply_init_from, shape_mismatches
from trainer.learn.model import build_model, model_config
from trainer.record import runrecord
from trainer.core.channels import ChannelPlan
from trainer.record.initsource import MISMATCH_FIX as FIX
from trainer.record.initsource import InitFromError
from trainer.record.rundir import RunPaths, atomic_write_json

HERE = {"architecture": "v3", "model_size": "small", "scale": 1}
RGBA = ChannelPlan(("R", "G", "B", "A"), ("R", "G", "B", "A"))


def net_of(size: str = "small", architecture: str = "v3", scale: int = 1, seed: int = 0,
           channels: ChannelPlan | None = None) -> torch.nn.Module:
    """``build_model`` with ``scale`` passed only where it takes one (the upres networks)."""
    torch.manual_seed(seed)
    if channels is not None:
        return build_model(size, architecture, scale=scale, channels=channels)
    if "scale" in inspect.signature(build_model).parameters:
        return build_model(size, architecture, scale=scale)
    if scale != 1:
        pytest.skip("build_model takes no scale here")
    return build_model(size, architecture)


def meta_of(size: str, architecture: str, scale: int, step: int, **extra) -> dict:
    return {"model_size": size, "architecture": architecture, "scale": scale, "step": step, "channels": 3,
            "model_config": dataclasses.asdict(model_config(size, architecture)),
            "config": {"model_size": size, "architecture": architecture, "scale": scale}, **extra}


def write_model(folder: Path, net: torch.nn.Module, meta: dict | None) -> Path:
    """``folder/model.pt`` (+ ``model.json`` unless ``meta`` is None), as ``run_writer.export_model`` writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.pt").write_bytes(torchscript_bytes(net))
    if meta is not None:
        atomic_write_json(folder / "model.json", meta)
    return folder / "model.pt"


def write_checkpoint(path: Path, net: torch.nn.Module, meta: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": net.state_dict(), "optimizer": {"state": {}, "param_groups": []}, "updates": meta["step"],
                "torch_rng": torch.get_rng_state(), **meta}, path)
    return path


def make_run(root: Path, net: torch.nn.Module, meta: dict, *, model: bool, steps: tuple[int, ...] = ()) -> RunPaths:
    paths = RunPaths.of(root)
    paths.create()
    runrecord.update_record(paths, state="succeeded" if model else "running")
    for step in steps:
        write_checkpoint(paths.checkpoint(step), net, {**meta, "step": step})
    if model:
        write_model(root, net, meta)
    return paths


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


@pytest.fixture
def source() -> torch.nn.Module:
    """The source network: v3 small, seed 1, its weights moved off their init so they are its own."""
    net = net_of(seed=1)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    return net


def source_path(tmp_path: Path, kind: str, net: torch.nn.Module, meta: dict) -> tuple[str, str, str]:
    """``(path to give, file expected to load, run name)`` of a source of ``kind`` holding ``net``."""
    if kind == "run":
        paths = make_run(tmp_path / "shotA", net, meta, model=True, steps=(100,))
        return str(paths.root), str(paths.model), "shotA"
    if kind == "run_checkpoints":
        paths = make_run(tmp_path / "shotA", net, meta, model=False, steps=(100, 200))
        paths.checkpoint(300).write_bytes(b"PK\x03\x04 truncated by a kill")  # newest, unreadable: skipped
        return str(paths.root), str(paths.checkpoint(200)), "shotA"
    if kind == "run_copy":  # the newest checkpoint damaged after it landed (a byte flipped), its second copy intact
        paths = make_run(tmp_path / "shotA", net, meta, model=False, steps=(100, 200))
        write_checkpoint(paths.checkpoint_copy(200), net, {**meta, "step": 200})
        data = bytearray(paths.checkpoint(200).read_bytes())
        data[len(data) // 2] ^= 0xFF
        paths.checkpoint(200).write_bytes(bytes(data))
        return str(paths.root), str(paths.checkpoint_copy(200)), "shotA"
    if kind == "checkpoint":
        paths = make_run(tmp_path / "shotA", net, meta, model=False, steps=(100,))
        return str(paths.checkpoint(100)), str(paths.checkpoint(100)), "shotA"
    path = write_model(tmp_path / "exported", net, meta)
    return str(path), str(path), ""


@pytest.mark.parametrize("kind", ["run", "run_checkpoints", "run_copy", "checkpoint", "model"])
def test_each_kind_loads_the_sources_weights_exactly(tmp_path, source, kind):
    """Fails when apply_init_from does not load the weights: the target starts from other (seed 0) weights."""
    path, weights, run = source_path(tmp_path, kind, source, meta_of("small", "v3", 1, step=100))
    target = net_of(seed=0)
    assert not same_weights(target.state_dict(), source.state_dict())  # the test can fail
    record = apply_init_from(target, path, **HERE)
    assert same_weights(target.state_dict(), source.state_dict())
    step = 200 if kind in ("run_checkpoints", "run_copy") else 100
    assert record == {"path": path, "kind": "run" if kind.startswith("run") else kind, "weights": weights,
                      "step": step, "run": run, "architecture": "v3", "model_size": "small", "scale": 1,
                      "channels": 3, "target_channels": 3, "ema": False}
    json.dumps(record)  # goes into run.json as it is


def test_the_loaded_network_computes_what_the_source_computes(tmp_path, source):
    path, _, _ = source_path(tmp_path, "model", source, meta_of("small", "v3", 1, step=5))
    target = net_of(seed=0)
    apply_init_from(target, path, **HERE)
    x = torch.rand(1, 3, 16, 16)
    assert torch.equal(target.eval()(x), source.eval()(x))


@pytest.mark.parametrize("kind", ["run", "checkpoint", "model"])
@pytest.mark.parametrize("there, message", [
    ({"architecture": "v1"}, "architecture v1 there, v3 here"),
    ({"model_size": "medium"}, "model size medium there, small here"),
    ({"scale": 2}, "scale 2 there, 1 here"),
    ({"channels": 1, "model_config": {"channels": 1}}, "channels 1 there, 3 here; target channels 1 there, 3 here"),
    ({"channels": 4, "model_config": {"channels": 4}}, "channels 4 there, 3 here; target channels 4 there, 3 here"),
    ({"channels": 3, "channels_out": ["A"], "model_config": {"channels": 3, "out_channels": 1}},
     "target channels 1 there, 3 here"),
    ({"architecture": "v1", "model_size": "large", "scale": 4},
     "architecture v1 there, v3 here; model size large there, small here; scale 4 there, 1 here"),
])
def test_another_network_is_refused_naming_each_mismatch(tmp_path, source, kind, there, message):
    """The metadata is checked before any tensor: the message names each difference, and nothing is loaded."""
    path, _, _ = source_path(tmp_path, kind, source, {**meta_of("small", "v3", 1, step=100), **there})
    target = net_of(seed=0)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(InitFromError) as info:
        apply_init_from(target, path, **HERE)
    assert str(info.value) == f"--init-from {path}: {message}: {FIX}"
    assert info.value.exit_code == 2
    assert same_weights(target.state_dict(), before)


def test_a_checkpoint_without_an_architecture_is_v1(tmp_path, source):
    meta = meta_of("small", "v3", 1, step=100)
    del meta["architecture"]
    path = write_checkpoint(tmp_path / "old.pt", source, meta)
    with pytest.raises(InitFromError, match=r"architecture v1 there, v3 here"):
        apply_init_from(net_of(), str(path), **HERE)


def test_weights_of_another_shape_are_refused_when_the_metadata_is_missing(tmp_path):
    """A model.pt without model.json (nothing to compare): the tensors' names and shapes decide, before loading."""
    path = write_model(tmp_path / "copied", net_of("small", "v1", seed=1), meta=None)
    target = net_of(seed=0)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    with pytest.raises(InitFromError, match=rf"^--init-from {path}: the weights in {path} do not fit this v3 small "
                                            r"network \(scale 1\): \d+ tensor\(s\) missing \(.*\); \d+ tensor\(s\) "
                                            r"unexpected .*: give a source of the same --architecture"):
        apply_init_from(target, str(path), **HERE)
    assert same_weights(target.state_dict(), before)


def test_a_model_without_metadata_but_of_the_same_shapes_loads(tmp_path, source):
    path = write_model(tmp_path / "copied", source, meta=None)
    target = net_of(seed=0)
    record = apply_init_from(target, str(path), **HERE)
    assert same_weights(target.state_dict(), source.state_dict())
    assert (record["kind"], record["architecture"], record["step"]) == ("model", None, None)


def test_an_upres_source_does_not_fit_a_same_size_network(tmp_path):
    up = net_of(scale=2, seed=1)  # skipped where build_model takes no scale yet
    path = write_model(tmp_path / "up", up, meta=None)
    assert shape_mismatches(net_of(), up.state_dict())
    with pytest.raises(InitFromError, match="do not fit this v3 small network"):
        apply_init_from(net_of(), str(path), **HERE)


def test_shape_mismatches_quote_a_few_names_and_count_the_rest():
    own = net_of()
    state = {k: torch.zeros(1) for k in own.state_dict()}
    found = shape_mismatches(own, state)
    assert len(found) == 1 and found[0].startswith(f"{len(state)} tensor(s) of another shape (")
    assert f"+{len(state) - 3} more" in found[0]
    assert shape_mismatches(own, own.state_dict()) == []


@pytest.mark.parametrize("case, match", [
    ("missing", r"^--init-from .*/nowhere: does not exist"),
    ("corrupt", r"^--init-from (.*)/bad\.pt: cannot load the checkpoint \1/bad\.pt \(UnpicklingError: [^\n]*\): give "
                r"another checkpoint of that run, or its model\.pt$"),
    ("foreign", r"^--init-from (.*)/foreign\.pt: \1/foreign\.pt is not a cuetrain checkpoint \(no 'model' weights"),
    ("all_broken", r"^--init-from .*/shotB: none of its 2 checkpoints loads"),
    ("damaged", r"^--init-from (.*)/damaged\.pt: the checkpoint \1/damaged\.pt is damaged \(entry \S+ fails its "
                r"CRC-32 check"),
])
def test_unloadable_sources_are_named(tmp_path, case, match):
    (tmp_path / "bad.pt").write_bytes(b"\x80\x02garbage")  # starts like a pickle, is not one
    torch.save({"weights": {}}, tmp_path / "foreign.pt")
    torch.save({"model": net_of().state_dict()}, tmp_path / "damaged.pt")
    data = bytearray((tmp_path / "damaged.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF  # torch.load alone would load wrong weights
    (tmp_path / "damaged.pt").write_bytes(bytes(data))
    paths = RunPaths.of(tmp_path / "shotB")
    paths.create()
    for step in (1, 2):
        paths.checkpoint(step).write_bytes(b"\x80\x02garbage")
    path = {"missing": tmp_path / "nowhere", "corrupt": tmp_path / "bad.pt", "foreign": tmp_path / "foreign.pt",
            "all_broken": paths.root, "damaged": tmp_path / "damaged.pt"}[case]
    with pytest.raises(InitFromError, match=match):
        apply_init_from(net_of(), str(path), **HERE)


def rgba_meta(step: int) -> dict:
    """model.json / checkpoint metadata of a v3 small R,G,B,A -> R,G,B,A network, as the trainer writes it."""
    return {**meta_of("small", "v3", 1, step=step), "channels": 4, "channels_in": list(RGBA.inputs),
            "channels_out": list(RGBA.targets), "model_config": dataclasses.asdict(model_config("small", "v3",
                                                                                               channels=RGBA))}


@pytest.mark.parametrize("kind", ["run", "checkpoint", "model"])
def test_a_four_channel_source_loads_into_the_same_four_channel_network(tmp_path, kind):
    """R,G,B,A in and out: the counts are compared with this run's (4 and 4), not with RGB's 3."""
    source = net_of(seed=1, channels=RGBA)
    path, _, _ = source_path(tmp_path, kind, source, rgba_meta(100))
    target = net_of(seed=0, channels=RGBA)
    record = apply_init_from(target, path, **HERE, channels=4, target_channels=4)
    assert same_weights(target.state_dict(), source.state_dict())
    assert (record["channels"], record["target_channels"]) == (4, 4)


@pytest.mark.parametrize("kind", ["run", "checkpoint", "model"])
def test_three_and_four_channel_networks_refuse_each_other(tmp_path, kind):
    rgba = source_path(tmp_path / "rgba", kind, net_of(seed=1, channels=RGBA), rgba_meta(100))[0]
    with pytest.raises(InitFromError) as info:
        apply_init_from(net_of(seed=0), rgba, **HERE, channels=3, target_channels=3)
    assert str(info.value) == f"--init-from {rgba}: channels 4 there, 3 here; target channels 4 there, 3 here: {FIX}"
    rgb = source_path(tmp_path / "rgb", kind, net_of(seed=1), meta_of("small", "v3", 1, step=100))[0]
    with pytest.raises(InitFromError) as info:
        apply_init_from(net_of(seed=0, channels=RGBA), rgb, **HERE, channels=4, target_channels=4)
    assert str(info.value) == f"--init-from {rgb}: channels 3 there, 4 here; target channels 3 there, 4 here: {FIX}"


def test_a_checkpoint_with_an_ema_gives_the_ema_weights_its_model_pt_would_ship(tmp_path, source):
    """The EMA (``ema.model``) is what that run exports; its raw weights (``model``) are another network here."""
    raw = net_of(seed=2)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": raw.state_dict(), "optimizer": {"state": {}, "param_groups": []}, "updates": 100,
                "ema": {"decay": 0.999, "updates": 100, "model": source.state_dict()},
                **meta_of("small", "v3", 1, step=100)}, path)
    target = net_of(seed=0)
    record = apply_init_from(target, str(path), **HERE)
    assert same_weights(target.state_dict(), source.state_dict()) and record["ema"] is True
    assert not same_weights(target.state_dict(), raw.state_dict())

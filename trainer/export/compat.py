"""Will a host's libtorch run ``model.pt``? An offline operator check against a release's operator list.

The floor (:data:`MIN_LIBTORCH`): Nuke 14's PyTorch, 1.12 -- Foundry's .cat File Creation guide, Introduction
(https://learn.foundry.com/nuke/developers/15.0/catfilecreationreferenceguide/introduction.html): "Nuke 14 now
uses PyTorch 1.12"; the same page says TorchScript from torch 1.6 converts in Nuke 13.x and 14. Newer Nukes
load what older ones load (the guide's forward-compatibility statement), so the oldest host sets the floor.

The operator list of a release is a text file, one ``namespace::name[.overload]`` per line, made by
``scripts/libtorch_ops_fixture.py`` from that release's wheel: its ``native_functions.yaml`` plus the schema
literals TorchScript's runtime registers (``aten::size``, ``prim::RaiseException``, ...). The one for the floor
is ``tests/fixtures/libtorch_1.12.0_ops.txt`` (header: source URL and git commit 67ece03c).

By hand::

    python -m trainer.export.compat runs/demo/model.pt            # exit 0: loads at the floor; 1: lists what not
    python -m trainer.export.compat model.pt --ops other_release_ops.txt
"""

from __future__ import annotations

import argparse
import sys
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

#: The oldest libtorch ``model.pt`` must load in (Nuke 14; see the module docstring). Recorded in model.json.
MIN_LIBTORCH = "1.12.0"
#: The operator list of :data:`MIN_LIBTORCH` (a repository file; see the module docstring).
FLOOR_OPS_FILE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / f"libtorch_{MIN_LIBTORCH}_ops.txt"
#: IR nodes the TorchScript interpreter executes itself (no registered operator schema); all exist since torch 1.0.
INTERPRETER_NODES = frozenset({
    "prim::Constant", "prim::GetAttr", "prim::SetAttr", "prim::If", "prim::Loop", "prim::ListConstruct",
    "prim::ListUnpack", "prim::TupleConstruct", "prim::DictConstruct", "prim::CallMethod", "prim::CallFunction",
    "prim::Return", "prim::Param",
})


@dataclass(frozen=True)
class OpReport:
    """The operators a TorchScript archive runs, and those a release lacks.

    Attributes:
        used: every ``namespace::name[.overload]`` the inlined forward graph calls (sorted).
        missing: the subset the release's operator list does not hold (sorted); empty when it loads.
        archive_version: the archive's ``version`` record (libtorch refuses newer ones than it writes).
    """

    used: tuple[str, ...]
    missing: tuple[str, ...]
    archive_version: int


def load_op_list(path: Path = FLOOR_OPS_FILE) -> frozenset[str]:
    """The operator names in a list made by scripts/libtorch_ops_fixture.py (``#`` lines are comments).

    Raises:
        FileNotFoundError: no such file (make one with scripts/libtorch_ops_fixture.py).
    """
    lines = Path(path).read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def graph_operators(module: torch.jit.ScriptModule) -> tuple[str, ...]:
    """``namespace::name[.overload]`` of every node of ``module.forward`` with submodules inlined, sorted."""
    found: set[str] = set()

    def walk(block: torch._C.Block) -> None:
        for node in block.nodes():
            schema = node.schema()
            found.add(node.kind() if schema == "(no schema)" else schema.split("(", 1)[0])
            for sub in node.blocks():
                walk(sub)

    walk(module.inlined_graph)
    return tuple(sorted(found))


def check_torchscript(path: Path, allowed: frozenset[str] | None = None) -> OpReport:
    """Load ``model.pt`` (CPU) and check its operators against ``allowed`` (default: the floor's list).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        RuntimeError: torch.jit.load could not read it.
    """
    allowed = load_op_list() if allowed is None else allowed
    with zipfile.ZipFile(path) as zf:
        record = next(name for name in zf.namelist() if name.endswith("/version") or name == "version")
        archive_version = int(zf.read(record).decode().strip())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = torch.jit.load(str(path), map_location="cpu")
    used = graph_operators(module)
    missing = tuple(op for op in used if op not in allowed and op not in INTERPRETER_NODES)
    return OpReport(used=used, missing=missing, archive_version=archive_version)


def main(argv: list[str] | None = None) -> int:
    """CLI: print the operators of a model.pt and exit 1 when the release list lacks any."""
    parser = argparse.ArgumentParser(prog="python -m trainer.export.compat", description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a TorchScript file (model.pt)")
    parser.add_argument("--ops", type=Path, default=FLOOR_OPS_FILE, help="operator list of the target release")
    args = parser.parse_args(argv)
    report = check_torchscript(args.model, load_op_list(args.ops))
    print(f"{args.model}: archive version {report.archive_version}, {len(report.used)} operators")
    for op in report.used:
        print(f"  {'MISSING ' if op in report.missing else ''}{op}")
    if report.missing:
        print(f"not loadable with {args.ops.name}: {', '.join(report.missing)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Write the operator list of one PyTorch release from its wheel: tests/fixtures/libtorch_<version>_ops.txt.

    pip download torch==1.12.0 --no-deps --only-binary :all: --python-version 310 \
        --platform manylinux1_x86_64 -d /tmp/t112
    python scripts/libtorch_ops_fixture.py /tmp/t112/torch-1.12.0-cp310-cp310-manylinux1_x86_64.whl

Two sources, both from the release's own wheel (no network beyond pip, no torch import):
- ``torchgen/packaged/ATen/native/native_functions.yaml``: the ATen operators (``- func: name.overload(...)``);
  the same file as aten/src/ATen/native/native_functions.yaml at the release's git commit.
- schema string literals (``aten::x.overload(...)``, ``prim::x(...)``) in ``torch/lib/libtorch_cpu.so``: the
  operators registered by TorchScript's runtime (torch/csrc/jit/runtime/register_prim_ops*.cpp, register_ops_utils,
  ...) at that commit, e.g. ``aten::size``, ``aten::__getitem__.t``, ``prim::RaiseException``.
One ``namespace::name[.overload]`` per line, sorted, after a header naming the wheel, version and commit.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

_FUNC = re.compile(rb"^- func: ([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?)\(", re.M)
_LITERAL = re.compile(rb"(?<![A-Za-z0-9_:])((?:aten|prim)::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?)\(")


def main(wheel: Path) -> int:
    with zipfile.ZipFile(wheel) as zf:
        yaml = zf.read("torchgen/packaged/ATen/native/native_functions.yaml")
        version = zf.read("torch/version.py").decode()
        lib = zf.read("torch/lib/libtorch_cpu.so")
    ver = re.search(r"__version__ = '([^'+]+)", version).group(1)
    commit = re.search(r"git_version = '([0-9a-f]{40})'", version).group(1)
    ops = {"aten::" + m.decode() for m in _FUNC.findall(yaml)}
    ops |= {m.decode() for m in _LITERAL.findall(lib)}
    out = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / f"libtorch_{ver}_ops.txt"
    header = [
        f"# Operators (namespace::name[.overload]) that libtorch {ver} can run; read by trainer/export/compat.py.",
        f"# Made by scripts/libtorch_ops_fixture.py from {wheel.name} (torch/version.py git_version {commit}):",
        "# ATen: https://github.com/pytorch/pytorch/blob/"
        f"{commit}/aten/src/ATen/native/native_functions.yaml",
        "#   (shipped in the wheel as torchgen/packaged/ATen/native/native_functions.yaml)",
        "# TorchScript runtime (prim ops, aten list/int/str ops): the schema literals of torch/lib/libtorch_cpu.so,",
        f"#   registered by https://github.com/pytorch/pytorch/tree/{commit}/torch/csrc/jit/runtime (register_*.cpp)",
    ]
    out.write_text("\n".join(header + sorted(ops)) + "\n")
    print(f"{out}: {len(ops)} operators")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))

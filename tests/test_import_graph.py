"""The import graph: packages follow process boundaries and ``trainer``'s rooms import only downward.

Reads every module of the product packages (``trainer``, ``cue_plugin``, ``gui``, ``cuetrain``) with
:mod:`ast`, imports inside functions included, and checks four rules:

1. no cycle between the top-level packages;
2. ``trainer`` imports neither ``cue_plugin``, ``gui`` nor ``cuetrain``;
3. a module in a room of ``trainer`` imports only its own room and the rooms :data:`trainer.ROOMS` allows it,
   and never the entry points at ``trainer``'s top level (``trainer.cli``, ``trainer.demo``);
4. no module imports another module's ``_private`` name.

Each rule also runs against a small tree that breaks it, so a checker that found nothing would fail here.
"""

from __future__ import annotations

import ast
from pathlib import Path

from trainer import ROOMS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainer", "cue_plugin", "gui", "cuetrain")


def module_name(path: Path) -> str:
    """``trainer/learn/train.py`` -> ``trainer.learn.train``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def product_sources() -> dict[str, str]:
    """Every product module's source by module name."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            out[module_name(path)] = path.read_text(encoding="utf-8")
    return out


def imports_of(name: str, source: str, is_package: bool) -> list[tuple[str, str | None]]:
    """``(imported module, imported name or None)`` for every import statement of a module, at any depth."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found += [(base, alias.name) for alias in node.names]
    return found


def _resolve(target: str, name: str | None, modules: set[str]) -> str:
    """The module an import reaches: ``from trainer.learn import train`` reaches ``trainer.learn.train``."""
    if name and f"{target}.{name}" in modules:
        return f"{target}.{name}"
    return target


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "trainer" and parts[1] in ROOMS else None


def violations(sources: dict[str, str], packages: set[str] | None = None) -> list[str]:
    """Every breach of the four rules in ``sources`` (module name -> source), one line each."""
    modules = set(sources)
    packages = packages or {m for m in modules if any(o.startswith(m + ".") for o in modules)}
    found: list[str] = []
    package_edges: set[tuple[str, str]] = set()
    for name, source in sorted(sources.items()):
        top = name.split(".")[0]
        for target, imported in imports_of(name, source, name in packages):
            reached = _resolve(target, imported, modules)
            dest_top = reached.split(".")[0]
            if dest_top not in PACKAGES:
                continue
            if dest_top != top:
                package_edges.add((top, dest_top))
            if top == "trainer" and dest_top in ("cue_plugin", "gui", "cuetrain"):
                found.append(f"{name} imports {reached}: trainer must not import {dest_top}")
            room, dest_room = _room(name), _room(reached)
            if room and dest_top == "trainer" and dest_room != room:
                if dest_room is None and reached != "trainer":
                    found.append(f"{name} imports {reached}: a room must not import trainer's entry points")
                elif dest_room is not None and dest_room not in ROOMS[room]:
                    found.append(f"{name} imports {reached}: room {room!r} may import only {ROOMS[room]}")
            if imported and imported.startswith("_") and not imported.startswith("__") and reached != name:
                found.append(f"{name} imports the private name {imported} of {target}")
    reach = set(package_edges)
    for middle in PACKAGES:  # transitive closure (Warshall) over the four packages
        reach |= {(a, d) for a, b in reach for c, d in reach if b == middle == c}
    found += [f"package cycle: {a} -> {b} -> {a}" for a, b in sorted(reach) if a < b and (b, a) in reach]
    return found


def test_the_product_tree_follows_the_rules():
    sources = product_sources()
    assert "trainer.learn.train" in sources and "cuetrain.cli" in sources  # the tree read is the real one
    assert violations(sources) == []


def test_every_trainer_module_lives_in_a_room_or_is_an_entry_point():
    entry_points = {"trainer", "trainer.__main__", "trainer.cli", "trainer.demo"}
    loose = [m for m in product_sources() if m.startswith("trainer") and not _room(m) and m not in entry_points]
    rooms = {m.split(".")[1] for m in product_sources() if m.count(".") == 1 and m.startswith("trainer.")}
    assert loose == [], f"modules outside the rooms: {loose}"
    assert set(ROOMS) <= rooms


def test_an_upward_import_between_rooms_is_found():
    tree = {"trainer.core.config": "from trainer.learn.model import build_model\n",
            "trainer.learn.model": "import torch\nfrom trainer.core import config\n"}
    assert violations(tree) == ["trainer.core.config imports trainer.learn.model: room 'core' may import only ()"]


def test_a_room_importing_an_entry_point_is_found():
    tree = {"trainer.data.images": "def f():\n    from trainer.cli import main\n", "trainer.cli": ""}
    assert violations(tree) == ["trainer.data.images imports trainer.cli: a room must not import trainer's entry points"]


def test_trainer_importing_the_farm_or_the_gui_is_found_and_so_is_the_cycle():
    tree = {"trainer.cli": "def f():\n    from gui.app import main\n",
            "gui.app": "from trainer.core.config import TrainConfig\n", "trainer.core.config": ""}
    assert violations(tree) == ["trainer.cli imports gui.app: trainer must not import gui",
                                "package cycle: gui -> trainer -> gui"]


def test_a_private_import_across_modules_is_found():
    tree = {"trainer.data.shot": "from trainer.data.images import _to_rgb\n", "trainer.data.images": ""}
    assert violations(tree) == ["trainer.data.shot imports the private name _to_rgb of trainer.data.images"]


def test_relative_imports_are_resolved():
    tree = {"trainer.core.config": "from ..learn import model\n", "trainer.learn.model": "",
            "trainer.core": "", "trainer.learn": "", "trainer": ""}
    assert violations(tree) == ["trainer.core.config imports trainer.learn.model: room 'core' may import only ()"]

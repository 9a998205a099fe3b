"""Imports flow one way, and no two modules import each other.

Rooms: core ← access ← judging ← data_synthesis ← training ← probes ← analysis ← interventions ← dictionary ←
localize ← lmeval ← study ← probe_cli.
A room may import the rooms before it, never a later one (the README's architecture section draws this order), and the
module graph has no circle: every import counts, at module level, inside a function or under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ORDER = [
    "core",
    "access",
    "judging",
    "data_synthesis",
    "training",
    "probes",
    "analysis",
    "interventions",
    "dictionary",
    "localize",
    "lmeval",
    "study",
    "probe_cli",
]
ROOT = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    found = {}
    for room in ORDER:
        for path in (ROOT / room).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The module ``name`` names, or the nearest package above it (``from pkg import attr``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        anchor = package[: len(package) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph() -> dict[str, set[str]]:
    """Every import between the product's modules, wherever in the file it is written."""
    modules = _modules()
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = _targets(node, module, path.name == "__init__.py")
            owners = {_owner(name, modules) for name in names[:-1]} if isinstance(node, ast.ImportFrom) else set()
            owners = owners - {None, module} or {_owner(name, modules) for name in names}
            graph[module] |= {target for target in owners - {None, module} if target}
    return graph


def test_no_room_imports_a_later_one() -> None:
    rank = {room: i for i, room in enumerate(ORDER)}
    upward = sorted(
        f"{source} imports {target}"
        for source, targets in import_graph().items()
        for target in targets
        if rank[target.split(".")[0]] > rank[source.split(".")[0]]
    )
    assert upward == []


def test_no_two_modules_import_each_other() -> None:
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as error:
        raise AssertionError(f"an import circle: {' -> '.join(error.args[1])}") from None


def test_the_graph_sees_deferred_and_relative_imports() -> None:
    code = "if TYPE_CHECKING:\n    from . import torch_hooks\ndef f():\n    import study\n"
    found = {t for node in ast.walk(ast.parse(code)) for t in _targets(node, "access.drivers.base", False)}
    assert {"access.drivers.torch_hooks", "study"} <= found


def test_the_readme_draws_the_same_order() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "  ←  ".join(ORDER) in readme

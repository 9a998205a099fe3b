"""Imports flow one way: core ← data_synthesis ← training ← probes ← analysis ← interventions ← probe_cli.

A stage may import the shared core and the stages before it, never a later one (the README's
architecture section draws this graph); the check reads every module's import statements.
"""

from __future__ import annotations

import ast
from pathlib import Path

ORDER = ["core", "data_synthesis", "training", "probes", "analysis", "interventions", "probe_cli"]
ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_no_stage_imports_a_later_one() -> None:
    rank = {name: i for i, name in enumerate(ORDER)}
    upward = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for package in ORDER
        for path in (ROOT / package).rglob("*.py")
        for name in _imports(path)
        if name in rank and rank[name] > rank[package]
    )
    assert upward == []


def test_the_readme_draws_the_same_order() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "  ←  ".join(ORDER) in readme

"""Names are said once: a list of a registry's names is derived from the registry, and a hook point's or a metric's
name is typed only in its table (``access/hook_table.py``, ``analysis/config.py``); everything else imports it.

The scan reads each product module's source with ``ast`` (docstrings are prose and are skipped):

* a literal tuple, list, set or dict-key collection holding two or more names of one registry, outside the
  registry's own module, is a second copy of the registry's list;
* a hook point's or a metric's name as a lone string constant outside its table is a second spelling of the row.

An exception needs an entry in ``ALLOWED`` or ``SPELLED_ALLOWED`` with its reason.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from access.driver_table import DRIVERS
from access.edits import EDIT_KINDS
from access.hook_table import HOOK_TABLE
from analysis.config import METRIC_TABLE
from interventions.recipes import ARM_RECIPES
from interventions.rule_table import RULE_METRICS

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("core", "access", "data_synthesis", "training", "probes", "analysis", "interventions", "localize", "lmeval",
         "study", "probe_cli")  # fmt: skip

# registry -> (its names, the modules that may list them)
REGISTRIES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "edit kind": (
        frozenset(EDIT_KINDS),
        frozenset({"access/edits.py", "access/amplify.py", "interventions/recipes.py"}),
    ),
    "recipe": (frozenset(ARM_RECIPES), frozenset({"interventions/recipes.py"})),
    "driver": (frozenset(DRIVERS), frozenset({"access/driver_table.py"})),
    "hook point": (frozenset(HOOK_TABLE), frozenset({"access/hook_table.py"})),
    "selection rule": (frozenset(RULE_METRICS), frozenset({"interventions/rule_table.py", "analysis/config.py"})),
    "metric": (frozenset(METRIC_TABLE), frozenset({"analysis/config.py", "interventions/rule_table.py"})),
}
ALLOWED: dict[tuple[str, str], str] = {
    ("core/provenance.py", "driver"): "package names (torch, nnsight) whose versions provenance records, not drivers",
    ("study/verdicts.py", "recipe"): "the labels of arms in stored reports (recipe and direction), old reports too",
}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _docstrings(tree: ast.Module) -> set[int]:
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
    return {
        id(node.body[0].value)
        for node in nodes
        if node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }


def _strings(nodes: list[ast.expr | None]) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _collections(tree: ast.Module) -> Iterator[tuple[int, list[str]]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            yield node.lineno, _strings(list(node.elts))
        elif isinstance(node, ast.Dict):
            yield node.lineno, _strings(node.keys)


def name_lists() -> list[str]:
    found = []
    for module, tree in _modules():
        for line, strings in _collections(tree):
            for registry, (names, homes) in REGISTRIES.items():
                listed = [s for s in strings if s in names]
                if len(listed) >= 2 and module not in homes and (module, registry) not in ALLOWED:
                    found.append(f"{module}:{line}: a list of {registry} names {listed}")
    return found


SPELLED_ONCE: dict[str, tuple[frozenset[str], str]] = {
    "hook point": (frozenset(HOOK_TABLE), "access/hook_table.py"),
    "metric": (frozenset(METRIC_TABLE), "analysis/config.py"),
}  # names that are typed once, in their table's module: everything else imports them
SPELLED_ALLOWED: dict[tuple[str, str], str] = {
    ("probes/attribution.py", "metric"): "the attribution file's dataset name, in the room below analysis",
}


def spellings() -> list[str]:
    found = []
    for module, tree in _modules():
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or id(node) in prose:
                continue
            for registry, (names, home) in SPELLED_ONCE.items():
                if node.value in names and module != home and (module, registry) not in SPELLED_ALLOWED:
                    found.append(f"{module}:{node.lineno}: {registry} {node.value!r} typed (import it from {home})")
    return found


def test_no_registry_lists_its_names_twice() -> None:
    assert name_lists() == []


def test_hook_points_and_metrics_are_named_in_their_tables_only() -> None:
    assert spellings() == []


@pytest.mark.parametrize(("module", "registry"), sorted(ALLOWED))
def test_every_exception_is_still_needed(module: str, registry: str) -> None:
    names, _ = REGISTRIES[registry]
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    assert any(len([s for s in strings if s in names]) >= 2 for _, strings in _collections(tree)), (
        f"{module}: the {registry} exception is no longer needed; remove it from ALLOWED"
    )


def test_the_scan_finds_a_second_list() -> None:
    tree = ast.parse('"""Doc: mlp_out."""\nHOOKS = ("mlp_out", "attn_out")\n')
    assert [strings for _, strings in _collections(tree)] == [["mlp_out", "attn_out"]]
    assert id(tree.body[0].value) in _docstrings(tree)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("module", "registry"), sorted(SPELLED_ALLOWED))
def test_every_spelling_exception_is_still_needed(module: str, registry: str) -> None:
    names, _ = SPELLED_ONCE[registry]
    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    assert any(isinstance(n, ast.Constant) and n.value in names for n in ast.walk(tree)), (
        f"{module}: the {registry} spelling exception is no longer needed; remove it from SPELLED_ALLOWED"
    )

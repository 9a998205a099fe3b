"""Short functions and classes in the product: no function over 60 lines, no class over 250 (the style rule).

Walks every module of the rooms in :data:`tests.test_import_graph.ORDER` with :mod:`ast`. How a length is counted:

- from the ``def``/``class`` line to the definition's last line, both included; decorators are not counted, the
  docstring, comments and blank lines inside are;
- a nested function or class counts inside its parent and on its own;
- a CLI command (a function in ``probe_cli/`` whose parameters all have defaults, at least one a call such as
  ``typer.Option(...)``) counts from the first line of its body (its docstring): a flat list of options, one
  parameter per flag, is declaration, what the command does is the body, and that is held to 60 lines.

``ALLOWED`` names the few exceptions, each with its reason; an exception that no longer exceeds the limit fails too,
so the list cannot outlive its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_import_graph import ORDER, ROOT

MAX_FUNCTION = 60
MAX_CLASS = 250

# "path::qualified name" -> why it may exceed its limit for now
ALLOWED: dict[str, str] = {}


def _is_command(node: ast.FunctionDef | ast.AsyncFunctionDef, path: Path) -> bool:
    params = node.args.args + node.args.kwonlyargs
    defaults = node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
    return (
        path.relative_to(ROOT).parts[0] == "probe_cli"
        and bool(params)
        and len(defaults) == len(params)
        and any(isinstance(d, ast.Call) for d in defaults)
    )


def _length(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, path: Path) -> int:
    assert node.end_lineno is not None
    first = node.lineno
    if not isinstance(node, ast.ClassDef) and _is_command(node, path):
        first = node.body[0].lineno
    return node.end_lineno - first + 1


def _definitions(
    tree: ast.AST, prefix: str = ""
) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]]:
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}{node.name}"
            found.append((name, node))
            found += _definitions(node, f"{name}.")
        else:
            found += _definitions(node, prefix)
    return found


def too_long() -> dict[str, str]:
    """Every definition of the product over its limit: ``{"path::name": "function of N lines (limit 60)"}``."""
    out = {}
    for room in ORDER:
        for path in sorted((ROOT / room).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for name, node in _definitions(tree):
                kind, limit = ("class", MAX_CLASS) if isinstance(node, ast.ClassDef) else ("function", MAX_FUNCTION)
                length = _length(node, path)
                if length > limit:
                    out[f"{path.relative_to(ROOT).as_posix()}::{name}"] = f"{kind} of {length} lines (limit {limit})"
    return out


def test_no_function_over_60_lines_and_no_class_over_250() -> None:
    offenders = {key: what for key, what in too_long().items() if key not in ALLOWED}
    assert not offenders, "split into well-named helpers:\n" + "\n".join(f"{k}: {v}" for k, v in offenders.items())


def test_every_allowed_exception_is_still_needed() -> None:
    stale = sorted(set(ALLOWED) - set(too_long()))
    assert not stale, f"no longer over the limit (or gone): remove from ALLOWED: {stale}"


def test_the_count_sees_a_long_function_a_long_class_and_a_command_body() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    source = (
        f"def short():\n{body}\n\n"  # 60 lines: at the limit
        f"def long():\n{body}\n    return 0\n\n"  # 61 lines
        "class Big:\n" + "\n".join(f"    y{i} = {i}" for i in range(250)) + "\n"
    )
    tree = ast.parse(source)
    lengths = {name: _length(node, ROOT / "core" / "x.py") for name, node in _definitions(tree)}
    assert lengths == {"short": 60, "long": 61, "Big": 251}
    options = "\n".join(f"    flag{i}: int = typer.Option(0)," for i in range(30))
    command = ast.parse(f"def cmd(\n{options}\n) -> None:\n{body}\n")
    (_, node), *_ = _definitions(command)
    assert _length(node, ROOT / "probe_cli" / "commands" / "x.py") == 59  # the body, not the 30 option lines
    assert _length(node, ROOT / "core" / "x.py") == 59 + 32  # outside the CLI the signature counts

"""The README's error-handling promises name the tests that check them; every named test must exist.

A promise whose test was renamed or deleted would otherwise stay in the README unchecked.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECTION = re.compile(r"^## When something goes wrong\n(.*?)(?=^## )", re.S | re.M)
REFERENCE = re.compile(r"`(tests/test_\w+\.py)::(test_\w+)`")


def _promises() -> list[str]:
    found = SECTION.search((ROOT / "README.md").read_text(encoding="utf-8"))
    assert found, "README.md has no 'When something goes wrong' section"
    return re.split(r"^\d+\. ", found.group(1), flags=re.M)[1:]


def _tests_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_promise_names_tests_and_every_named_test_exists() -> None:
    promises = _promises()
    assert len(promises) >= 6
    for promise in promises:
        references = REFERENCE.findall(promise)
        assert references, f"a promise names no test: {promise[:80]}"
        for file, name in references:
            assert name in _tests_in(ROOT / file), f"README promise names {file}::{name}, which does not exist"

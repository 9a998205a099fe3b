"""Every product module whose docstrings hold examples has at least one that runs (the suite runs them with
``--doctest-modules``): an example marked ``+SKIP`` throughout is documentation nobody checks."""

from __future__ import annotations

import ast
import doctest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOMS = ("core", "access", "data_synthesis", "training", "probes", "analysis", "interventions", "localize", "lmeval",
         "study", "probe_cli")  # fmt: skip
SKIP = doctest.OPTIONFLAGS_BY_NAME["SKIP"]


def examples(source: str) -> list[doctest.Example]:
    parser = doctest.DocTestParser()
    found: list[doctest.Example] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            text = ast.get_docstring(node, clean=False)
            found += parser.get_examples(text) if text else []
    return found


def all_skipped(source: str) -> bool:
    found = examples(source)
    return bool(found) and all(example.options.get(SKIP) for example in found)


def test_every_module_with_examples_runs_one() -> None:
    modules = [path for room in ROOMS for path in sorted((ROOT / room).rglob("*.py"))]
    assert [str(p.relative_to(ROOT)) for p in modules if all_skipped(p.read_text(encoding="utf-8"))] == []


def test_a_module_whose_examples_all_skip_is_found() -> None:
    skipped = '"""Doc.\n\n    >>> run()   # doctest: +SKIP\n"""\n'
    assert all_skipped(skipped)
    assert not all_skipped(skipped.replace("# doctest: +SKIP", ""))
    assert not all_skipped('"""No examples."""\n')

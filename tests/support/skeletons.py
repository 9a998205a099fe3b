"""Run one skeleton of ``docs/extending.md`` (``tests/test_package_map.py``): each part as if written into its file.

A skeleton is a block fenced as ```` ```python skeleton ````. Its parts start at a comment line naming a file of the
product (``# analysis/rankings.py``; anything after the path is a note) or ``# try it``:

* a part under an existing module's path runs in that module's namespace, as if written at the end of the file (so
  a table's new row is written as an assignment to the table, which is what adding a row amounts to at run time);
* a part under a new module's path becomes that module, importable by its dotted name from then on (so that a table
  naming it as ``module:attribute`` finds it);
* ``# try it`` runs in a fresh namespace that holds ``run_dir`` (a recorded run) and ``model_dir`` (a tiny model
  directory), and asserts what the extension should do.

Usage: ``python -m tests.support.skeletons RESULTS MODEL_DIR FILE RUN_DIR [FILE RUN_DIR ...]``: each skeleton file
with its own recorded run, one after the other in this one process (the imports are paid once; the toy extensions
register different names); ``RESULTS`` gets a JSON list with, per skeleton, "" when every part ran or the failing
part's traceback.

Example:
    >>> [path for path, _ in parts("# core/errors.py\\nX = 1\\n# try it\\nassert X\\n")]
    ['core/errors.py', None]
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEADER = re.compile(r"^# (?:(?P<path>[\w/]+\.py)\b.*|try it\b.*)$")


def parts(code: str) -> list[tuple[str | None, str]]:
    """The skeleton's parts in order: (the file it belongs to, or None for ``# try it``; its code)."""
    found: list[tuple[str | None, list[str]]] = []
    for line in code.splitlines():
        header = HEADER.match(line)
        if header:
            found.append((header.group("path"), []))
        elif found:
            found[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"a skeleton starts with '# path/to/module.py' or '# try it', not {line!r}")
    return [(path, "\n".join(lines) + "\n") for path, lines in found]


def module_of(path: str) -> types.ModuleType:
    """The product module at ``path`` (imported), or a new empty one registered under its dotted name."""
    name = path.removesuffix(".py").replace("/", ".")
    if (ROOT / path).is_file():
        return importlib.import_module(name)
    parent, _, leaf = name.rpartition(".")
    module = types.ModuleType(name)
    module.__file__ = str(ROOT / path)
    sys.modules[name] = module
    if parent:
        setattr(importlib.import_module(parent), leaf, module)
    return module


def run(code: str, given: dict[str, object]) -> None:
    """Every part of ``code`` in order (module doc); ``given``: the names a ``# try it`` part starts with."""
    for path, body in parts(code):
        if path is None:
            exec(compile(body, "<try it>", "exec"), dict(given))
        else:
            exec(compile(body, path, "exec"), vars(module_of(path)))


def main(results: str, model_dir: str, *pairs: str) -> None:
    outcomes = []
    for source, run_dir in zip(pairs[::2], pairs[1::2], strict=True):
        try:
            run(Path(source).read_text(encoding="utf-8"), {"run_dir": run_dir, "model_dir": model_dir})
            outcomes.append("")
        except Exception:  # each skeleton's failure is reported, and the next one runs
            outcomes.append(traceback.format_exc())
    Path(results).write_text(json.dumps(outcomes), encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:])

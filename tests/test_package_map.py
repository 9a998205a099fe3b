"""The map stays true: every package's docstring names its modules, and ``docs/extending.md`` matches the code.

* Each package's ``__init__.py`` docstring has a ``Modules:`` block (one entry line per module or group of modules,
  ``name, name   what they are``; a sub-package is ``name/``; continuation lines indented deeper). The names in it are
  exactly the package's modules and sub-packages: none missing, none that is not there.
* Every block of ``docs/extending.md`` fenced as ```` ```python skeleton ```` runs against the tiny models, all in one
  process that no other test shares (:mod:`tests.support.skeletons`; the imports are paid once): the toy extension
  is registered as the guide says and its ``# try it`` part checks that it works. The sections of
  ``RUN_SKELETONS`` each have one.
* Every file the guide's table says an extension touches exists.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_import_graph import ORDER

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "extending.md"
SKELETON = re.compile(r"^```python skeleton\n(?P<code>.*?)^```$", re.M | re.S)
SECTION = re.compile(r"^## (?P<title>.+)$", re.M)
RUN_SKELETONS = ("A ranking", "A hook point", "A driver", "A report claim")  # sections whose skeleton must run
REWRITTEN: dict[str, str] = {}  # package -> why its map may lag for now (strict xfail)


def packages() -> list[Path]:
    return sorted(p.parent for room in ORDER for p in (ROOT / room).rglob("__init__.py"))


def named_modules(doc: str) -> list[str]:
    """The names of a docstring's ``Modules:`` block (module doc), in order."""
    lines = doc.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == "Modules:"]
    if not starts:
        return []
    indent = len(lines[starts[0]]) - len(lines[starts[0]].lstrip())
    names: list[str] = []
    entry: int | None = None
    for line in lines[starts[0] + 1 :]:
        depth = len(line) - len(line.lstrip())
        if not line.strip() or depth <= indent:
            break
        entry = depth if entry is None else entry
        if depth == entry:
            names += [n.strip() for n in re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].split(",")]
    return names


def present(package: Path) -> set[str]:
    modules = {p.stem for p in package.glob("*.py") if p.name != "__init__.py"}
    return modules | {f"{d.name}/" for d in package.iterdir() if (d / "__init__.py").is_file()}


def _package_params() -> list[object]:
    out = []
    for package in packages():
        name = package.relative_to(ROOT).as_posix()
        marks = [pytest.mark.xfail(strict=True, reason=REWRITTEN[name])] if name in REWRITTEN else []
        out.append(pytest.param(package, id=name, marks=marks))
    return out


@pytest.mark.parametrize("package", _package_params())
def test_every_package_docstring_names_exactly_its_modules(package: Path) -> None:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    named = named_modules(doc)
    assert len(named) == len(set(named)), f"{package.name}: a module named twice: {named}"
    missing, stray = sorted(present(package) - set(named)), sorted(set(named) - present(package))
    assert (missing, stray) == ([], []), f"{package}/__init__.py: not named {missing}; named but not there {stray}"


def test_the_parser_reads_groups_sub_packages_and_continuations() -> None:
    doc = "Rooms.\n\nModules:\n    a, b    the first two\n            go on\n    sub/    a package\n\nMore prose, a."
    assert named_modules(doc) == ["a", "b", "sub/"]


def skeletons() -> list[tuple[str, str]]:
    """(section title, code) of every skeleton block of the guide, in order; a section's second block is titled
    "title (2)"."""
    text = GUIDE.read_text(encoding="utf-8")
    titles = [(m.start(), m.group("title")) for m in SECTION.finditer(text)]
    found: list[tuple[str, str]] = []
    for block in SKELETON.finditer(text):
        title = next(t for at, t in reversed(titles) if at < block.start())
        seen = sum(t == title or t.startswith(f"{title} (") for t, _ in found)
        found.append((f"{title} ({seen + 1})" if seen else title, block.group("code")))
    return found


def test_each_extension_section_has_a_skeleton_that_runs() -> None:
    assert set(RUN_SKELETONS) <= {title for title, _ in skeletons()}


@pytest.fixture(scope="module")
def skeleton_failures(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every skeleton run in one process (module doc), each with its own copy of a synthetic recording (no model
    needed), which it may write analyses into; title -> "" or the failing part's traceback."""
    from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run

    root = tmp_path_factory.mktemp("skeletons")
    write_synthetic_run(root / "run", SyntheticSpec(n_samples=24, n_layers=4, width=16, capabilities=("multi_turn",)))
    pairs: list[str] = []
    for i, (_, code) in enumerate(skeletons()):
        (root / f"{i}.py").write_text(code, encoding="utf-8")
        pairs += [str(root / f"{i}.py"), str(shutil.copytree(root / "run", root / f"run{i}"))]
    command = [sys.executable, "-m", "tests.support.skeletons", str(root / "results.json"), str(tiny_model_dir)]
    done = subprocess.run(
        [*command, *pairs], cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads((root / "results.json").read_text(encoding="utf-8"))
    return {title: outcome for (title, _), outcome in zip(skeletons(), outcomes, strict=True)}


@pytest.mark.parametrize("title", [title for title, _ in skeletons()])
def test_every_skeleton_runs(title: str, skeleton_failures: dict[str, str]) -> None:
    assert skeleton_failures[title] == "", f"docs/extending.md, {title}: the skeleton fails\n{skeleton_failures[title]}"


def test_every_file_the_guide_says_an_extension_touches_exists() -> None:
    table = GUIDE.read_text(encoding="utf-8").split("\n## ", 1)[0]
    paths = [p for p in re.findall(r"`([\w/.<>-]+\.py)`", table) if "<" not in p]
    assert paths and [p for p in paths if not (ROOT / p).is_file()] == []

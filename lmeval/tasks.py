"""Task folders are code: what a local lm-eval task may run is checked before it loads, and its templates run sandboxed.

An lm-eval task YAML can name Python: ``!function utils.process_docs`` imports and runs a module
beside it (or any importable one, ``!function os.system``), and a metric lm-eval does not know is
loaded by HF Evaluate as a Python script. Its templates (``doc_to_text`` ...) are Jinja, which
lm-eval renders in a plain environment where ``{{ cycler.__init__.__globals__.os.system(...) }}``
runs a shell command. So, for ``probe lmeval``:

* :class:`TaskGate`, around the loading of the tasks: every task file outside lm-eval's own package
  (and each file it ``include:``\\ s) is read as data first, and the first ``!function``, unknown
  metric or template that reaches an underscore attribute is one :class:`ProbeError` naming the file
  and line, before anything is imported, unless the user trusts the folder (``--trust-task-code``);
* :func:`sandboxed_task_templates`, around the whole run: lm-eval's module-level Jinja environment is
  a :class:`core.sandbox.BudgetedSandbox` with the same settings, so a template can neither reach
  Python's internals nor loop or allocate without bound, trusted or not;
* :func:`task_code_error`: what a trusted task's own Python raised (a syntax error, a failed
  import, an exception) is one line naming its file and line.

So that a task over local files needs no Python, a relative ``data_files`` path of a task file
(``dataset_path: json``, ``csv``, ``parquet`` or ``text``) that names a file beside it is read
from there, in any working directory (:func:`data_files_beside`); lm-eval alone would look in the
working directory.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "t.yaml").write_text("task: t\\nprocess_docs: !function utils.process\\n")
    >>> found = first_task_code(folder / "t.yaml")
    >>> found.path.name, found.line, found.what
    ('t.yaml', 2, '`!function utils.process`, Python that lm-eval would import and run')
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from core.errors import ProbeError

TRUST_FLAG = "--trust-task-code"
_TEMPLATE_MARKS = ("{{", "{%")


@dataclass(frozen=True)
class Finding:
    """Something in a task file that is code, not data: where, and what."""

    path: Path
    line: int
    what: str


def _lm_eval_dir() -> Path:
    import lm_eval

    return Path(lm_eval.__file__).resolve().parent


def _is_lm_evals_own(path: Path) -> bool:
    return path.resolve().is_relative_to(_lm_eval_dir())


def _compose(path: Path) -> yaml.Node | None:
    """The YAML node graph of ``path``: tags kept, nothing constructed, nothing imported."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open("rb") as stream:
        return yaml.compose(stream, Loader=loader)


def _unsafe_template(text: str) -> str | None:
    """The underscore attribute a template reaches (``cycler.__init__``, ``x|attr('__class__')``), if any."""
    from jinja2 import nodes
    from jinja2.exceptions import TemplateSyntaxError

    from core.sandbox import BudgetedSandbox

    try:
        tree = BudgetedSandbox().parse(text)
    except TemplateSyntaxError:
        return None  # not a template lm-eval can render either; it fails there, in one line
    for node in tree.find_all((nodes.Getattr, nodes.Filter)):
        if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
            return node.attr
        if isinstance(node, nodes.Filter) and node.name == "attr" and node.args:
            name = node.args[0]
            if isinstance(name, nodes.Const) and str(name.value).startswith("_"):
                return str(name.value)
    return None


def _known_metric(name: str) -> bool:
    import lm_eval.api.metrics  # noqa: F401 - fills the registry
    from lm_eval.api.registry import metric_registry

    return name in metric_registry


@dataclass
class _Scan:
    """A walk over one file's nodes, following its ``include:`` files."""

    seen: set[Path] = field(default_factory=set)

    def file(self, path: Path) -> Finding | None:
        path = path.resolve()
        if path in self.seen or _is_lm_evals_own(path) or not path.is_file():
            return None  # lm-eval's own tasks are its code, installed with it; a missing file fails in lm-eval
        self.seen.add(path)
        root = _compose(path)
        return None if root is None else self.node(root, path, set())

    def node(self, node: yaml.Node, path: Path, visited: set[int]) -> Finding | None:
        if id(node) in visited:  # an alias: walked once
            return None
        visited.add(id(node))
        line = node.start_mark.line + 1
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path, line)
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            found = self.mapping(node, path)
            if found:
                return found
            children = [n for pair in node.value for n in pair]
        return next((f for f in (self.node(c, path, visited) for c in children) if f), None)

    def scalar(self, node: yaml.ScalarNode, path: Path, line: int) -> Finding | None:
        if node.tag == "!function":
            return Finding(path, line, f"`!function {node.value}`, Python that lm-eval would import and run")
        if any(mark in node.value for mark in _TEMPLATE_MARKS):
            reached = _unsafe_template(node.value)
            if reached:
                return Finding(
                    path, line, f"a template that reaches `{reached}`, Python's internals rather than the data"
                )
        return None

    def mapping(self, node: yaml.MappingNode, path: Path) -> Finding | None:
        items = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
        metric = items.get("metric")
        if isinstance(metric, yaml.ScalarNode) and metric.tag != "!function":
            hf = items.get("hf_evaluate")
            if not _known_metric(metric.value) or (isinstance(hf, yaml.ScalarNode) and hf.value.lower() == "true"):
                return Finding(
                    path,
                    metric.start_mark.line + 1,
                    f"metric {metric.value!r}, which is not lm-eval's own: HF Evaluate would load it as Python",
                )
        include = items.get("include")
        targets = [include] if isinstance(include, yaml.ScalarNode) else getattr(include, "value", []) or []
        for target in targets:
            if isinstance(target, yaml.ScalarNode):
                found = self.file(path.parent / target.value)
                if found:
                    return found
        return None


def first_task_code(path: Path) -> Finding | None:
    """The first piece of code in task file ``path`` or the files it includes; None if it is all data."""
    try:
        return _Scan().file(path)
    except yaml.YAMLError:
        return None  # lm-eval's own reading of it fails next, in one line


def refuse_task_code(path: Path) -> None:
    """One :class:`ProbeError` line for the first piece of code in task file ``path``."""
    found = first_task_code(path)
    if found:
        raise ProbeError(
            f"{found.path}:{found.line}: the task holds {found.what}; a task folder is code as much as data, so "
            f"`probe lmeval` runs only plain task files unless you pass {TRUST_FLAG} (only for a folder you trust)"
        )


@dataclass
class TaskGate:
    """Within the block, lm-eval loads a task file only after :func:`refuse_task_code` (unless ``trust``), and
    ``dirs`` collects the folders of the task files it loaded, to name their Python in errors."""

    trust: bool
    dirs: set[Path] = field(default_factory=set)

    @contextmanager
    def active(self) -> Iterator[None]:
        from lm_eval.tasks import _factory

        original = _factory.load_yaml

        def checked(path: str | Path, *args: Any, resolve_func: bool = True, **kwargs: Any) -> dict[str, Any]:
            path = Path(path)
            if resolve_func and not _is_lm_evals_own(path):
                if not self.trust:
                    refuse_task_code(path)
                self.dirs.add(path.resolve().parent)
            config = original(path, *args, resolve_func=resolve_func, **kwargs)
            return config if _is_lm_evals_own(path) else data_files_beside(config, path.resolve().parent)

        _factory.load_yaml = checked
        try:
            yield
        finally:
            _factory.load_yaml = original


_FILE_LOADERS = ("json", "csv", "parquet", "text")


def data_files_beside(config: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``config`` with each relative ``dataset_kwargs.data_files`` path that names a file in ``folder`` made absolute.

    >>> data_files_beside({"dataset_path": "json", "dataset_kwargs": {"data_files": {"test": "x.jsonl"}}}, Path("/"))
    {'dataset_path': 'json', 'dataset_kwargs': {'data_files': {'test': 'x.jsonl'}}}
    """
    kwargs = config.get("dataset_kwargs")
    if config.get("dataset_path") not in _FILE_LOADERS or not isinstance(kwargs, dict):
        return config

    def beside(files: Any) -> Any:
        if isinstance(files, str):
            return str(folder / files) if not Path(files).is_absolute() and (folder / files).is_file() else files
        if isinstance(files, list):
            return [beside(f) for f in files]
        if isinstance(files, dict):
            return {split: beside(f) for split, f in files.items()}
        return files

    if "data_files" in kwargs:
        config = {**config, "dataset_kwargs": {**kwargs, "data_files": beside(kwargs["data_files"])}}
    return config


@contextmanager
def sandboxed_task_templates() -> Iterator[None]:
    """lm-eval's task templates, and the chat templates of the models it loads, rendered within the toolkit's
    sandbox and budget (:mod:`core.sandbox`) in the block."""
    import lm_eval.utils

    from core.sandbox import BudgetedSandbox, install_in_transformers

    install_in_transformers()
    original = lm_eval.utils.env
    sandbox = BudgetedSandbox(
        loader=original.loader,
        undefined=original.undefined,
        keep_trailing_newline=original.keep_trailing_newline,
    )
    for name, func in original.filters.items():
        sandbox.filters.setdefault(name, func)  # lm-eval's regex_replace
    lm_eval.utils.env = sandbox
    try:
        yield
    finally:
        lm_eval.utils.env = original


def task_code_error(exc: BaseException, dirs: set[Path], what: str) -> ProbeError | None:
    """One line for what a task's own Python (in ``dirs``) raised, naming its file and line; None if it was not."""
    if isinstance(exc, SyntaxError) and exc.filename and _inside(Path(exc.filename), dirs):
        return ProbeError(
            f"{exc.filename}:{exc.lineno}: task {what}: its Python does not compile (SyntaxError: {exc.msg}); "
            "fix the module its `!function` names"
        )
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _inside(Path(f.filename), dirs)]
    if not frames:
        return None
    first = (str(exc).strip().splitlines() or ["-"])[0]
    return ProbeError(
        f"{frames[-1].filename}:{frames[-1].lineno}: task {what}: its Python raised {type(exc).__name__}: {first}"
    )


def _inside(path: Path, dirs: set[Path]) -> bool:
    if path.suffix != ".py" or not dirs:
        return False
    resolved = path.resolve()
    return any(resolved.is_relative_to(d) for d in dirs) and "site-packages" not in resolved.parts


def template_error(exc: BaseException, what: str) -> ProbeError | None:
    """One line for a task template that Jinja refused (unsafe, past its budget, undefined, malformed)."""
    from jinja2.exceptions import TemplateError

    if not isinstance(exc, (TemplateError, RecursionError)):
        return None
    first = (str(exc).strip().splitlines() or ["-"])[0]
    return ProbeError(
        f"task {what}: a template fails ({type(exc).__name__}: {first}); fix the task's template "
        "(or the model's chat template, with --chat-template)"
    )

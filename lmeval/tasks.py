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

The toolkit's own tasks (:data:`OWN_TASKS`) are written here, at run time, into a folder the gate trusts:
``probe_heldout`` (the default of ``probe lmeval``) generates the held-out split's rows of the capability
and ``probe_test`` (``--split test``) the run's data file's, in the order and with the token limit of
``probe intervene`` (:func:`interventions.plan.select_rows`), each prompt rendered by the model's chat template
(:func:`core.chat.render_text`) and each response judged by the rule judge (on held-out rows, their constraint
checkers): the item's ``compliance`` is 0 or 1 (:func:`process_results`).

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
from typing import TYPE_CHECKING, Any
from unittest import mock

import yaml

from core.errors import ProbeError
from training.eval_config import HELDOUT

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from interventions.config import ABConfig

TRUST_FLAG = "--trust-task-code"
_TEMPLATE_MARKS = ("{{", "{%")
# the toolkit's own tasks, by the split whose rows each generates (module doc)
OWN_TASKS: dict[str, str] = {"probe_heldout": HELDOUT, "probe_test": "test"}
OWN_METRIC = "compliance"


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
    trusted: set[Path] = field(default_factory=set)  # folders the toolkit wrote (its own tasks)

    @contextmanager
    def active(self) -> Iterator[None]:
        from lm_eval.tasks import _factory

        original = _factory.load_yaml

        def checked(path: str | Path, *args: Any, resolve_func: bool = True, **kwargs: Any) -> dict[str, Any]:
            path = Path(path)
            if resolve_func and not _is_lm_evals_own(path):
                if not self.trust and path.resolve().parent not in self.trusted:
                    refuse_task_code(path)
                self.dirs.add(path.resolve().parent)
            config: dict[str, Any] = original(path, *args, resolve_func=resolve_func, **kwargs)
            if _is_lm_evals_own(path):
                return config
            refuse_loading_script(config, path)
            return data_files_beside(config, path.resolve().parent)

        with mock.patch.object(_factory, "load_yaml", checked):
            yield


def own_task_name(split: str) -> str:
    """The toolkit's task over ``split``'s rows.

    >>> own_task_name("heldout"), own_task_name("test")
    ('probe_heldout', 'probe_test')
    """
    return next(name for name, of in OWN_TASKS.items() if of == split)


def _own_task_yaml(name: str, max_new_tokens: int) -> str:
    return f"""# written by probe lmeval (lmeval.tasks): {OWN_TASKS[name]} rows, judged by the rule judge
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {name}.jsonl
test_split: test
output_type: generate_until
doc_to_text: "{{{{prompt}}}}"
doc_to_target: "{{{{reference}}}}"
generation_kwargs:
  until: []
  max_gen_toks: {max_new_tokens}
  do_sample: false
process_results: !function utils.process_results
metric_list:
  - metric: {OWN_METRIC}
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1
"""


def own_task_docs(tokenizer: PreTrainedTokenizerBase, ab: ABConfig, rows_file: Path) -> list[dict[str, Any]]:
    """The items of a toolkit task: ``ab``'s target rows of ``rows_file`` as ``probe intervene`` picks them (its
    ``--limit`` aside: lm-eval's applies), each with its rendered prompt and its row as JSON for the judge; rows the
    rule judge cannot decide (no ``expect`` block: published data) are left out."""
    import json
    from dataclasses import replace
    from functools import partial

    from core.chat import render_text, to_messages
    from core.records import to_json
    from core.rows import read_test_rows
    from interventions.plan import select_rows
    from judging.rules import RuleJudge

    rows = read_test_rows(rows_file)
    judge = RuleJudge()
    docs = []
    for index in select_rows(rows, replace(ab, limit=None, collateral=False))[0]:
        row = rows[index]
        if judge.check(row, row.reference, ab.target)[0] is None:
            continue
        prompt = render_text(
            tokenizer,
            to_messages(row.question),
            add_generation_prompt=True,
            where=partial(str, f"line {index + 1} of {rows_file}"),
        )
        body = json.dumps(to_json(row), ensure_ascii=False)
        docs.append(
            {"prompt": prompt, "reference": row.reference, "line": index + 1, "capability": ab.capability, "row": body}
        )
    if not docs:
        raise ProbeError(
            f"{rows_file}: no {ab.capability} row the rule judge can score (rows without an 'expect' block, such as "
            "published data, need the LLM judge: probe intervene --judge llm)"
        )
    return docs


def own_rows_file(ab: ABConfig, name: str) -> Path:
    """The rows toolkit task ``name`` generates: the held-out split's, or the run's data file's."""
    from dataclasses import replace

    from interventions.plan import resolve_sources

    split = OWN_TASKS[name]
    if split != HELDOUT and ab.run_dir is None:
        raise ProbeError(
            f"--tasks {name}: it generates the rows of the run's data file: give a RUN_DIR (or run "
            f"{own_task_name(HELDOUT)}, the held-out rows)"
        )
    return resolve_sources(replace(ab, split=split, data_file=None))[1]


@contextmanager
def own_task_folder(names: list[str], ab: ABConfig, model_dir: Path, max_new_tokens: int) -> Iterator[Path | None]:
    """Within the block, a temporary folder holding the toolkit's tasks among ``names`` written for ``model_dir``'s
    chat template (None if ``names`` has none)."""
    import tempfile

    from core.models import load_tokenizer

    own = [name for name in names if name in OWN_TASKS]
    if not own:
        yield None
        return
    tokenizer = load_tokenizer(model_dir, "--model-dir")
    with tempfile.TemporaryDirectory(prefix="probe-tasks-") as tmp:
        for name in own:
            write_own_task(Path(tmp), name, own_task_docs(tokenizer, ab, own_rows_file(ab, name)), max_new_tokens)
        yield Path(tmp)


def write_own_task(folder: Path, name: str, docs: list[dict[str, Any]], max_new_tokens: int) -> Path:
    """Write toolkit task ``name`` (its YAML, items and the one-line module naming :func:`process_results`) into
    ``folder``; the YAML's path."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"{name}.jsonl").open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(doc, ensure_ascii=False) + "\n" for doc in docs)
    (folder / "utils.py").write_text("from lmeval.tasks import process_results  # noqa: F401\n", encoding="utf-8")
    path = folder / f"{name}.yaml"
    path.write_text(_own_task_yaml(name, max_new_tokens), encoding="utf-8")
    return path


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """A toolkit task's item: the rule judge's 0/1 score of the response on the task's capability, as ``probe
    intervene`` scores its target rows (on held-out rows, the constraints active in the last turn included)."""
    import json

    from core.capabilities import parse_capability
    from core.records import from_json
    from core.schema import TestRow
    from judging.rules import RuleJudge

    row = from_json(TestRow, json.loads(doc["row"]))
    score, _ = RuleJudge().check(row, results[0], parse_capability(doc["capability"]))
    return {OWN_METRIC: float(score == 1)}  # None: never, rows the judge cannot decide are not items


_FILE_LOADERS = ("json", "csv", "parquet", "text")


def refuse_loading_script(config: dict[str, Any], path: Path) -> None:
    """One :class:`ProbeError` line for a ``dataset_path`` folder that holds a dataset loading script
    (``FOLDER/FOLDER.py``, what ``datasets`` would look for): ``datasets`` no longer runs one, and neither does the
    toolkit, trusted folder or not; nothing of it is imported.

    >>> refuse_loading_script({"dataset_path": "json"}, Path("t.yaml")) is None
    True
    """
    name = config.get("dataset_path")
    if not isinstance(name, str) or name in _FILE_LOADERS:
        return
    for folder in dict.fromkeys((Path(name), path.resolve().parent / name)):
        script = folder / f"{folder.name}.py"
        if script.is_file():
            raise ProbeError(
                f"{path}: dataset_path {name!r} is a folder holding a dataset loading script ({script}), which is "
                "code; neither `datasets` nor `probe lmeval` runs one: give dataset_path: json (or csv, parquet, "
                "text) and the data files (docs/lmeval.md)"
            )


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

"""A task folder is code: ``probe lmeval`` runs none of a task's Python unless trusted, and its templates sandboxed.

Generated hostile task folders (a piece of code in one of several places of a task file, the task
named by ``--include-path`` or by its YAML path) must end in one ``error:`` line naming the file
and line, before any model loads, with the marker file the code would write never written. With
``--trust-task-code`` a template still runs in the sandbox: reaching Python's internals or looping
without bound is one line, and a trusted module that does not compile, import or run is one line
naming its file and line. The toolkit's example tasks run without the flag from any directory, and
lm-eval's own templates (a seeded sample of them) render in the sandbox exactly as lm-eval renders them.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import exit_of, one_line_error
from tests.support.lmeval_tasks import MC, write_task
from tests.test_lmeval import lm_eval  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("one_torch_thread", "lm_eval", "no_lm_eval_index")

ROOT = Path(__file__).resolve().parents[1]
ROWS = [{"question": f"Question {i}?", "choices": ["answer", "refuse"], "label": 0} for i in range(3)]


@pytest.fixture
def no_lm_eval_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """lm-eval's own index of 14,000 tasks (10-20 s) left out: every task here is local."""
    import lm_eval.tasks

    class Manager(lm_eval.tasks.TaskManager):
        def __init__(self, include_path: Any = None, include_defaults: bool = True, **kwargs: Any) -> None:  # noqa: ARG002 - lm_eval passes include_defaults= by keyword
            super().__init__(include_path=include_path, include_defaults=False, **kwargs)

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", Manager)


def _code(marker: Path) -> str:
    return f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"


def _shell(marker: Path) -> str:
    return f"{{{{ cycler.__init__.__globals__.os.system('touch {marker}') }}}}"


# each a task body with code in it, and the files beside it: (body, {file name: text})
def _hostile(kind: str, marker: Path) -> tuple[str, dict[str, str]]:
    if kind == "!function beside":
        return MC + "process_docs: !function utils.process\n", {
            "utils.py": _code(marker) + "def process(d):\n  return d\n"
        }
    if kind == "!function importable":
        return MC.replace('doc_to_text: "{{question}}\\nAnswer:"', "doc_to_text: !function os.system"), {}
    if kind == "template to a shell":
        return MC.replace('"{{question}}\\nAnswer:"', f'"{_shell(marker)}"'), {}
    if kind == "attr filter":
        return MC.replace('"{{question}}\\nAnswer:"', "\"{{ (cycler | attr('__init__')) }}\""), {}
    if kind == "metric script":
        return MC.replace("metric: acc", "metric: evil_metric.py"), {"evil_metric.py": _code(marker)}
    if kind == "included":
        body = "include: base.yaml\n"
        return body, {"base.yaml": MC + "process_docs: !function utils.process\n", "utils.py": _code(marker)}
    raise AssertionError(kind)


KINDS = ["!function beside", "!function importable", "template to a shell", "attr filter", "metric script", "included"]
# every kind by --include-path, every other one also by the YAML's own path
CASES = [(kind, "--include-path") for kind in KINDS] + [(kind, "yaml path") for kind in KINDS[::2]]
WHAT = {
    "!function beside": "`!function utils.process`",
    "!function importable": "`!function os.system`",
    "template to a shell": "reaches `__globals__`",
    "attr filter": "reaches `__init__`",
    "metric script": "metric 'evil_metric.py'",
    "included": "`!function utils.process`",
}


def _write(root: Path, kind: str, marker: Path) -> Path:
    body, files = _hostile(kind, marker)
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    return write_task(root, "hostile", ROWS, body)


def _argv(model_dir: Path, task: Path, how: str, *more: str) -> list[str]:
    tasks = (
        ["--tasks", "hostile", "--include-path", str(task.parent)]
        if how == "--include-path"
        else ["--tasks", str(task)]
    )
    return ["lmeval", "--model-dir", str(model_dir), "--units", "1:0", *tasks, "--bootstrap", "100", *more]


@pytest.mark.parametrize("kind, how", CASES)
def test_task_code_is_one_line_before_any_model_loads(
    kind: str,
    how: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import lmeval.model

    def no_model(*_: Any, **__: Any) -> Any:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(lmeval.model, "register", no_model)
    marker = tmp_path / "CODE_RAN"
    task = _write(tmp_path, kind, marker)
    holder = tmp_path / "base.yaml" if kind == "included" else task
    line = next(n for n, text in enumerate(holder.read_text().splitlines(), 1) if _piece(kind) in text)
    one_line_error(capsys, _argv(tiny_model_dir, task, how), f"{holder}:{line}:", WHAT[kind], "--trust-task-code")
    assert not marker.exists()


def _piece(kind: str) -> str:
    return {"metric script": "evil_metric", "template to a shell": "cycler", "attr filter": "attr("}.get(
        kind, "!function"
    )


@pytest.mark.parametrize(
    "template, needle",
    [
        ("SHELL", "SecurityError"),
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "TemplateBudgetError"),
        ("{{ 'a' * 10**10 }}", "TemplateBudgetError"),
        ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "RecursionError"),
        ("{% for i in range(10**10) %}x{% endfor %}", "TemplateBudgetError: Range too big"),  # was an OverflowError
        ("{{ range(0, 10**12, 3) | list | length }}", "TemplateBudgetError: Range too big"),
    ],
)
def test_a_trusted_task_still_renders_its_templates_in_the_sandbox(
    template: str, needle: str, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "SHELL_RAN"
    text = _shell(marker) if template == "SHELL" else template
    task = write_task(tmp_path, "hostile", ROWS, MC.replace('"{{question}}\\nAnswer:"', _yaml_string(text)))
    start = time.monotonic()
    one_line_error(capsys, _argv(tiny_model_dir, task, "--include-path", "--trust-task-code"), "task ", needle)
    assert time.monotonic() - start < 60
    assert not marker.exists()


def _yaml_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


MODULES = {
    "syntax error": ("def process(docs):\n    return docs\ndef broken(:\n", 3, "SyntaxError"),
    "import error": ("import json\nimport no_such_module_for_probe\n", 2, "ModuleNotFoundError"),
    "raises": ("def process(docs):\n    x = 1\n    raise ValueError('no docs for you')\n", 3, "ValueError: no docs"),
}


# where a task's dataset_path names a folder holding a dataset loading script (FOLDER/FOLDER.py), and whether the
# folder is trusted: `datasets` raised a RuntimeError; the script is never imported, trusted or not
LOADING_SCRIPTS = [("absolute path", False), ("beside the task", False), ("absolute path", True)]


@pytest.mark.parametrize("where, trusted", LOADING_SCRIPTS)
def test_a_dataset_loading_script_is_one_line_and_never_runs(
    where: str, trusted: bool, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "CODE_RAN"
    folder = tmp_path / "scripted"
    folder.mkdir()
    (folder / "scripted.py").write_text(_code(marker), encoding="utf-8")
    task = write_task(tmp_path, "hostile", ROWS, MC)
    named = str(folder) if where == "absolute path" else "scripted"
    text = task.read_text(encoding="utf-8").replace("dataset_path: json", f"dataset_path: {named}")
    task.write_text(text.replace("dataset_kwargs:", "dataset_kwargs:\n  trust_remote_code: true"), encoding="utf-8")
    more = ["--trust-task-code"] if trusted else []
    one_line_error(
        capsys,
        _argv(tiny_model_dir, task, "--include-path", *more),
        f"{task}:",
        "dataset loading script",
        "scripted.py",
    )
    assert not marker.exists()


@pytest.mark.parametrize("case", list(MODULES))
def test_trusted_task_python_that_fails_names_its_file_and_line(
    case: str, tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, line, what = MODULES[case]
    (tmp_path / "utils.py").write_text(source, encoding="utf-8")
    task = write_task(tmp_path, "hostile", ROWS, MC + "process_docs: !function utils.process\n")
    one_line_error(
        capsys,
        _argv(tiny_model_dir, task, "--include-path", "--trust-task-code"),
        f"{tmp_path / 'utils.py'}:{line}:",
        what,
    )


def test_the_example_tasks_run_without_the_flag_from_any_directory(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")  # nothing under the user's home
    monkeypatch.chdir(tmp_path)
    names = "probe_general_mc,probe_short_answer"
    argv = ["lmeval", "--model-dir", str(tiny_model_dir), "--units", "1:0", "--tasks", names]
    argv += ["--include-path", str(ROOT / "examples/lmeval/tasks"), "--limit", "3", "--bootstrap", "100"]
    code, stdout, err = exit_of([*argv, "--out", str(tmp_path / "out")], capsys)
    assert code == 0, err
    assert "probe_general_mc" in stdout and "probe_short_answer" in stdout


def _templates_in(node: Any, found: set[str]) -> None:
    import yaml

    if isinstance(node, yaml.ScalarNode):
        if node.tag != "!function" and ("{{" in node.value or "{%" in node.value):
            found.add(node.value)
    elif isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
        for child in node.value:
            for part in child if isinstance(child, tuple) else (child,):
                _templates_in(part, found)


def test_lm_evals_own_templates_render_as_in_its_plain_environment() -> None:
    """Every template of a seeded fifth of lm-eval's own task files, over documents whose fields are a string, a
    list or a number: the sandbox renders the same text, or fails where lm-eval fails; the check finds none unsafe."""
    import random

    import yaml
    from jinja2 import meta
    from lm_eval import utils

    from lmeval.tasks import _unsafe_template, sandboxed_task_templates

    files = sorted((Path(utils.__file__).parent / "tasks").rglob("*.yaml"))
    templates: set[str] = set()
    for path in random.Random(0).sample(files, len(files) // 5):
        try:
            _templates_in(yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader), templates)
        except yaml.YAMLError:
            continue
    plain = utils.env
    with sandboxed_task_templates():
        sandbox = utils.env
    assert sandbox is not plain and len(templates) > 300
    for template in sorted(templates):
        assert _unsafe_template(template) is None, template
        names = meta.find_undeclared_variables(plain.parse(template))
        for value in ("Alpha beta", ["one", "two", "three"], 1):
            doc = dict.fromkeys(names, value)
            outcomes = []
            for env in (plain, sandbox):
                try:
                    outcomes.append(env.from_string(template).render(**doc))
                except Exception as exc:  # the same failure, of whatever kind, on both sides
                    outcomes.append(type(exc).__name__)
            assert outcomes[0] == outcomes[1], (template, value, outcomes)


def test_a_models_endless_chat_template_is_one_line_under_lmeval(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
    (model / "chat_template.jinja").write_text(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", encoding="utf-8"
    )
    task = write_task(tmp_path, "plain", ROWS, MC)
    start = time.monotonic()
    code, _, err = exit_of(
        ["lmeval", "--model-dir", str(model), "--units", "1:0", "--tasks", str(task), "--chat-template"], capsys
    )
    last = err.strip().splitlines()[-1]  # after the progress lines: the model loads before lm-eval renders
    assert code == 2 and "Traceback" not in err and err.count("error:") == 1, err
    assert last.startswith("error: ") and "a template fails (TemplateBudgetError" in last, last
    assert time.monotonic() - start < 60

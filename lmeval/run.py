"""``run_lmeval``: any lm-evaluation-harness task before and after an edit, compared item by item.

The pipeline, in order:

1. check that lm-eval (the ``eval`` extra) is there, and keep the Hugging Face hub offline unless
   the environment says otherwise (``HF_DATASETS_OFFLINE`` / ``HF_HUB_OFFLINE``, default ``1``);
2. resolve the units with ``probe intervene``'s own resolver (:func:`interventions.ab.resolve_neurons`)
   and check them against the model built on the meta device (its layout, no weights);
3. find and load the tasks (names, groups, or task YAML files; ``--include-path`` adds local task
   directories, searched alone first so that a local task costs no index of lm-eval's 14,000): an
   unknown name, a task whose dataset must come from the hub, or a local task that names Python
   (``!function``) without ``--trust-task-code`` is one :class:`ProbeError` line before any weights
   load; task templates render in a budgeted sandbox (:mod:`lmeval.tasks`);
4. load the model once as ``probe-edited`` (:mod:`lmeval.model`) and build the arms
   with ``probe intervene``'s recipes (:mod:`interventions.recipes`), checked against it;
5. run lm-eval's :func:`lm_eval.simple_evaluate` with ``log_samples`` unedited, then once per
   arm (``--edit`` kinds, ``--dose`` factors) and per placebo arm, on the same loaded model;
6. compare every arm with the unedited pass item by item (:mod:`lmeval.compare`)
   and write ``lmeval_report.json``, ``lmeval_report.md`` and ``lmeval_items.jsonl``
   (:mod:`lmeval.report`), optionally into an A/B run's directory.

Example:
    >>> cfg = LMEvalConfig(tasks="mmlu,gsm8k", model_dir="m", units="20:3,20:9", factor=0.0)
    >>> cfg.tasks, cfg.ab_config().factors
    (['mmlu', 'gsm8k'], [0.0])
    >>> report = run_lmeval(cfg)            # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from core.errors import ProbeError
from core.progress import is_terminal
from core.records import to_json
from interventions.config import ABConfig
from interventions.results import NoPlacebo
from lmeval.arms import checked_neurons, edit_arms, skeleton
from lmeval.compare import GroupInfo, Items, TaskInfo, add_placebo, compare_pass, identical, items_of
from lmeval.config import LMEvalConfig
from lmeval.estimate import pass_stage
from lmeval.report import (
    ArmReport,
    LMEvalReport,
    PlaceboPasses,
    PlaceboPassesSkipped,
    UneditedPass,
    include_in_ab,
    write_report,
)
from lmeval.tasks import TaskGate, own_task_folder, sandboxed_task_templates, task_code_error, template_error

Progress = Callable[[str], None]

_TRUE = {"1", "ON", "YES", "TRUE"}


# --- the tasks ------------------------------------------------------------------------------------------------------


@dataclass
class TaskSet:
    """The loaded tasks: the manager that found them, the names as given, and what the comparison needs of each."""

    manager: Any
    names: list[str]
    infos: dict[str, TaskInfo]
    groups: dict[str, GroupInfo]
    gate: TaskGate


@contextmanager
def offline_hub() -> Iterator[bool]:
    """Within the block the hub is off unless ``HF_DATASETS_OFFLINE`` (else ``HF_HUB_OFFLINE``) says ``0``;
    yields whether it is off."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", os.environ["HF_HUB_OFFLINE"])
    offline = os.environ["HF_DATASETS_OFFLINE"].strip().upper() in _TRUE
    import datasets.config
    import huggingface_hub.constants

    # both read the environment once, at import; a process that imported them online is made to agree here
    saved = datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = offline
    try:
        yield offline
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved


@contextmanager
def lm_eval_warnings_off() -> Iterator[None]:
    """lm-eval's log below ERROR, ``datasets``' progress bars off and its git lookup quiet within the block: lm-eval
    repeats its task-loading advice on every pass, a bar would stand before an ``error:`` line, and its
    ``git describe`` printed "fatal: not a git repository" outside a checkout; our report says what matters. In a log
    (stderr a file or a pipe) its per-task request-building bar is off too: the ``lm-eval`` stage prints the lines."""
    import functools
    import logging

    import datasets
    import lm_eval.api.task as task_module
    import lm_eval.evaluator as evaluator
    from tqdm import tqdm

    logger = logging.getLogger("lm_eval")
    level, bars_on = logger.level, datasets.is_progress_bar_enabled()
    lookup, evaluator.get_git_commit_hash = evaluator.get_git_commit_hash, _quiet_git_hash
    task_bar = task_module.tqdm
    if not is_terminal(sys.stderr):
        task_module.tqdm = functools.partial(tqdm, disable=True)
    logger.setLevel(logging.ERROR)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        task_module.tqdm = task_bar
        evaluator.get_git_commit_hash = lookup
        logger.setLevel(level)
        if bars_on:
            datasets.enable_progress_bars()


def _quiet_git_hash() -> str | None:
    """``lm_eval.loggers.utils.get_git_commit_hash`` with git's stderr kept from the terminal."""
    import subprocess

    from lm_eval.loggers.utils import get_commit_from_path

    try:
        done = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, check=True)
    except (subprocess.CalledProcessError, FileNotFoundError):
        return cast("str | None", get_commit_from_path(os.getcwd()))
    return done.stdout.strip()


def _needs_network(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return isinstance(exc, ConnectionError) or any(
        k in text
        for k in ("OfflineModeIsEnabled", "Couldn't reach", "offline mode", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


@contextmanager
def task_errors(what: str, loading: bool = True, code_dirs: set[Path] | None = None) -> Iterator[None]:
    """A task that needs the hub, a task template Jinja refuses, what a trusted task's Python (in ``code_dirs``)
    raises, and (``loading``) a task that cannot load (a missing file, a wrong YAML), as one :class:`ProbeError`
    line; while evaluating, anything else keeps its traceback (it is a bug, not the user's task)."""
    import yaml

    try:
        yield
    except ProbeError:
        raise
    except Exception as exc:  # lm-eval and datasets raise anything from a user's task definition
        own = task_code_error(exc, code_dirs or set(), what) or template_error(exc, what)
        if own is not None:
            raise own from None
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if _needs_network(exc):
            raise ProbeError(
                f"task {what} needs its dataset from the Hugging Face Hub, which this run does not reach ({first}); "
                "nothing downloads at run time: run it where the hub is reachable with HF_DATASETS_OFFLINE=0 "
                "HF_HUB_OFFLINE=0 (or with the dataset in the local cache), or use a task over local files "
                "(--include-path, see docs/lmeval.md)"
            ) from None
        if isinstance(exc, ModuleNotFoundError) and loading:
            raise ProbeError(
                f"task {what} needs the Python package {exc.name!r}, which is not installed: "
                "install lm-eval's extra for the "
                'task (for IFEval: pip install "lm_eval[ifeval]==0.4.13") or the package itself'
            ) from None
        user_side = (KeyError, ValueError, TypeError, OSError, yaml.YAMLError, AttributeError, ImportError)
        if loading and isinstance(exc, RuntimeError) and "Dataset scripts are no longer supported" in first:
            raise ProbeError(
                f"task {what}: its dataset is a loading script, which is code and never run: {first}"
            ) from None
        if loading and isinstance(exc, user_side):
            raise ProbeError(f"task {what}: lm-eval could not load it: {type(exc).__name__}: {first}") from None
        raise


def _known(manager: Any, name: str) -> list[str]:
    """The task names ``name`` stands for in ``manager`` (itself, a YAML file, or a wildcard's matches);
    ``[]`` if none."""
    if name.endswith((".yaml", ".yml")) and Path(name).is_file():
        return [name]
    if name in manager.all_tasks:
        return [name]
    return list(manager.match_tasks([name])) if any(c in name for c in "*?[") else []


def load_tasks(
    names: list[str], include_path: list[str | Path], trust_code: bool = False, own: Path | None = None
) -> TaskSet:
    """Find every name (local task directories first, alone), load each task, and describe it for the comparison;
    a local task that names Python is refused unless ``trust_code`` (:class:`TaskGate`) or it is one of the
    toolkit's own, in folder ``own`` (:func:`lmeval.tasks.own_task_folder`)."""
    include_path = [own, *include_path] if own is not None else include_path
    from lm_eval.tasks import TaskManager

    paths = [str(p) for p in include_path] or None
    manager = TaskManager(include_path=paths, include_defaults=False) if paths else None
    if manager is None or not all(_known(manager, n) for n in names):
        manager = TaskManager(include_path=paths)  # lm-eval's whole index: 10-20 s
    expanded = []
    for name in names:
        found = _known(manager, name)
        if not found:
            raise ProbeError(
                f"--tasks: unknown lm-eval task {name!r}{_suggest(name, manager.all_tasks)}; give a task, group or tag "
                "name lm-eval knows (`lm_eval ls tasks`), a task YAML file, or --include-path DIR for local tasks"
            )
        expanded += [n for n in found if n not in expanded]
    infos: dict[str, TaskInfo] = {}
    groups: dict[str, GroupInfo] = {}
    given: dict[str, str] = {}
    gate = TaskGate(trust_code, trusted={own.resolve()} if own is not None else set())
    for name in expanded:
        with task_errors(repr(name), code_dirs=gate.dirs), gate.active(), lm_eval_warnings_off():
            loaded = manager.load([name])
        for task_name, task in loaded["tasks"].items():
            if task_name in given:
                raise ProbeError(
                    f"--tasks: task {task_name!r} comes with both {given[task_name]!r} and {name!r}; "
                    "lm-eval runs a task once, so give it once"
                )
            given[task_name] = name
            infos[task_name] = TaskInfo(
                task.get_config("output_type"), dict(task.aggregation()), dict(task.higher_is_better())
            )
        for group_name, group in loaded["groups"].items():
            metrics = tuple(
                (m.metric, tuple(m.filter_list) if m.filter_list else None, bool(m.weight_by_size))
                for m in (group.aggregate_metric_list or [])
                if m.aggregation == "mean"
            )
            groups[group_name] = GroupInfo(tuple(t.task_name for t in group.get_all_tasks()), metrics)
    return TaskSet(manager, expanded, infos, groups, gate)


def _suggest(name: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(name, known, n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


# --- the passes -----------------------------------------------------------------------------------------------------


@dataclass
class Pass:
    """One lm-eval run: lm-eval's own results, the items, the time, what the hooks did."""

    results: dict[str, Any]
    items: dict[str, Items]
    seconds: float
    hook_stats: dict[str, int]


def evaluate(lm: Any, tasks: TaskSet, config: LMEvalConfig) -> Pass | None:
    """One lm-eval run over the tasks with whatever edits ``lm`` has in use; None on a data-parallel helper rank
    (lm-eval gathers the items on rank 0)."""
    import lm_eval

    start = time.perf_counter()
    what = ", ".join(repr(n) for n in tasks.names)
    with task_errors(what, loading=False, code_dirs=tasks.gate.dirs), tasks.gate.active(), lm_eval_warnings_off():
        out = lm_eval.simple_evaluate(
            model=lm,
            tasks=list(tasks.names),
            task_manager=tasks.manager,
            limit=config.limit,
            num_fewshot=config.num_fewshot,
            log_samples=True,
            bootstrap_iters=0,
            apply_chat_template=config.apply_chat_template,
            gen_kwargs=config.gen_kwargs,
        )
    if out is None:
        if lm.rank != 0:
            return None
        raise ProbeError("lm-eval returned no results")
    return Pass(out["results"], items_of(out["samples"]), time.perf_counter() - start, lm.edit_stats())


def _main_pass(lm: Any, tasks: TaskSet, config: LMEvalConfig) -> Pass:
    """:func:`evaluate` on rank 0 (or the one process), where lm-eval always returns the items."""
    done = evaluate(lm, tasks, config)
    if done is None:  # pragma: no cover - lm-eval returns results on rank 0
        raise ProbeError("lm-eval returned no results on rank 0")
    return done


def _flags(arm: Any, dtype: Any, stats: dict[str, int], same: bool) -> list[str]:
    """Why this arm's Δ may be a no-op: the edit cannot change a value, the hooks changed none,
    or no item's output changed."""
    flags = [reason for reason in (e.noop_reason(dtype) for e in arm.edits) if reason]
    if not flags and stats.get("calls") and not stats.get("values_changed"):
        flags.append(f"the hooks ran {stats['calls']} times and changed no activation value")
    if same:
        flags.append(
            "every item's log-likelihoods and generated text are identical to the unedited pass's: "
            "every Δ is exactly 0 by construction, not a measured null"
        )
    return flags


def resolve_model_dir(ab: ABConfig) -> Path:
    """--model-dir, else the run's model (``--model`` of the pair)."""
    from interventions.plan import resolve_sources

    if ab.model_dir is not None:
        return Path(ab.model_dir)
    if ab.run_dir is None:
        raise ProbeError("give --model-dir (the model to evaluate) or a RUN_DIR whose --model to evaluate")
    return resolve_sources(ab)[0]


def run_lmeval(config: LMEvalConfig, progress: Progress | None = None) -> LMEvalReport | None:
    """Run the unedited pass and every edited arm over ``config.tasks``; write the report if ``config.out_dir``.

    Under ``accelerate launch`` every process loads the model and runs every pass with the same edits on its share
    of the items; rank 0 compares, writes and returns the report, the others return None."""
    from lmeval.model import register, require_lm_eval

    say = progress or (lambda _: None)
    lm_eval = require_lm_eval()
    ab = config.ab_config()
    model_dir = resolve_model_dir(ab)
    ab = replace(ab, model_dir=model_dir)
    # units that do not fit the model: one line before anything loads
    neurons = checked_neurons(ab, skeleton(model_dir))
    names = cast("list[str]", config.tasks)
    new_tokens = ab.generation.max_new_tokens
    with offline_hub(), sandboxed_task_templates(), own_task_folder(names, ab, model_dir, new_tokens) as own:
        tasks = load_tasks(names, config.include_path, config.trust_task_code, own)
        say(f"loading {model_dir}")
        lm = register()(pretrained=model_dir, dtype=config.dtype, device=config.device, batch_size=config.batch_size)
        neurons, arms = edit_arms(ab, lm.model, model_dir, neurons)
        if lm.rank != 0:
            _helper_passes(lm, tasks, config, arms)
            return None
        return _run(config, ab, lm, tasks, neurons, arms, model_dir, say, lm_eval.__version__)


def _helper_passes(lm: Any, tasks: TaskSet, config: LMEvalConfig, arms: list[Any]) -> None:
    """A data-parallel helper rank: the passes of :func:`_run` in its order, with the same edits, on its share."""
    lm.use(())
    evaluate(lm, tasks, config)
    for arm in arms:
        lm.use(arm.edits, arm.label)
        evaluate(lm, tasks, config)
        if _placebo_skipped(arm, lm, config) is None:
            for k, edits in enumerate(arm.placebo_edits):
                lm.use(edits, f"{arm.name} placebo {k}")
                evaluate(lm, tasks, config)
    lm.use(())


def _placebo_skipped(arm: Any, lm: Any, config: LMEvalConfig) -> PlaceboPassesSkipped | NoPlacebo | None:
    """Why the arm gets no placebo passes (None: it gets them)."""
    if not arm.placebo or not config.placebo:
        return NoPlacebo()
    if any(e.noop_reason(lm.model.dtype) for e in arm.edits):
        return PlaceboPassesSkipped(0, f"the edit is a no-op in {config.dtype}")
    return None


def _run(
    config: LMEvalConfig,
    ab: ABConfig,
    lm: Any,
    tasks: TaskSet,
    neurons: Any,
    arms: list[Any],
    model_dir: Path,
    say: Progress,
    version: str,
) -> LMEvalReport:
    from interventions.plan import provenance_warnings
    from interventions.selection import describe

    passes = 1 + len(arms) + sum(config.placebo for arm in arms if arm.placebo)
    say(
        f"{passes} lm-eval passes over {', '.join(tasks.names)}: unedited, {len(arms)} arm(s)"
        + (f", {passes - 1 - len(arms)} placebo arms" if passes - 1 - len(arms) else "")
    )
    with pass_stage(lm, passes, model_dir) as passed:  # in a log: a start line with the estimate, a line a minute
        lm.use(())
        base = _main_pass(lm, tasks, config)
        passed()
        say(f"unedited: {base.seconds:.0f} s")
        reports, arm_items = [], {}
        for number, arm in enumerate(arms, 1):
            arm_report, arm_items[arm.name] = _arm_pass(
                arm, f"arm {number}/{len(arms)}", lm, tasks, config, base, say, passed
            )
            reports.append(arm_report)
    lm.use(())
    report = LMEvalReport(
        str(model_dir),
        ab.model,
        config.dtype,
        str(lm.device),
        version,
        list(tasks.names),
        config.limit,
        config.num_fewshot,
        describe(neurons),
        UneditedPass(base.seconds, base.results),
        to_json(config),
        provenance_warnings(neurons, ab.model, model_dir),
        arms=reports,
    )
    if config.out_dir is not None:
        write_report(report, base.items, arm_items, Path(config.out_dir))
        if config.ab_report is not None:
            include_in_ab(report, Path(config.ab_report))
    return report


def _arm_pass(
    arm: Any,
    title: str,
    lm: Any,
    tasks: TaskSet,
    config: LMEvalConfig,
    base: Pass,
    say: Progress,
    passed: Callable[[], None],
) -> tuple[ArmReport, dict[str, Items]]:
    """One arm's lm-eval pass (and its placebo passes), compared item by item with the unedited ``base``."""
    lm.use(arm.edits, arm.label)
    run = _main_pass(lm, tasks, config)
    passed()
    rows = compare_pass(
        tasks.infos, tasks.groups, base.items, run.items, n_resamples=config.n_bootstrap, seed=config.seed
    )
    flags = _flags(arm, lm.model.dtype, run.hook_stats, identical(base.items, run.items))
    say(f"{title}: {arm.label}: {run.seconds:.0f} s")
    placebo = _placebo(arm, lm, tasks, config, base, rows, say, passed)
    report = ArmReport(
        arm.name, arm.label, arm.describe(), run.seconds, run.hook_stats, flags, placebo, run.results, rows=rows
    )
    return report, run.items


def _placebo(
    arm: Any,
    lm: Any,
    tasks: TaskSet,
    config: LMEvalConfig,
    base: Pass,
    rows: list[Any],
    say: Progress,
    passed: Callable[[], None],
) -> PlaceboPassesSkipped | PlaceboPasses | NoPlacebo:
    """The arm's placebo passes (the edits' placebo family), and where each row's Δ falls among theirs."""
    from interventions.recipes import placebo_family

    skipped = _placebo_skipped(arm, lm, config)
    if skipped is not None:
        return skipped
    sets = arm.placebo_edits  # drawn by the plan (interventions.plan.planned_arms)
    placebo_rows = []
    for k, edits in enumerate(sets):
        lm.use(edits, f"{arm.name} placebo {k}")
        run = _main_pass(lm, tasks, config)
        passed()
        say(f"{arm.name}: placebo {k + 1}/{len(sets)}: {run.seconds:.0f} s")
        placebo_rows.append(
            compare_pass(tasks.infos, tasks.groups, base.items, run.items, n_resamples=100, seed=config.seed)
        )
    add_placebo(rows, placebo_rows)
    return PlaceboPasses(
        n_sets=len(sets),
        seed=config.seed,
        family=placebo_family(arm),
        sets=[[e.describe().get("units") for e in edits] for edits in sets],
    )

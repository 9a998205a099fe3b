"""Which of ``probe replicate``'s stages are complete in a run directory, so that a second call skips them.

Each check reads only what the stage writes and what it depends on: a stage is complete when its
outputs exist, are newer than their inputs, and were made from the same models and options.

Example:
    >>> import tempfile
    >>> run = Path(tempfile.mkdtemp()); (run / "test.jsonl").touch()
    >>> newer(run / "eval.json", run / "test.jsonl")   # no output yet
    False
    >>> (run / "eval.json").touch(); newer(run / "eval.json", run / "test.jsonl"), analysis_complete(run)
    (True, False)
    >>> analysis_complete(Path("runs/replicate-smollm2"))          # doctest: +SKIP
    True
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ProbeError
from core.run_dir import LocalizeDir, RunDir
from study.layout import INTERVENTION_DIR, LOCALIZE_DIR

if TYPE_CHECKING:
    from study.replicate_config import ReplicateOptions


def newer(path: Path, *than: Path) -> bool:
    """``path`` exists and is at least as new as each of ``than`` that exists."""
    return path.is_file() and all(not t.exists() or path.stat().st_mtime >= t.stat().st_mtime for t in than)


def expected_rows(data_file: Path) -> dict[str, int]:
    """Rows per capability in the data file (capabilities without rows left out)."""
    from core.capabilities import ALL_CAPABILITIES
    from core.rows import group_by_capability, read_test_rows

    groups = group_by_capability(read_test_rows(data_file), list(ALL_CAPABILITIES))
    return {cap.value: len(items) for cap, items in groups.items() if items}


def recorded_complete(options: ReplicateOptions) -> bool:
    """Every capability of the data file recorded in full for both models, from these model directories."""
    from probes.store import RunReader

    if not RunDir(options.out_dir).activations.is_file():
        return False
    try:
        with RunReader(options.out_dir) as run:
            same = {Path(run.settings.sft_dir).resolve(), Path(run.settings.dpo_dir).resolve()} == {
                options.models.sft.resolve(),
                options.models.dpo.resolve(),
            }
            counts = {c: run.n_samples(c) for c in run.capabilities()}
    except ProbeError:
        return False
    return same and all(counts.get(cap, 0) >= n for cap, n in expected_rows(options.data_file).items())


def analysis_complete(out: Path) -> bool:
    from analysis.summary import AnalysisSummary
    from probes.store import RunReader

    summary = RunDir(out).analysis.summary
    if not newer(summary, RunDir(out).activations):
        return False
    try:
        with RunReader(out) as run:
            recorded = set(run.capabilities())
        return recorded <= set(AnalysisSummary.load(summary).capabilities)
    except ProbeError:
        return False


def explained(out: Path, capability: str) -> bool:
    analysis = RunDir(out).analysis
    return any(newer(p, analysis.summary) for p in analysis.explain_records(capability))


def intervention_complete(out: Path, given: dict[str, Any]) -> bool:
    from interventions.results import ABReport

    path = RunDir(out).intervention(INTERVENTION_DIR).report
    if not newer(path, RunDir(out).analysis.summary):
        return False
    try:
        report = ABReport.load(path)
    except ProbeError:
        return False
    recorded = {**report.config, "split": report.split}  # a report older than the split judged the test split
    return all(recorded.get(k) == v for k, v in given.items())


def localize_complete(out: Path, given: dict[str, Any]) -> bool:
    """The localize stage's ``localize.json`` exists, is newer than the recording it ranked from, and was made with
    the settings ``given`` (:meth:`study.replicate_config.ReplicateOptions.localization`)."""
    from localize.records import LocalizeReport

    path = LocalizeDir(RunDir(out).localize / LOCALIZE_DIR).report
    if not newer(path, RunDir(out).activations):
        return False
    try:
        report = LocalizeReport.load(path)
    except ProbeError:
        return False
    return all(report.settings.get(k) == v for k, v in given.items())


def evaluation_complete(options: ReplicateOptions) -> bool:
    """The evaluation file judges these two models on the split asked, on as many rows as asked."""
    from core.records import read_record
    from study.stored import EvalRecord

    path = RunDir(options.out_dir).eval_file
    if not path.is_file():
        return False
    try:
        evaluation = read_record(EvalRecord, path, "evaluation")
    except ProbeError:
        return False
    dirs = {Path(evaluation.sft.model_dir).resolve(), Path(evaluation.dpo.model_dir).resolve()}
    rows_file = options.eval_file()
    if evaluation.test_file and Path(evaluation.test_file).resolve() != rows_file.resolve():
        return False
    total = sum(expected_rows(rows_file).values())
    wanted = total if options.eval_rows is None else min(options.eval_rows, total)
    with_base = options.models.base is None or evaluation.base is not None
    return (
        dirs == {options.models.sft.resolve(), options.models.dpo.resolve()}
        and evaluation.rows() == wanted
        and with_base
    )


def analysed(out: Path) -> list[str]:
    """The capabilities of the run's saved analysis ([] without one)."""
    from analysis.summary import AnalysisSummary

    try:
        return list(AnalysisSummary.load(RunDir(out).analysis.summary).capabilities)
    except ProbeError:
        return []


def all_explained(out: Path) -> bool:
    caps = analysed(out)
    return bool(caps) and all(explained(out, c) for c in caps)

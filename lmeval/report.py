"""The benchmark report of ``probe lmeval``: ``lmeval_report.json``, ``lmeval_report.md`` and ``lmeval_items.jsonl``.

The markdown has one table per edited arm, a row per task (or group), metric and lm-eval
filter: n, the unedited and edited scores, Δ with its 95% paired bootstrap CI, the exact
McNemar p where the metric is 0/1 per item, the items whose output changed, and (with
``--placebo``) where Δ falls among random-unit placebo arms. A 0/1 metric is shown in percent and
Δ in percentage points; any other metric (perplexity, BLEU) in its own units. No-op warnings are
printed above the table they qualify. ``lmeval_items.jsonl`` holds, per task, item and filter,
every pass's metric values and responses, for auditing one item.

:func:`include_in_ab` puts the table into an A/B run's directory: the two report files beside
the A/B report, and a section appended to its markdown (replaced, not repeated, when the
same tasks are measured again).

Example:
    >>> from interventions.cells import fmt_change, fmt_value
    >>> fmt_value(0.625, True), fmt_change(-0.125, True), fmt_value(12.3456, False), fmt_change(0.5, False)
    ('62.5%', '-12.5', '12.35', '+0.5')
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.atomic import write_atomic
from core.errors import ProbeError
from core.records import from_json, nonfinite_as_null, to_json
from core.run_dir import InterventionDir, LMEvalDir
from interventions.cells import (
    AFTER,
    BEFORE,
    CHANGED,
    CI,
    DELTA,
    PLACEBO,
    Column,
    N,
    P,
    Placement,
    Row,
    Strong,
    extra,
)
from interventions.cells import markdown as markdown_table
from interventions.results import NoPlacebo, Placebo, UnitsSummary
from lmeval.compare import Items, MetricRow

SECTION = "<!-- probe lmeval -->"


@dataclass(kw_only=True)
class PlaceboPasses(Placebo):
    """The placebo passes an arm was compared with (each a full lm-eval pass)."""

    sets: list[list[Any]]  # per pass, each edit's units ([[layer, unit], ...]; None for a direction)


@dataclass
class PlaceboPassesSkipped:
    """An arm whose edit is a no-op in the dtype: no placebo pass."""

    n_sets: int
    skipped: str  # why


@dataclass
class ArmReport:
    """One edited pass against the unedited one (``rows`` last in the file)."""

    name: str
    label: str
    edits: list[dict[str, Any]]  # each edit's full description (its kind's own keys)
    seconds: float
    hook_stats: dict[str, int]
    flags: list[str] = field(default_factory=list)  # why a null Δ may be a no-op
    placebo: PlaceboPassesSkipped | PlaceboPasses | NoPlacebo = field(default_factory=NoPlacebo)
    lm_eval_results: dict[str, Any] = field(default_factory=dict)  # lm-eval's own "results" of this pass
    rows: list[MetricRow] = field(kw_only=True)


@dataclass
class UneditedPass:
    """The unedited lm-eval pass: how long it took, and lm-eval's own "results"."""

    seconds: float
    lm_eval_results: dict[str, Any]


@dataclass
class LMEvalReport:
    """Everything ``probe lmeval`` measured, JSON-ready (``arms`` last in the file)."""

    model_dir: str
    model: str
    dtype: str
    device: str
    lm_eval_version: str
    tasks: list[str]
    limit: int | None
    num_fewshot: int | None
    neurons: UnitsSummary
    baseline: UneditedPass
    config: dict[str, Any]  # LMEvalConfig's settings
    warnings: list[str] = field(default_factory=list)
    paths: dict[str, str] = field(default_factory=dict)
    version: int = 1  # a field, not the codec's VERSION: the file has it here, after paths
    arms: list[ArmReport] = field(kw_only=True)

    def arm(self, name: str) -> ArmReport:
        found = [a for a in self.arms if a.name == name]
        if not found:
            raise ProbeError(f"no arm {name!r} in this report (arms: {', '.join(a.name for a in self.arms)})")
        return found[0]

    @classmethod
    def load(cls, path: str | Path) -> LMEvalReport:
        return from_json(cls, json.loads(Path(path).read_text(encoding="utf-8")))


def markdown(report: LMEvalReport, heading: str = "#") -> str:
    """The report as markdown (``heading`` sets the top level, so it can sit inside an A/B report)."""
    out = [
        f"{heading} lm-evaluation-harness before and after the edit",
        "",
        f"Model `{report.model_dir}` ({report.model}, {report.dtype}, {report.device}); "
        f"lm-eval {report.lm_eval_version}; tasks {', '.join(report.tasks)}"
        + (f"; at most {report.limit} items per task" if report.limit else "")
        + (f"; {report.num_fewshot}-shot" if report.num_fewshot is not None else "")
        + ".",
        "",
        f"Units: {_units(report.neurons)}. Unedited pass: {report.baseline.seconds:.0f} s.",
        "",
    ]
    out += [f"**warning:** {w}" for w in report.warnings]
    for arm in report.arms:
        out += ["", f"{heading}# {arm.label} ({arm.seconds:.0f} s)", ""]
        out += [f"**NO-OP WARNING:** {flag}" for flag in arm.flags] + ([""] if arm.flags else [])
        drawn = arm.placebo if isinstance(arm.placebo, PlaceboPasses) and arm.placebo.n_sets else None
        out += markdown_table(columns(drawn is not None), [table_row(row, Strong) for row in arm.rows])
        if drawn:
            out += [
                "",
                f"Placebo: {drawn.n_sets} sets ({drawn.family}, "
                f"seed {drawn.seed}); the column gives the percentile of Δ among theirs, the "
                "empirical two-sided p and the number of sets.",
            ]
    out += [
        "",
        "Δ = edited − unedited on the same items (in percentage points for a 0/1 metric); "
        "95% CI: paired bootstrap over items (for a group, within each task); "
        "McNemar: exact, on the items whose 0/1 score flipped (lost/gained); *changed*: items whose answer of highest "
        "log-likelihood (multiple choice), generated text, or log-likelihood (scoring tasks) "
        "differs from the unedited pass.",
        "",
    ]
    return "\n".join(out)


def _units(neurons: UnitsSummary) -> str:
    layers = ", ".join(f"{n} in layer {layer}" for layer, n in neurons.per_layer.items())
    return f"{neurons.size} of {neurons.hook} ({layers})"


def columns(placebo: bool) -> list[Column]:
    """The benchmark table's columns (``placebo``: with the placebo percentile)."""
    head = [extra("task"), extra("metric"), extra("filter"), N, BEFORE, AFTER, DELTA.named("Δ"), CI, P]
    return head + [CHANGED.named("changed")] + ([PLACEBO] if placebo else [])


def table_row(row: MetricRow, group: Callable[[str], str] = str) -> Row:
    """One task, metric and filter as a table row (``group`` marks a group's name: bold in markdown)."""
    effect = row.effect
    return Row(
        effect,
        binary=effect.binary,
        flips=effect.binary,
        placebo=Placement.of(row.placebo),
        changed=None if row.items_changed is None else (row.items_changed, effect.n),
        extra={
            "task": group(f"{row.task} (group)") if row.group else row.task,
            "metric": row.metric,
            "filter": row.filter,
        },
    )


def item_records(base: dict[str, Items], arms: dict[str, dict[str, Items]]) -> list[dict[str, Any]]:
    """Per task, filter and item: every pass's metric values and filtered responses."""
    out = []
    for task, items in sorted(base.items()):
        for flt, responses in items.responses.items():
            for doc in sorted(responses):
                record: dict[str, Any] = {"task": task, "filter": flt, "doc_id": doc, "target": items.targets.get(doc)}
                for name, passes in {"unedited": base, **arms}.items():
                    got = passes.get(task, Items())
                    record[name] = {
                        "response": got.responses.get(flt, {}).get(doc),
                        **{m: v.get(doc) for m, v in got.values.get(flt, {}).items()},
                    }
                out.append(record)
    return out


def write_report(
    report: LMEvalReport, base: dict[str, Items], arms: dict[str, dict[str, Items]], out_dir: Path
) -> LMEvalReport:
    """Write the three files atomically into ``out_dir``; fills ``report.paths``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = report_files(out_dir)
    report.paths = {kind: str(path) for kind, path in files.items()}
    lines = [json.dumps(r, ensure_ascii=False, default=_plain) for r in item_records(base, arms)]
    write_atomic(files["items"], "\n".join(lines) + "\n")
    write_atomic(files["markdown"], markdown(report))
    write_atomic(
        files["json"], json.dumps(nonfinite_as_null(to_json(report)), indent=1, default=_plain, allow_nan=False) + "\n"
    )
    return report


def report_files(out_dir: Path) -> dict[str, Path]:
    """The three files of a report in ``out_dir``, by kind."""
    files = LMEvalDir(out_dir)
    return {"json": files.report, "markdown": files.markdown, "items": files.items}


def include_in_ab(report: LMEvalReport, ab_dir: Path) -> Path:
    """Append (or replace) the report's section in the markdown report of ``ab_dir``; returns that file."""
    target = InterventionDir(ab_dir).markdown
    if not target.is_file():
        raise ProbeError(
            f"--ab-report {ab_dir}: no {target.name} there; give the output directory of `probe intervene`"
        )
    text = target.read_text(encoding="utf-8")
    kept = text.split(SECTION)[0].rstrip()
    files = [Path(report.paths[k]) for k in ("json", "items") if k in report.paths]
    link = "Files: " + ", ".join(f"`{f.name if f.parent.resolve() == ab_dir.resolve() else f}`" for f in files) + "."
    write_atomic(target, f"{kept}\n\n{SECTION}\n{markdown(report, heading='##')}\n{link}\n")
    return target


def _plain(value: Any) -> Any:
    """numpy scalars and tuples from lm-eval's samples, as JSON values."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return str(value)

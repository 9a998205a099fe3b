"""Write an A/B run to disk: its report as JSON and markdown, and its generations (:mod:`core.run_dir`).

The markdown starts with one table of every arm on the target capability, the same columns
for every edit kind: Δ with its 95% CI, the exact McNemar p, where Δ falls among the arm's
placebo arms, and how many generations changed at all. Then, per arm, the table a reader of
the paper wants to see: per capability, compliance before and after with the same columns. The no-op guard's flags are
printed above the table they qualify, never in a footnote. All files are written
atomically (temporary file, then rename) so an interrupted run never leaves a half report.

Example:
    >>> from interventions.cells import fmt_delta, fmt_pct
    >>> fmt_pct(0.905), fmt_delta(0.015)
    ('90.5%', '+1.5')
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from access.generation import Generations
from core.atomic import write_atomic
from core.capabilities import capabilities_of
from core.run_dir import InterventionDir
from core.schema import TestRow
from interventions.cells import (
    AFTER,
    BEFORE,
    BEFORE_AFTER,
    CHANGED,
    CI,
    DELTA,
    PLACEBO,
    VERDICT,
    N,
    P,
    Placement,
    Row,
    Strong,
    extra,
    fmt_per_unit,
)
from interventions.cells import markdown as markdown_table
from interventions.outcome_kinds import outcome_label
from interventions.placebos import forced_line, generated_line
from interventions.results import (
    ABReport,
    ArmPlacebo,
    ArmResult,
    CapabilityResult,
    NoPlacebo,
    PlaceboSkipped,
    RuleSelection,
    Selection,
)
from interventions.scoring import ArmScores


def capability_row(c: CapabilityResult, **cells: str) -> Row:
    """One capability under one arm as a table row (``cells``: the table's own columns)."""
    return Row(c.effect, placebo=Placement.of(c.placebo), changed=(c.rows_changed, c.n_rows), extra=cells)


def _capability(c: CapabilityResult) -> str:
    return Strong(c.capability) if c.target else c.capability


ARM_COLUMNS = [
    extra("capability"),
    N,
    BEFORE,
    AFTER,
    DELTA,
    CI,
    P,
    PLACEBO,
    CHANGED,
    extra("rouge", "ROUGE-L before→after"),
    extra("bleu", "BLEU before→after"),
]


ARM_TERMINAL_COLUMNS = ARM_COLUMNS[:-2]  # the terminal leaves out ROUGE-L and BLEU


def arm_rows(arm: ArmResult) -> list[Row]:
    """Per capability, compliance before and after under one arm."""
    return [
        capability_row(
            c,
            capability=_capability(c),
            rouge=f"{c.rouge_l_before:.3f}→{c.rouge_l_after:.3f}",
            bleu=f"{c.bleu_before:.1f}→{c.bleu_after:.1f}",
        )
        for c in arm.capabilities
    ]


def arm_table(arm: ArmResult) -> list[str]:
    return markdown_table(ARM_COLUMNS, arm_rows(arm))


def markdown(report: ABReport) -> str:
    n = report.neurons
    layers = ", ".join(f"{layer}:{count}" for layer, count in n.per_layer.items())
    baselines = "; ".join(
        f"{name}: {b.rows} prompts, {b.tokens} generated tokens" for name, b in report.baselines.items()
    )
    out = [
        f"# A/B intervention: {report.capability} ({report.model} model)",
        "",
        f"- model: `{report.model_dir}` ({report.dtype}, backend {report.backend}); data: `{report.data_file}`; "
        f"judge: {report.judge}",
        f"- units: {n.size} units of `{n.hook}` (layer:count {layers}); selection: "
        + (
            "every rule's own units, below" if isinstance(report.selection, Selection) else f"{n.selection or n.metric}"
        ),
        f"- baselines: {baselines}",
        "",
    ]
    guard_flags = {flag for arm in report.arms for flag in [*arm.guard.flags, *arm.guard.faults]}
    other = [w for w in report.warnings if w not in guard_flags]
    out.extend(f"> **WARNING:** {w}" for w in other)
    if other:
        out.append("")
    if isinstance(report.selection, Selection):
        out.extend(selection_markdown(report, report.selection))
    out.extend(summary_table(report))
    for arm in report.arms:
        out.append(f"## {arm.label or arm.name} ({arm.role}, {arm.model} model)")
        out.append("")
        drawn = [line for line in (generated_line(arm.capabilities), forced_line(arm.outcomes)) if line]
        out.append(f"- placebo: {'; '.join([_placebo_line(arm.placebo), *drawn])}")
        out.append("")
        out.extend(f"> **INVALID:** {fault}" for fault in arm.guard.faults)
        out.extend(f"> **NO-OP WARNING:** {flag}" for flag in arm.guard.flags)
        if arm.guard.flags or arm.guard.faults:
            out.append("")
        out.extend(arm_table(arm) if arm.capabilities else ["(outcomes only: nothing generated)"])
        out.append("")
    if len(report.scale_arms) > 1 and not isinstance(report.selection, Selection) and report.main.capabilities:
        out.extend(dose_table(report))
    return "\n".join(out) + "\n"


def _placebo_line(placebo: ArmPlacebo) -> str:
    if isinstance(placebo, NoPlacebo):
        return "none for this arm"
    text = f"{placebo.n_sets} {placebo.family or 'random matched sets'}, seed {placebo.seed}"
    return text + (f" (skipped: {placebo.skipped})" if isinstance(placebo, PlaceboSkipped) else "")


_ARM, _MODEL = extra("arm"), extra("model")
COHERENCE = extra("coherence", "SFT ppl of output (baseline→arm)")  # the coherence guard, beside compliance
SUMMARY_COLUMNS = [_ARM, _MODEL, BEFORE, AFTER, DELTA, CI, P, PLACEBO, CHANGED, COHERENCE, extra("noop", "no-op")]


SUMMARY_TERMINAL_COLUMNS = [_ARM, _MODEL, DELTA, CI, P, PLACEBO, CHANGED, COHERENCE]


def summary_rows(report: ABReport) -> list[Row]:
    """Every arm on the target capability, against the baseline of the model it ran on (arms that generated)."""
    return [
        capability_row(
            arm.capability(report.capability),
            arm=arm.name,
            model=arm.model,
            noop="INVALID" if arm.guard.faults else ("YES" if arm.guard.is_noop else "no"),
            coherence=arm.coherence.cell() if arm.coherence is not None else "—",
        )
        for arm in report.arms
        if arm.capabilities
    ]


def summary_table(report: ABReport) -> list[str]:
    rows = summary_rows(report)
    table = [f"## Every arm on {report.capability}", "", *markdown_table(SUMMARY_COLUMNS, rows), ""] if rows else []
    return table + outcome_table(report)


OUTCOME_COLUMNS = [
    _ARM,
    _MODEL,
    extra("outcome"),
    N,
    BEFORE.named("unedited"),
    AFTER.named("edited"),
    DELTA.named("Δ"),
    CI,
    PLACEBO,
    VERDICT,
]


def arm_outcome_rows(arm: ArmResult) -> list[Row]:
    """An arm's continuous outcomes (:mod:`interventions.outcomes`), one row per outcome."""
    return [
        Row(
            o.effect,
            binary=False,
            placebo=Placement.of(o.placebo),
            verdict=o.verdict,
            extra={"arm": arm.name, "model": arm.model, "outcome": outcome_label(o.outcome)},
        )
        for o in arm.outcomes
    ]


def outcome_rows(report: ABReport) -> list[Row]:
    """Every arm's continuous outcomes, one row per arm and outcome."""
    return [row for arm in report.arms for row in arm_outcome_rows(arm)]


def responses_line(report: ABReport) -> str:
    """Which response tokens the outcomes teacher-forced, and how many DPO pairs the margin rests on."""
    return (
        f"responses teacher-forced: {report.responses}; DPO margin on {report.outcome_pairs} pairs of the "
        f"{report.capability} DPO data; target: the other model of the pair"
    )


def outcome_table(report: ABReport) -> list[str]:
    """The continuous outcomes of every arm as markdown (nothing for a report without them)."""
    rows = outcome_rows(report)
    if not rows:
        return []
    return [
        f"## Continuous outcomes on {report.capability} (teacher-forced)",
        "",
        f"- {responses_line(report)}",
        "- gap closed: 1 − mean KL(target ‖ edited) / mean KL(target ‖ unedited); verdicts: docs/interventions.md",
        "",
        *markdown_table(OUTCOME_COLUMNS, rows),
        "",
    ]


_DOSE_COLUMNS = [
    extra("factor", numeric=True),
    extra("role"),
    AFTER,
    DELTA,
    CI,
    P,
    CHANGED,
    extra("dtype", "changed in dtype", numeric=True),
    extra("hook", "hook values changed", numeric=True),
    extra("noop", "no-op"),
]


def dose_table(report: ABReport) -> list[str]:
    rows = []
    for arm in report.scale_arms:
        g = arm.guard
        rows.append(
            Row(
                arm.capability(report.capability).effect,
                changed=(g.rows_changed, g.rows),
                extra={
                    "factor": repr(arm.factor),
                    "role": arm.role,
                    "dtype": f"{100 * g.changed_fraction_in_dtype:.1f}%",
                    "hook": "n/a" if g.values_changed is None else f"{g.values_changed}/{g.values_seen}",
                    "noop": "YES" if g.is_noop else "no",
                },
            )
        )
    return [f"## Dose sweep ({report.capability})", "", *markdown_table(_DOSE_COLUMNS, rows), ""]


def generation_records(
    rows: list[TestRow],
    row_ids: list[int],
    baselines: dict[str, Generations],
    base_scores: ArmScores,
    main_model: str,
    arms: dict[str, tuple[str, Generations]],
) -> list[dict[str, Any]]:
    """One record per row: its baseline(s), every arm's text, and whether the arm changed its tokens (``arms``:
    name -> (model, generations))."""
    records = []
    for k, row in enumerate(rows):
        records.append(
            {
                "row": row_ids[k],
                "task": row.task,
                "capabilities": [c.value for c in capabilities_of(row.task)],
                "reference": row.reference,
                "baseline": baselines[main_model].texts[k],
                "baseline_scores": {c.value: s for c, s in base_scores.verdicts[k].scores.items()},
                **({"baselines": {m: g.texts[k] for m, g in baselines.items()}} if len(baselines) > 1 else {}),
                "intervened": {name: g.texts[k] for name, (_, g) in arms.items()},
                "changed": {name: g.ids[k] != baselines[model].ids[k] for name, (model, g) in arms.items()},
            }
        )
    return records


def write_report(
    report: ABReport,
    rows: list[TestRow],
    row_ids: list[int],
    baselines: dict[str, Generations],
    base_scores: ArmScores,
    arms: dict[str, Generations],
    out_dir: Path,
) -> ABReport:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = InterventionDir(out_dir)
    report.paths = {"json": str(files.report), "markdown": str(files.markdown), "generations": str(files.generations)}
    by_name = {arm.name: (arm.model, arms[arm.name]) for arm in report.arms}
    lines = [
        json.dumps(r, ensure_ascii=False)
        for r in generation_records(rows, row_ids, baselines, base_scores, report.model, by_name)
    ]
    write_atomic(files.generations, "\n".join(lines) + "\n")
    write_atomic(files.markdown, markdown(report))
    report.save(files.report)
    return report


def write_outcomes_only(report: ABReport, out_dir: Path) -> ABReport:
    """``--outcomes only``: the report as JSON and markdown (no generations)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    files = InterventionDir(out_dir)
    report.paths = {"json": str(files.report), "markdown": str(files.markdown)}
    write_atomic(files.markdown, markdown(report))
    report.save(files.report)
    return report


# --- the selection comparison (interventions.select_compare) ---------------------------------------------------


_SELECTION_COLUMNS = [
    extra("rule"),
    extra("arm"),
    extra("capability"),
    N,
    BEFORE_AFTER,
    DELTA,
    CI,
    P,
    PLACEBO,
    CHANGED,
    extra("per_unit", "Δ per unit (pts)", numeric=True),
    VERDICT,
]


def selection_markdown(report: ABReport, selection: Selection) -> list[str]:
    """The comparison as markdown: how each rule picked its units, one block of rows per rule, then the overlaps."""
    out = [
        f"## Which rule finds units that matter (top {selection.k} units of each rule, {report.capability} target)",
        "",
        f"Verdict: {selection.verdict_rule}.",
        "",
    ]
    for body in selection.rules:
        units = body.units
        layers = ", ".join(f"{layer}:{count}" for layer, count in units.per_layer.items())
        out.append(f"- **{body.rule}**: {units.size} units of `{units.hook}` (layer:count {layers}), {body.source}")
    arms = {arm.name: arm for arm in report.arms}
    rows = [
        Row(
            c.effect,
            placebo=Placement.of(c.placebo),
            changed=(c.rows_changed, c.n_rows),
            verdict=body.verdicts[name][c.capability].status,
            extra={
                "rule": body.rule,
                "arm": name.split(": ", 1)[1],
                "capability": _capability(c),
                "per_unit": fmt_per_unit(c.effect.delta, body.units.size),
            },
        )
        for body in selection.rules
        for name in body.arms
        for c in arms[name].capabilities
    ]
    out += ["", *markdown_table(_SELECTION_COLUMNS, rows)]
    return [*out, "", *overlap_markdown(selection.rules), ""]


def overlap_markdown(rules: list[RuleSelection]) -> list[str]:
    """Rule × rule: units shared, Jaccard, and the matched random Jaccard."""
    names = [body.rule for body in rules]
    out = [
        "Overlap of the rules' units: units shared, Jaccard index (random: the mean Jaccard of two random sets "
        "with the same per-layer counts)",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for body in rules:
        cells = []
        for other in names:
            o = body.overlap.get(other)
            cells.append("—" if o is None else f"{o.shared}, {o.jaccard:.3f} (random {o.random_jaccard:.3f})")
        out.append(f"| {body.rule} | " + " | ".join(cells) + " |")
    return out

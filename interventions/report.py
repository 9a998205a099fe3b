"""Write an A/B run to disk: its report as JSON and markdown, and its generations (:mod:`core.run_dir`).

The markdown starts with one table of every arm on the target capability, the same columns
for every edit kind: Δ with its 95% CI, the exact McNemar p, where Δ falls among the arm's
placebo arms, and how many generations changed at all. Then, per arm, the table a reader of
the paper wants to see: per capability, compliance before and after with the same columns. The no-op guard's flags are
printed above the table they qualify, never in a footnote. All files are written
atomically (temporary file, then rename) so an interrupted run never leaves a half report.

Example:
    >>> fmt_pct(0.905), fmt_delta(0.015)
    ('90.5%', '+1.5')
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from core.atomic import write_atomic
from core.capabilities import capabilities_of
from core.generation import Generations
from core.run_dir import InterventionDir
from core.schema import TestRow
from interventions.results import (
    ABReport,
    ArmPlacebo,
    ArmResult,
    NoPlacebo,
    PlaceboRank,
    PlaceboSkipped,
    Selection,
)
from interventions.scoring import ArmScores


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.1f}%"


def fmt_delta(x: float | None) -> str:
    """A difference of proportions in percentage points."""
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:+.1f}"


def fmt_p(p: float | None) -> str:
    if p is None or not math.isfinite(p):
        return "n/a"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def fmt_percentile(x: float) -> str:
    """A percentile as an ordinal: 1st, 2nd, 3rd, 11th, 72nd, 100th.

    >>> [fmt_percentile(x) for x in (0.4, 2.5, 11, 72.5, 100)]
    ['0th', '2nd', '11th', '72nd', '100th']
    """
    n = int(round(x))  # half to even, as the former "{:.0f}th"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _placebo_cell(placebo: PlaceboRank | None) -> str:
    if placebo is None:
        return "—"
    return f"{fmt_percentile(placebo.percentile)} (p={fmt_p(placebo.p_empirical)})"


def arm_table(arm: ArmResult) -> list[str]:
    lines = [
        "| capability | n | before | after | Δ (pts) | 95% CI | McNemar p | placebo pct | generations changed | "
        "ROUGE-L before→after | BLEU before→after |",
        "|---|---:|---:|---:|---:|---|---:|---|---:|---|---|",
    ]
    for c in arm.capabilities:
        name, e = (f"**{c.capability}**" if c.target else c.capability), c.effect
        lines.append(
            f"| {name} | {e.n} | {fmt_pct(e.before)} | {fmt_pct(e.after)} | {fmt_delta(e.delta)} | "
            f"[{fmt_delta(e.ci_low)}, {fmt_delta(e.ci_high)}] | {fmt_p(e.p_value)} | {_placebo_cell(c.placebo)} | "
            f"{c.rows_changed}/{c.n_rows} | {c.rouge_l_before:.3f}→{c.rouge_l_after:.3f} | "
            f"{c.bleu_before:.1f}→{c.bleu_after:.1f} |"
        )
    return lines


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
        from interventions.select_compare import selection_markdown

        out.extend(selection_markdown(report, report.selection))
    out.extend(summary_table(report))
    for arm in report.arms:
        out.append(f"## {arm.label or arm.name} ({arm.role}, {arm.model} model)")
        out.append("")
        out.append(f"- placebo: {_placebo_line(arm.placebo)}")
        out.append("")
        out.extend(f"> **INVALID:** {fault}" for fault in arm.guard.faults)
        out.extend(f"> **NO-OP WARNING:** {flag}" for flag in arm.guard.flags)
        if arm.guard.flags or arm.guard.faults:
            out.append("")
        out.extend(arm_table(arm))
        out.append("")
    if len(report.scale_arms) > 1 and not isinstance(report.selection, Selection):  # --select: one per rule
        out.extend(dose_table(report))
    return "\n".join(out) + "\n"


def _placebo_line(placebo: ArmPlacebo) -> str:
    if isinstance(placebo, NoPlacebo):
        return "none for this arm"
    text = f"{placebo.n_sets} {placebo.family or 'random matched sets'}, seed {placebo.seed}"
    return text + (f" (skipped: {placebo.skipped})" if isinstance(placebo, PlaceboSkipped) else "")


def summary_table(report: ABReport) -> list[str]:
    """Every arm on the target capability, against the baseline of the model it ran on."""
    lines = [
        f"## Every arm on {report.capability}",
        "",
        "| arm | model | before | after | Δ (pts) | 95% CI | McNemar p | placebo pct | generations changed | no-op |",
        "|---|---|---:|---:|---:|---|---:|---|---:|---|",
    ]
    for arm in report.arms:
        c = arm.capability(report.capability)
        e, verdict = c.effect, "INVALID" if arm.guard.faults else ("YES" if arm.guard.is_noop else "no")
        lines.append(
            f"| {arm.name} | {arm.model} | {fmt_pct(e.before)} | {fmt_pct(e.after)} | {fmt_delta(e.delta)} | "
            f"[{fmt_delta(e.ci_low)}, {fmt_delta(e.ci_high)}] | {fmt_p(e.p_value)} | {_placebo_cell(c.placebo)} | "
            f"{c.rows_changed}/{c.n_rows} | {verdict} |"
        )
    return lines + [""]


def dose_table(report: ABReport) -> list[str]:
    lines = [
        f"## Dose sweep ({report.capability})",
        "",
        "| factor | role | after | Δ (pts) | 95% CI | McNemar p | generations changed | changed in dtype | hook "
        "values changed | no-op |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for arm in report.scale_arms:
        e, g = arm.capability(report.capability).effect, arm.guard
        hook = "n/a" if g.values_changed is None else f"{g.values_changed}/{g.values_seen}"
        lines.append(
            f"| {arm.factor!r} | {arm.role} | {fmt_pct(e.after)} | {fmt_delta(e.delta)} | [{fmt_delta(e.ci_low)}, "
            f"{fmt_delta(e.ci_high)}] | {fmt_p(e.p_value)} | {g.rows_changed}/{g.rows} | "
            f"{100 * g.changed_fraction_in_dtype:.1f}% | {hook} | {'YES' if g.is_noop else 'no'} |"
        )
    return lines + [""]


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

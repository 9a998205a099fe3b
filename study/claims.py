"""The claim registry: every claim of the paper's §7 that the study judges, the rule that judges it and the section
of the report that shows its evidence.

A :class:`Claim` says its statement, reads the study's records through :mod:`study.evidence` and applies its rule
of :mod:`study.verdicts` (``judge``), and renders the body of its section (``body``). :func:`decide` fills
``study.verdicts`` from the registry, ``probe report`` prints their table, and the HTML page
(:mod:`study.report_html`) makes one section per claim, in order. A new claim is one entry here, its rule in
:mod:`study.verdicts` and its words in ``docs/report.md``.

Example:
    >>> [c.number for c in CLAIMS], claim(2).statement
    ([1, '1c', 2, 3, 4], 'DPO pays an alignment tax on multi-turn instructions')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from interventions.cells import (
    AFTER,
    BEFORE,
    CHANGED,
    CI,
    DELTA,
    PLACEBO,
    N,
    P,
    Row,
    Strong,
    evaluation_columns,
    evaluation_row,
    extra,
    html_table,
)
from interventions.report import OUTCOME_COLUMNS, arm_outcome_rows, capability_row, responses_line
from interventions.results import ABReport, ArmResult
from study.evidence import (
    PAPER_RANKING,
    arm_evidence,
    causal_arms,
    eval_difference,
    measured_compliance,
    paper_arm,
    paper_curve,
    window_results,
)
from study.figures import depth_figure
from study.layout import CAUSAL_COMMAND_EXTRA, TARGET
from study.page import Page, e
from study.records import Commands, Study
from study.verdicts import (
    DepthShare,
    Verdict,
    alignment_tax,
    late_layers,
    paper_scaling,
    units_cause,
    units_cause_at_k,
    window_carried,
)


@dataclass(frozen=True)
class Claim:
    """One claim of the study (module doc)."""

    number: int | str  # 1, "1c", 2, ...
    statement: str
    judge: Callable[[Study], Verdict]
    body: Callable[[Page, Study], None]


def _late_layers(study: Study) -> Verdict:
    commands = Commands(study)
    untestable = None
    if study.summary is not None and study.recording and not study.depth:
        untestable = next((n.split("no depth share: ", 1)[1] for n in study.notes if "no depth share: " in n), None)
    shares = [DepthShare(r.capability, r.share, r.ci_low, r.ci_high, r.uniform) for r in study.depth.values()]
    return late_layers(shares or None, commands.analyze() if study.recording else commands.record(), untestable)


def _window_carried(study: Study) -> Verdict:
    found = study.localize
    if found is None:
        return window_carried(None, 0, 0, Commands(study).localize())
    report = found.report
    return window_carried(window_results(report), len(report.window), report.n_layers, Commands(study).localize())


def _alignment_tax(study: Study) -> Verdict:
    return alignment_tax(eval_difference(study.evaluation), Commands(study).evaluate())


def _paper_scaling(study: Study) -> Verdict:
    found = study.paper_arm
    return paper_scaling(arm_evidence(found[0].report, found[1]) if found else None, Commands(study).intervene())


def _units_cause(study: Study) -> Verdict:
    commands = Commands(study)
    return units_cause(
        [arm_evidence(r.report, a) for r, a in study.causal_arms] or None,
        eval_difference(study.evaluation),
        commands.intervene(CAUSAL_COMMAND_EXTRA),
        commands.evaluate(),
    )


def arm_row(report: ABReport, arm: ArmResult) -> Row:
    g = arm.guard
    return capability_row(
        arm.capability(report.capability),
        arm=arm.name,
        model=arm.model,
        dtype=f"{100 * g.changed_fraction_in_dtype:.1f}%",
        hook="n/a" if g.values_changed is None else f"{g.values_changed}/{g.values_seen}",
        guard="INVALID" if g.faults else ("NO-OP" if g.is_noop else ""),
    )


ARM_COLUMNS = [
    extra("arm"),
    extra("model"),
    N,
    BEFORE,
    AFTER,
    DELTA,
    CI,
    P,
    PLACEBO,
    CHANGED,
    extra("dtype", "dtype values it changes", numeric=True),
    extra("hook", "hook values changed", numeric=True),
    extra("guard"),
]


def arm_table(rows: list[Row]) -> str:
    return html_table(ARM_COLUMNS, rows)


def _depth_evidence(page: Page, study: Study) -> None:
    shares = list(study.depth.values())
    page.figure("depth-share", depth_figure(shares))
    if shares:
        rows = []
        for s in shares:
            body = study.summary.capabilities.get(s.capability, {}).get(study.hook) if study.summary else None
            top = ", ".join(str(i) for i in body.top_layer_numbers()[:5]) if body else "—"
            stability = body.stability.verdict() if body and body.stability else "—"
            rows.append(
                f"<tr><td>{e(s.capability)}</td><td>{s.n_samples}</td><td>{100 * s.share:.1f}%</td>"
                f"<td>[{100 * s.ci_low:.1f}, {100 * s.ci_high:.1f}]</td><td>{100 * s.uniform:.1f}%</td>"
                f"<td>{e(top)}</td><td>{e(stability)}</td></tr>"
            )
        page.add(
            "<table><tr><th>capability</th><th>N</th><th>window's share of |Δ|</th><th>95% CI</th>"
            "<th>uniform share</th><th>top layers (analysis window)</th>"
            "<th>their stability</th></tr>" + "".join(rows) + "</table>"
        )


def _local_evidence(page: Page, study: Study) -> None:
    """The target's top layers in both bases: beside the verdict, never in it (claim 1's rule reads the global)."""
    local = study.local_profile
    if local is None:
        page.add(
            "<p class=note>No local-basis profile: the run was recorded without it (<code>probe run --local "
            "dpo_on_sft</code>, the default, records it).</p>"
        )
        return
    rows = "".join(
        f"<tr><td>{e(basis)}</td><td>{e(', '.join(str(r.layer) for r in ranked[: local.top_n]))}</td>"
        f"<td>{e(local.meaning[basis])}</td></tr>"
        for basis, ranked in (("global", local.global_layers), ("local", local.local_layers))
    )
    page.add(
        f"<p>The paper's maps compare the two models on the same prompt, so each layer's difference includes what "
        f"flowed in from the layers below (the <b>global</b> basis). The <b>local</b> basis runs each DPO layer on "
        f"SFT's input to that layer, so only that layer's own weights differ. {e(TARGET)} at {e(local.hook)}, "
        f"{e(local.metric)}, top {local.top_n} layers of {len(local.layers)}:</p>"
        f"<table><tr><th>basis</th><th>top layers</th><th>what it means</th></tr>{rows}</table>"
        f"<p class=note>{local.top_layer_overlap} of the top {local.top_n} layers and {local.top_unit_overlap} of "
        f"the top {local.top_k} units are shared. The verdict above reads the global basis only.</p>"
    )


def _evaluation_evidence(page: Page, study: Study) -> None:
    if study.evaluation is None:
        page.absent("an evaluation of the pair", Commands(study).evaluate())
    else:
        ordered = sorted(study.evaluation.table, key=lambda r: (r.capability != TARGET, r.capability == "overall"))
        rows = [evaluation_row(r, lambda name: Strong(name) if name == TARGET else name) for r in ordered]
        page.add(html_table(evaluation_columns(base=False), rows))


def _scaling_evidence(page: Page, study: Study) -> None:
    if study.paper_arm is None:
        page.absent("the scaling at 1 − 1e-6 on multi_turn", Commands(study).intervene())
    else:
        loaded, arm = study.paper_arm
        flags = "".join(f"<li>{e(f)}</li>" for f in [*arm.guard.flags, *arm.guard.faults])
        page.add(
            f"<p>From <code>{e(loaded.path)}</code> ({e(loaded.report.dtype)}, "
            f"{loaded.report.neurons.size} units of {e(loaded.report.neurons.hook)}).</p>"
            f"{arm_table([arm_row(loaded.report, arm)])}"
        )
        if flags:
            page.add(f"<p><b>No-op guard:</b></p><ul>{flags}</ul>")
        outcome_evidence(page, [(loaded.report, arm)])


def _causal_evidence(page: Page, study: Study) -> None:
    if not study.causal_arms:
        page.absent("ablation, mean, patching or steering arms", Commands(study).intervene(CAUSAL_COMMAND_EXTRA))
        return
    measured = [(r, a) for r, a in study.causal_arms if measured_compliance(r.report, a)]
    if measured:
        specific = [a.name for r, a in measured if arm_evidence(r.report, a).specific()]
        page.add(
            f"{arm_table([arm_row(r.report, a) for r, a in measured])}<p class=note>Arms with a specific effect "
            f"(significant and beyond their placebos): {e(', '.join(specific) or 'none')}.</p>"
        )
    outcomes_only = [a.name for r, a in study.causal_arms if not measured_compliance(r.report, a)]
    if outcomes_only:
        page.add(
            f"<p class=note>{e(', '.join(outcomes_only))}: from an <code>--outcomes only</code> run, continuous "
            "outcomes only (no compliance).</p>"
        )
    outcome_evidence(page, [(r.report, a) for r, a in study.causal_arms])


def _window_evidence(page: Page, study: Study) -> None:
    """The localize profile's named windows (claim 1c reads the first), beside claim 1's discrepancy share."""
    from localize.page import PROFILE_COLUMNS, profile_rows, table_html

    if study.localize is None:
        page.absent(f"a localize report of {TARGET}", Commands(study).localize())
        return
    loaded, report = study.localize, study.localize.report
    page.add(
        f"<p>The causal counterpart of claim 1: patching every attention and MLP output of the window's layers "
        f"({e(report.window[0])}–{e(report.window[-1])} of {report.n_layers}) at once with the other model's values, "
        f"in each direction, from <code>{e(loaded.path)}</code> ({len(report.row_ids)} rows of the {e(report.split)} "
        f'split). The curves and the whole profile: <a href="#localize">where the change lives</a>.</p>',
        table_html(PROFILE_COLUMNS, profile_rows(report, ("window",))),
    )


def _per_k_evidence(page: Page, study: Study) -> None:
    """Claim 4 at every k of the paper's ranking's localize curve (the headline verdict above stays the A/B's)."""
    if study.localize is None:
        page.absent(f"claim 4 at every k (a localize report of {TARGET})", Commands(study).localize())
        return
    report = study.localize.report
    points = paper_curve(report)
    if not points:
        page.add(f"<p class=note>Claim 4 at every k: the localize report has no {PAPER_RANKING} ranking.</p>")
        return
    rows = "".join(
        f"<tr><td>{e(v.k)}</td><td>{v.units}</td><td>{e(v.status)}</td><td>{e(v.reason)}</td></tr>"
        for v in units_cause_at_k(points)
    )
    page.add(
        f"<h3 id=claim-4-per-k>Claim 4 at every k</h3><p>The same rule on the gap closed, read at each point of "
        f"the {e(PAPER_RANKING)} ranking's curve ({report.total_units:,} {e(report.unit)}s of {e(report.hook)}; "
        "the two directions as the two patch arms, each placed among the random sets of its size). The verdict "
        "above is the A/B's, at its own units; this table does not change it.</p>"
        f"<table><tr><th>k</th><th>units</th><th>verdict at this k</th><th>why</th></tr>{rows}</table>"
    )


def outcome_evidence(page: Page, arms: list[tuple[ABReport, ArmResult]]) -> None:
    """The arms' continuous outcomes (gap closed, KL, reference log-prob, DPO margin), where they have them."""
    rows = [row for _, arm in arms for row in arm_outcome_rows(arm)]
    if rows:
        said = sorted({responses_line(report) for report, arm in arms if arm.outcomes})
        page.add(
            f"<p>Continuous outcomes (teacher-forced; {e('; '.join(said))}):</p>{html_table(OUTCOME_COLUMNS, rows)}"
        )


def _units_evidence(page: Page, study: Study) -> None:
    _causal_evidence(page, study)
    _per_k_evidence(page, study)


def _layer_evidence(page: Page, study: Study) -> None:
    _depth_evidence(page, study)
    _local_evidence(page, study)


CLAIMS: tuple[Claim, ...] = (
    Claim(
        1,
        "The SFT/DPO discrepancy concentrates in the later layers (paper: layers 12-31 of 32)",
        _late_layers,
        _layer_evidence,
    ),
    Claim(
        "1c",
        "The change is carried in the window (the causal counterpart of claim 1; beyond the paper)",
        _window_carried,
        _window_evidence,
    ),
    Claim(2, "DPO pays an alignment tax on multi-turn instructions", _alignment_tax, _evaluation_evidence),
    Claim(
        3,
        "Scaling the most-changed units by (1 - 1e-6) lifts multi-turn compliance",
        _paper_scaling,
        _scaling_evidence,
    ),
    Claim(4, "The most-changed units cause the behaviour change (beyond the paper)", _units_cause, _units_evidence),
)


def claim(number: int | str) -> Claim:
    """The registered claim ``number``."""
    return next(c for c in CLAIMS if c.number == number)


def decide(study: Study) -> None:
    """Which arms answer the claims (:mod:`study.evidence`), then every claim's verdict, in the registry's order."""
    study.paper_arm = paper_arm(study)
    study.causal_arms = causal_arms(study)
    study.verdicts = [c.judge(study) for c in CLAIMS]

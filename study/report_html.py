"""The replication report as one self-contained HTML file: the pair, the claims with their verdicts, the evidence.

:func:`render` turns a :class:`study.records.Study` into one page. plotly.js is inlined once
in the head (``plotly.offline.get_plotlyjs``) and every figure is a ``<div>`` with its own small
script, so the page opens offline and loads nothing from the network. Every text that came from a
file (paths, prompts, tokens, commands) is escaped. Sections carry stable ids (``pair``,
``verdicts``, ``claim-1``, ``claim-1c``, ``claim-2`` … ``claim-4``, ``layers``, ``units``, ``interventions``,
``localize``, ``compliance``, ``missing``, ``reproduce``), verdicts a ``data-claim``/``data-status`` pair, and figures a
``data-figure`` name, so a browser test can find each. A part the run lacks is said where it would
have been, with the command that adds it.

:func:`write_report` gathers and renders a run and writes the file atomically; :func:`show` displays
a written report inline in a notebook (an ``<iframe srcdoc>``, so its script runs apart from the
notebook's).

Example:
    >>> import re
    >>> import tempfile
    >>> from analysis.summary import AnalysisSummary
    >>> summary = RunDir(tempfile.mkdtemp()).analysis.summary; summary.parent.mkdir()
    >>> AnalysisSummary("runs/x", "topk_count", {}, {}, "maps.h5", [], {}).save(summary)   # an analysis of nothing
    >>> re.findall('<section id="([a-z0-9-]+)"', render(gather_study(summary.parent.parent)))
    ['verdicts', 'pair', 'claim-1', 'claim-1c', 'claim-2', 'claim-3', 'claim-4', 'layers', 'units', 'interventions',
     'localize', 'compliance', 'missing', 'reproduce']
    >>> path = write_report("runs/latest")                      # doctest: +SKIP
    >>> show(path)                                               # doctest: +SKIP
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from analysis.explain_html import card_html
from core.errors import ProbeError
from core.run_dir import LocalizeDir, RunDir
from interventions.cells import (
    evaluation_columns,
    evaluation_row,
    fmt_p,
    fmt_percentile,
    fmt_range,
    html_table,
)
from interventions.evidence import MIN_PLACEBO_SETS, PLACEBO_PERCENTILE
from study.claims import CLAIMS, Claim, arm_row, arm_table, outcome_evidence
from study.claims import claim as claim_of
from study.evidence import measured_compliance
from study.figures import (
    compliance_figure,
    dose_figure,
    heatmap_figure,
    placebo_figure,
    profile_figure,
)
from study.gather import analysed_capabilities, gather_study
from study.layout import TARGET
from study.page import Page, e, seconds, verdict_html
from study.records import Commands, Study
from study.verdicts import CANNOT_TEST

N_CARDS = 5  # neuron cards shown per capability (the explain page keeps all)
REPORT_STAGE = "report"  # probe replicate's last stage, the one that writes this page
THIS_PAGE = "this page"  # its status here: the record was saved while the page was being written
SECTIONS = (
    "verdicts",
    "pair",
    *(f"claim-{c.number}" for c in CLAIMS),
    "layers",
    "units",
    "interventions",
    "localize",
    "compliance",
    "missing",
    "reproduce",
)


def render(study: Study, where: str | Path | None = None) -> str:
    """The whole page (module doc); ``where``: the folder the page will be written to (links to the run's own plots are
    relative to it)."""
    page = Page(Path(where) if where is not None else study.run_dir)
    _header(page, study)
    _verdicts(page, study)
    _pair(page, study)
    for claim in CLAIMS:
        _claim(page, study, claim)
    _layers(page, study)
    _units(page, study)
    _interventions(page, study)
    _localize(page, study)
    _compliance(page, study)
    _missing(page, study)
    _reproduce(page, study)
    return page.document(f"Replication of RoleMRC §7 · {study.run_dir.name}")


def _header(page: Page, study: Study) -> None:
    links = "".join(f'<a href="#{key}">{key}</a>' for key in SECTIONS)
    page.add(
        f"<h1>Replication of the RoleMRC neuron study (§7)</h1><p>run <code>{e(study.run_dir)}</code> · report made "
        f"{e(study.created)} · rolemrc-probe {e(study.toolkit_version)}</p><nav>{links}</nav>"
    )


def _verdicts(page: Page, study: Study) -> None:
    page.section("verdicts", "The claims and their verdicts")
    rows = "".join(
        f"<tr><td>{v.claim}</td><td>{e(claim_of(v.claim).statement)}</td>"
        f"<td class=vcell>{verdict_html(v, v.status != CANNOT_TEST)}</td><td>{e(v.reason)}</td></tr>"
        for v in study.verdicts
    )
    page.add(
        f"<table><tr><th>#</th><th>claim</th><th>verdict</th><th>why</th></tr>{rows}</table>",
        "<p class=note>The rules are fixed in <code>study/verdicts.py</code> and "
        "<code>docs/report.md</code>: a difference counts when its 95% CI excludes 0 and its exact McNemar p &lt; "
        "0.05; an intervention counts when it also lies at or beyond the "
        f"{fmt_percentile(PLACEBO_PERCENTILE)} percentile of at least {MIN_PLACEBO_SETS} placebo sets.</p>",
    )
    page.end()


def _pair(page: Page, study: Study) -> None:
    page.section("pair", "The pair")
    if not study.models:
        page.absent("the recording (models, data)", "probe run")
    rows = []
    for m in study.models:
        same = (
            "—"
            if not m.current_sha256 or not m.recorded_sha256
            else ("same" if m.current_sha256 == m.recorded_sha256 else "DIFFERENT")
        )
        trained = _provenance_cell(m.provenance)
        rows.append(
            f"<tr><td>{e(m.role)}</td><td><code>{e(m.directory)}</code></td><td>"
            f"<code>{e(m.recorded_sha256[:16] or '—')}</code></td><td>"
            f"<code>{e(m.current_sha256[:16] or 'not found')}</code> {same}</td><td>{trained}</td></tr>"
        )
    page.add(
        "<table><tr><th>model</th><th>directory</th><th>weights fingerprint (recorded)</th><th>now</th>"
        "<th>training (provenance)</th></tr>" + "".join(rows) + "</table>"
    )
    rec = study.recording
    if rec:
        counts = ", ".join(f"{c} {n}" for c, n in rec.get("n", {}).items())
        page.add(
            f"<p>Data <code>{e(study.data_file)}</code> (sha256 {e(study.data_sha256[:16])}…). "
            f"Recorded {e(counts)} prompts at {e(', '.join(rec.get('hooks', [])))}, {e(rec.get('position'))} position, "
            f"{e(rec.get('dtype'))}, backend {e(rec.get('backend'))}, {len(rec.get('layers', []))} layers, "
            f"on {e(rec.get('device'))} at {e(rec.get('recorded_at'))}.</p>"
        )
    machine = "; ".join(f"{k} {v}" for k, v in study.machine.items())
    page.add(
        f"<p>Toolkit rolemrc-probe {e(study.toolkit_version)}; this report made on {e(machine)}, "
        f"{e(study.created)}.</p>"
    )
    page.end()


def _provenance_cell(prov: dict[str, Any]) -> str:
    """What trained the model (stage, data, recipe, final loss), or where an untrained base came from."""
    if not prov:
        return "—"
    if prov.get("stage") not in ("sft", "dpo"):
        return e(prov.get("source") or prov.get("stage") or "—")
    recipe = ", ".join(f"{k} {v}" for k, v in (prov.get("recipe") or {}).items())
    data = prov.get("data") or {}
    return (
        f"{e(prov.get('stage'))} on <code>{e(Path(str(data.get('file', ''))).name)}</code> ({e(data.get('rows'))} "
        f"rows, sha256 {e(str(data.get('sha256', ''))[:12])}…); {e(recipe)}; final loss {e(prov.get('final_loss'))}"
    )


def _claim(page: Page, study: Study, claim: Claim) -> None:
    page.section(f"claim-{claim.number}", f"Claim {claim.number}: {claim.statement}")
    verdict = next(v for v in study.verdicts if v.claim == claim.number)
    why = "" if verdict.status == CANNOT_TEST else f"<p class=note>{e(verdict.reason)}</p>"
    page.add(f"<p>Verdict: {verdict_html(verdict)}</p>{why}")
    claim.body(page, study)
    page.end()


def _layers(page: Page, study: Study) -> None:
    page.section("layers", "Layer profile and heatmaps")
    page.figure("layer-profile", profile_figure(list(study.depth.values())))
    if not study.maps:
        page.absent("the analysis maps", Commands(study).analyze())
    for cap, maps in study.maps.items():
        page.figure(f"heatmap-{cap}", heatmap_figure(maps))
        full = RunDir(study.run_dir).analysis.maps_plot(cap, maps.hook, maps.metric)
        if full.is_file():
            page.add(f"<p class=note>Every unit at full resolution: {page.link(full)}</p>")
    page.end()


def _units(page: Page, study: Study) -> None:
    page.section("units", "Top units and their neuron cards")
    caps = analysed_capabilities(study)
    if not caps:
        page.absent("the analysis", Commands(study).analyze())
    for cap in caps:
        body = study.summary.hook(cap, study.hook) if study.summary else None
        units = "".join(
            f"<tr><td>{u.layer}</td><td>{u.unit}</td><td>{u.delta:.4g}</td><td>{u.sft:.4g}</td><td>{u.dpo:.4g}</td>"
            f"<td>{fmt_p(u.q)}</td></tr>"
            for u in (body.top_units[:10] if body else [])
        )
        page.add(
            f"<h3>{e(cap)}</h3><table><tr><th>layer</th><th>unit</th><th>Δ</th><th>SFT</th><th>DPO</th><th>q</th>"
            f"</tr>{units}</table>"
        )
        record = study.explains.get(cap)
        if record is None:
            page.absent(f"neuron cards of {cap}", Commands(study).explain(cap))
            continue
        cards = "".join(card_html(card, record.hook, record.metric) for card in record.cards[:N_CARDS])
        page.add(
            f"<details><summary>neuron cards of the top {min(N_CARDS, len(record.cards))} units (all "
            f"{len(record.cards)}: <code>analysis/{e(record.files.get('page', ''))}</code>)</summary>{cards}</details>"
        )
    page.end()


def _interventions(page: Page, study: Study) -> None:
    page.section("interventions", "Interventions")
    if not study.reports:
        page.absent("any intervention", Commands(study).intervene())
    for k, loaded in enumerate(study.reports):
        report = loaded.report
        n = report.neurons
        measured = [a for a in report.arms if measured_compliance(report, a)]
        page.add(
            f"<h3>{e(report.capability)} · {e(report.model)} model · <code>{e(loaded.path.parent.name)}</code></h3>"
            f"<p class=note>{n.size} units of {e(n.hook)}; {e(report.dtype)}, "
            f"backend {e(report.backend)}, judge {e(report.judge)}; placebo family per arm in "
            f"<code>{e(loaded.path)}</code></p>",
            arm_table([arm_row(report, a) for a in measured])
            if measured
            else "<p class=note>An <code>--outcomes only</code> run: its arms generated nothing, so there is no "
            "compliance; their continuous outcomes:</p>",
        )
        if len(measured) < len(report.arms):
            outcome_evidence(page, [(report, a) for a in report.arms if not measured_compliance(report, a)])
        for j, arm in enumerate(report.arms):
            page.figure(f"placebo-{k}-{j}", placebo_figure(report, arm))
        page.figure(f"dose-{k}", dose_figure(report))
    page.end()


def _localize(page: Page, study: Study) -> None:
    """Where the change lives (``probe localize``): the curves per ranking with the placebo band, the summary table,
    the ranking verdict, the layer and sub-layer profile; its tables and figures are localize's own."""
    from localize.figures import curves_figure, profile_figure
    from localize.page import PROFILE_COLUMNS, SUMMARY_COLUMNS, profile_rows, summary_rows, table_html

    page.section("localize", "Where the change lives: faithfulness curves and the layer profile")
    if study.localize is None:
        page.absent(f"a localize report of {TARGET}", Commands(study).localize())
        page.end()
        return
    path, report = study.localize.path, study.localize.report
    gaps = "; ".join(
        f"{d.label} ({d.meaning}): KL {d.gap:.3g} nats per token on {d.rows} rows, {d.responses}"
        for d in report.directions
    )
    page.add(
        f"<p>From <code>{e(path)}</code> (its own page: {page.link(LocalizeDir(path.parent).page)}): "
        f"{report.total_units:,} {e(report.unit)}s of {e(report.hook)} ({report.n_layers} layers × "
        f"{report.units_per_layer}), {len(report.row_ids)} rows of the {e(report.split)} split. Gap: {e(gaps)}.</p>"
        f"<p><b>Which ranking localises the change best:</b> {e(report.ranking_verdict.verdict)}: "
        f"{e(report.ranking_verdict.reason)}</p>",
        table_html(SUMMARY_COLUMNS, summary_rows(report)),
    )
    page.figure("localize-curves", curves_figure(report))
    if report.profile:
        page.add(table_html(PROFILE_COLUMNS, profile_rows(report)))
        page.figure("localize-profile", profile_figure(report))
    page.add(
        "<p class=note>f(k): the share of the teacher-forced KL between the two models that patching a ranking's "
        "top-k units with the other model's values closes; the rules: <code>localize/verdicts.py</code> and "
        f"<code>docs/localize.md</code>. {e(report.machine)}.</p>"
    )
    page.end()


def _compliance(page: Page, study: Study) -> None:
    page.section("compliance", "Compliance of base, SFT and DPO")
    if study.evaluation is None:
        page.absent("an evaluation of the pair", Commands(study).evaluate())
        page.end()
        return
    evaluation = study.evaluation
    table = evaluation.table
    page.figure("compliance", compliance_figure(table, evaluation.judge))
    base = bool(table) and table[0].has_base
    page.add(
        html_table(evaluation_columns(base), [evaluation_row(row) for row in table])
        + f"<p class=note>test file <code>{e(evaluation.test_file)}</code>; {evaluation.rows()} rows; "
        f"up to {e(evaluation.generation.max_new_tokens)} new tokens.</p>"
    )
    if evaluation.row(TARGET) is None:
        page.add(f"<p class=missing>The evaluation has no {TARGET} row.</p>")
    page.end()


def _missing(page: Page, study: Study) -> None:
    page.section("missing", "What this run lacks")
    if not study.missing:
        page.add("<p>Nothing: every part of the study is in the run directory.</p>")
    else:
        rows = "".join(
            f"<tr><td>{e(m.what)}</td><td>{e(m.why)}</td><td><code>{e(m.command)}</code></td></tr>"
            for m in study.missing
        )
        page.add(f"<table><tr><th>part</th><th>why</th><th>command that adds it</th></tr>{rows}</table>")
    if study.notes:
        page.add("<ul class=note>" + "".join(f"<li>{e(n)}</li>" for n in study.notes) + "</ul>")
    page.end()


def _estimated(least: float | None, most: float | None) -> str:
    """A stage's estimate: one figure, or a range where its work depends on what it finds."""
    return seconds(least) if least is None or most is None else fmt_range(least, most, seconds)


def _reproduce(page: Page, study: Study) -> None:
    page.section("reproduce", "Reproduce this report")
    page.add(f"<pre>{e(chr(10).join(study.commands))}</pre>")
    stages = study.replicate.stages if study.replicate else []
    if stages:
        rows = "".join(
            f"<tr><td>{e(s.name)}</td><td>{e(THIS_PAGE if s.name == REPORT_STAGE else s.status)}</td>"
            f"<td>{_estimated(s.estimate_s, s.at_most_s)}</td><td>{seconds(s.seconds)}</td></tr>"
            for s in stages
        )
        page.add(f"<table><tr><th>stage</th><th>status</th><th>estimated</th><th>measured</th></tr>{rows}</table>")
    page.end()


def write_report(
    run_dir: str | Path, out: str | Path | None = None, eval_file: str | Path | None = None
) -> tuple[Path, Study]:
    """Gather ``run_dir``, render it, write ``out`` (default: the run's report file) atomically; (path, study).

    An ``out`` that is one of the files the study read (through any link) is refused before anything is written
    (:func:`core.paths.check_not_an_input`)."""
    from core.atomic import write_atomic
    from core.paths import check_not_an_input

    study = gather_study(run_dir, eval_file)
    target = Path(out) if out is not None else RunDir(run_dir).report_file
    check_not_an_input(target, "--out" if out is not None else "the report file", study.inputs)
    page = render(study, target.parent)
    try:
        write_atomic(target, page)
    except OSError as exc:
        raise ProbeError(
            f"{target}: cannot write the report ({exc.strerror or exc}); pass --out FILE somewhere writable"
        ) from None
    return target, study


def show(path: str | Path, height: int = 900) -> Any:
    """The report at ``path`` for a notebook cell: an ``<iframe srcdoc>`` holding the whole page (no server)."""
    from IPython.display import HTML

    text = Path(path).read_text(encoding="utf-8")
    return HTML(
        f'<iframe srcdoc="{html.escape(text, quote=True)}" '
        f'style="width:100%;height:{int(height)}px;border:1px solid #ccc"></iframe>'
    )

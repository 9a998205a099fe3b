"""The files of ``probe localize`` and its tables: ``localize.json`` (the records, :mod:`core.records`),
``localize.html`` (the tables and both figures, plotly.js inlined so the page opens offline), and the rows the
terminal prints.

Example:
    >>> fmt(0.12345), fmt(float("nan")), fmt_k(None)
    ('0.123', '—', 'never')
"""

from __future__ import annotations

import html
import json
import math

from core.atomic import write_atomic
from core.records import nonfinite_as_null, to_json
from core.run_dir import LocalizeDir
from localize.records import LocalizeReport, Stat

SUMMARY_COLUMNS = (
    "ranking",
    "direction",
    "f(0.2%)",
    "f(2%)",
    "CPR log k [95% CI]",
    "CPR [95% CI]",
    "CMD [95% CI]",
    "k50",
    "k80",
    "r est. (RelP / gradient)",
)
PROFILE_COLUMNS = ("direction", "patched", "gap closed", "95% CI")


def fmt(value: float) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) and math.isfinite(value) else "—"


def fmt_k(units: int | None) -> str:
    return "never" if units is None else str(units)


def _stat(stat: Stat) -> str:
    return f"{fmt(stat.value)} [{fmt(stat.ci_low)}, {fmt(stat.ci_high)}]"


def summary_rows(report: LocalizeReport) -> list[list[str]]:
    """One row per ranking and direction: f at 0.2% and 2%, CPR on the log k axis, MIB's CPR and CMD, with CIs, k50
    and k80, the estimates' r."""
    return [
        [
            s.ranking,
            s.direction,
            fmt(s.f_at.get("0.2%", math.nan)),
            fmt(s.f_at.get("2%", math.nan)),
            _stat(s.cpr_log),
            _stat(s.cpr),
            _stat(s.cmd),
            fmt_k(s.k50),
            fmt_k(s.k80),
            f"{fmt(s.estimated_r.get('relp', math.nan))} / {fmt(s.estimated_r.get('gradient', math.nan))}",
        ]
        for s in report.summaries
    ]


def placebo_line(report: LocalizeReport) -> str:
    """The placebo band per direction and point: how many random sets were drawn, and their 99th percentile."""
    if not report.placebo:
        return ""
    labels = {d.name: d.label for d in report.directions}
    parts = []
    for p in report.placebo:
        drawn = len(p.values)
        sets = f"{drawn} of {drawn + p.undrawn} sets drawn" if p.undrawn else f"{drawn} sets"
        parts.append(f"{labels.get(p.direction, p.direction)} at {p.k}: {sets}, 99th percentile {fmt(p.p99)}")
    tail = (
        "; the sequential band stopped where the verdict could no longer change"
        if any(p.undrawn for p in report.placebo)
        else ""
    )
    return f"placebo band (random sets): {'; '.join(parts)}{tail}"


def profile_rows(report: LocalizeReport, kinds: tuple[str, ...] = ("sublayer", "window", "head")) -> list[list[str]]:
    """One row per profile arm of ``kinds`` and direction."""
    return [
        [r.direction, r.label, fmt(r.f), f"[{fmt(r.ci_low)}, {fmt(r.ci_high)}]"]
        for r in report.profile
        if r.kind in kinds
    ]


def write_report(report: LocalizeReport, out: LocalizeDir) -> None:
    """``localize.json`` and ``localize.html`` in ``out`` (each written whole or not at all)."""
    out.root.mkdir(parents=True, exist_ok=True)
    body = json.dumps(nonfinite_as_null(to_json(report)), indent=1, allow_nan=False)
    write_atomic(out.report, body + "\n")
    write_atomic(out.page, page(report))


def table_html(columns: tuple[str, ...], rows: list[list[str]]) -> str:
    """An HTML table of ``columns`` and ``rows`` (text escaped): this page's and the replication report's."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _estimated(report: LocalizeReport) -> str:
    least = report.estimate_least_s
    if least is None or round(least) == round(report.estimate_s):
        return f"{report.estimate_s:.0f}"
    return f"{least:.0f} to {report.estimate_s:.0f}"


def page(report: LocalizeReport) -> str:
    """The whole HTML page (module doc)."""
    from plotly.offline import get_plotlyjs

    from localize.figures import curves_figure, profile_figure

    e = html.escape
    gaps = "; ".join(
        f"{d.label} ({d.meaning}): KL {d.gap:.3g} nats per token, {d.rows} rows, {e(d.responses)}"
        for d in report.directions
    )
    figures = [
        fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})
        for fig in (curves_figure(report), profile_figure(report) if report.profile else None)
        if fig
    ]
    parts = [
        f"<h1>Where the change lives: {e(report.capability)}, {e(report.hook)}</h1>",
        f"<p>{e(report.run_dir)}; {report.total_units:,} {report.unit}s ({report.n_layers} layers x "
        f"{report.units_per_layer}); rows: {len(report.row_ids)} of the {e(report.split)} split. Gap: {e(gaps)}.</p>",
        f"<p><b>Rankings:</b> {e(report.ranking_verdict.verdict)}: {e(report.ranking_verdict.reason)}</p>",
        f"<p><b>Claim 1c</b> (the change is carried in the window): {e(report.claim_1c.verdict)}: "
        f"{e(report.claim_1c.reason)}</p>",
        f"<p>{e(placebo_line(report))}</p>",
        table_html(SUMMARY_COLUMNS, summary_rows(report)),
        figures[0],
        *([table_html(PROFILE_COLUMNS, profile_rows(report)), figures[1]] if len(figures) > 1 else []),
        f"<p class=note>{e(report.machine)}; {sum(report.seconds.values()):.0f} s measured, "
        f"{_estimated(report)} s estimated.</p>",
        *(f"<p class=note>warning: {e(w)}</p>" for w in report.warnings),
    ]
    style = (
        "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1400px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:3px 7px}.note{color:#555}"
    )
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>probe localize</title><style>{style}"
        f"</style><script>{get_plotlyjs()}</script></head><body>{''.join(parts)}</body></html>"
    )

"""The two figures of ``probe localize`` (Plotly): f(k) per ranking on a log k axis with the placebo band, and the
layer and sub-layer profile. The command's page and ``notebooks/localize.ipynb`` draw them from the same report.

Example:
    >>> from localize.rankings import RANKINGS
    >>> len(COLOURS) >= len(RANKINGS)   # a colour per ranking
    True
    >>> report = LocalizeReport.load("runs/latest/localize/x/localize.json")     # doctest: +SKIP
    >>> curves_figure(report).show(); profile_figure(report).show()            # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from localize.records import LocalizeReport, PlaceboPoint

if TYPE_CHECKING:
    from localize.records import ProfileRow

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def curves_figure(report: LocalizeReport) -> Any:
    """f(k) per ranking, one panel per direction: the patched curve with its 95% CI, the RelP estimate dotted (hidden
    until clicked), and the placebo band (the random sets' 1st-99th percentile, median marked)."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=len(report.directions),
        shared_yaxes=True,
        subplot_titles=[f"{d.label}: {d.meaning}" for d in report.directions],
    )
    rankings = list(dict.fromkeys(s.ranking for s in report.summaries))
    for col, direction in enumerate(report.directions, start=1):
        for i, ranking in enumerate(rankings):
            _ranking_traces(fig, report, ranking, direction.name, col, COLOURS[i % len(COLOURS)])
        _band(fig, report, direction.name, col)
    fig.update_xaxes(
        type="log", title_text=f"k: share of the {report.total_units:,} {report.unit}s of {report.hook} patched (%)"
    )
    fig.update_yaxes(title_text="f(k): gap closed", row=1, col=1)
    fig.update_layout(
        title="Faithfulness curves: the gap closed by each ranking's top-k units",
        height=520,
        width=560 * len(report.directions) + 220,
    )
    return fig


def _ranking_traces(fig: Any, report: LocalizeReport, ranking: str, direction: str, col: int, colour: str) -> None:
    """One ranking's patched curve with its CIs, and its RelP estimate (dotted, hidden until clicked)."""
    import plotly.graph_objects as go

    curve = [p for p in report.curve(ranking, direction) if p.units > 0]
    x = [100 * p.share for p in curve]
    errors = {
        "type": "data",
        "symmetric": False,
        "array": [p.ci_high - p.f for p in curve],
        "arrayminus": [p.f - p.ci_low for p in curve],
        "thickness": 1,
    }
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[p.f for p in curve],
            mode="lines+markers",
            name=ranking,
            legendgroup=ranking,
            showlegend=col == 1,
            line={"color": colour},
            error_y=errors,
            customdata=[[p.k, p.units] for p in curve],
            hovertemplate="%{customdata[0]} (%{customdata[1]} units): f = %{y:.3f}<extra>" + ranking + "</extra>",
        ),
        row=1,
        col=col,
    )
    if curve and "relp" in curve[0].estimated:
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[p.estimated["relp"] for p in curve],
                mode="lines",
                name=f"{ranking} (RelP estimate)",
                legendgroup=ranking,
                showlegend=col == 1,
                visible="legendonly",
                line={"color": colour, "dash": "dot"},
            ),
            row=1,
            col=col,
        )


def _band(fig: Any, report: LocalizeReport, direction: str, col: int) -> None:
    import plotly.graph_objects as go

    band = sorted((p for p in report.placebo if p.direction == direction), key=lambda p: p.units)
    if not band:
        return
    fig.add_trace(
        go.Scatter(
            x=[100 * p.share for p in band],
            y=[p.p50 for p in band],
            mode="markers",
            name="placebo (random sets drawn)",
            legendgroup="placebo",
            showlegend=col == 1,
            marker={"color": "#777", "symbol": "diamond"},
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [p.p99 - p.p50 for p in band],
                "arrayminus": [p.p50 - p.p01 for p in band],
                "color": "#777",
            },
            customdata=[_drawn(p) for p in band],
            hovertemplate="placebo at %{x:.3g}%: median %{y:.3f}, %{customdata}<extra>1st-99th percentile</extra>",
        ),
        row=1,
        col=col,
    )


def _drawn(point: PlaceboPoint) -> str:
    """How many random sets the point's band holds: ``20 sets``, or ``8 of 20 sets drawn (then the verdict could no
    longer change)`` where the sequential band stopped early."""
    drawn = len(point.values)
    if not point.undrawn:
        return f"{drawn} sets"
    return f"{drawn} of {drawn + point.undrawn} sets drawn (then the verdict could no longer change)"


def profile_figure(report: LocalizeReport) -> Any:
    """Gap closed per sub-layer step (attention and MLP outputs), per window, and per head, with 95% CIs; one row
    per direction."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    directions = report.directions
    titles = [t for d in directions for t in (f"{d.label}: each sub-layer", f"{d.label}: windows and heads")]
    fig = make_subplots(
        rows=len(directions), cols=2, column_widths=[0.62, 0.38], subplot_titles=titles, horizontal_spacing=0.18
    )
    for row, direction in enumerate(directions, start=1):
        mine = [r for r in report.profile if r.direction == direction.name]
        for i, sublayer in enumerate(("attention", "mlp")):
            steps = [r for r in mine if r.kind == "sublayer" and r.sublayer == sublayer]
            fig.add_trace(
                go.Bar(
                    x=[_span(r) for r in steps],
                    y=[r.f for r in steps],
                    name=f"{sublayer} output",
                    marker_color=COLOURS[i],
                    showlegend=row == 1,
                    legendgroup=sublayer,
                    error_y=_errors(steps),
                ),
                row=row,
                col=1,
            )
        others = [r for r in mine if r.kind != "sublayer"]
        fig.add_trace(
            go.Bar(
                y=[r.label for r in others],
                x=[r.f for r in others],
                orientation="h",
                name="windows and heads",
                marker_color="#555",
                showlegend=row == 1,
                error_x=_errors(others),
            ),
            row=row,
            col=2,
        )
        fig.update_yaxes(title_text="gap closed", row=row, col=1)
    fig.update_layout(
        title="Where the change is carried: the gap closed by patching whole components",
        barmode="group",
        height=460 * len(directions),
        width=1250,
    )
    return fig


def _span(row: ProfileRow) -> str:
    return str(row.layers[0]) if len(row.layers) == 1 else f"{row.layers[0]}-{row.layers[-1]}"


def _errors(rows: list[ProfileRow]) -> dict[str, Any]:
    return {
        "type": "data",
        "symmetric": False,
        "array": [r.ci_high - r.f for r in rows],
        "arrayminus": [r.f - r.ci_low for r in rows],
    }

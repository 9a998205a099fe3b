"""The report's plotly figures: depth share, layer profile, down-sampled heatmaps, placebo histograms, dose, compliance.

Each function takes the study's records and returns a ``plotly.graph_objects.Figure`` (or None
when there is nothing to draw). Heatmaps are down-sampled to at most :data:`MAX_COLUMNS` columns
by keeping, in each run of adjacent units, the value of largest |Δ| with its sign
(:func:`pool_columns`), so a changed unit stays visible and the file stays small; the run's own
``analysis/plots/*_maps.html`` keep every unit.

Example:
    >>> pool_columns(np.array([[1.0, -3.0, 2.0, 0.5]]), 2)[0].tolist()
    [[-3.0, 2.0]]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import plotly.graph_objects as go

from analysis.depth_share import DepthShareResult
from analysis.metric_maps import MetricMaps
from analysis.plots import delta_label, title_of
from analysis.window import format_layers
from interventions.cells import fmt_delta
from interventions.results import ABReport, ArmResult
from training.eval_rows import EvalRow

MAX_COLUMNS = 640
_LAYOUT: dict[str, Any] = {"template": "plotly_white", "margin": {"t": 60, "l": 60, "r": 20, "b": 50}}
_MODELS = (("base", "untouched base", "#999999"), ("sft", "SFT", "#1f77b4"), ("dpo", "DPO", "#d62728"))


def pool_columns(values: np.ndarray, max_columns: int) -> tuple[np.ndarray, list[int]]:
    """(layers, units) -> (layers, ≤ max_columns) keeping each bin's value of largest magnitude;
    and each bin's first unit."""
    width = values.shape[1]
    size = max(1, math.ceil(width / max_columns))
    if size == 1:
        return values, list(range(width))
    pad = (-width) % size
    padded = np.pad(values, ((0, 0), (0, pad)))
    blocks = padded.reshape(values.shape[0], -1, size)
    pick = np.abs(blocks).argmax(axis=2)
    return np.take_along_axis(blocks, pick[..., None], axis=2)[..., 0], list(range(0, width, size))


def depth_figure(shares: list[DepthShareResult]) -> go.Figure | None:
    """Per capability: the window's share of |Δ| with its 95% CI, beside the share a uniform spread gives."""
    if not shares:
        return None
    names = [s.capability for s in shares]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=names,
            y=[100 * s.share for s in shares],
            name="window's share of |Δ|",
            width=0.5,
            text=[f"{100 * s.share:.1f}%" for s in shares],
            textposition="inside",
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [100 * (s.ci_high - s.share) for s in shares],
                "arrayminus": [100 * (s.share - s.ci_low) for s in shares],
            },
        )
    )
    fig.add_trace(
        go.Scatter(
            x=names,
            y=[100 * s.uniform for s in shares],
            mode="markers",
            name="uniform spread",
            marker={"symbol": "line-ew-open", "size": 40, "color": "black", "line": {"width": 3}},
        )
    )
    first = shares[0]
    fig.update_layout(
        title=f"Share of the summed mean |Δ| in layers {format_layers(first.window)} of {first.n_model_layers} "
        f"({first.hook}, {first.metric}; 95% bootstrap CI, {first.n_resamples} resamples)",
        yaxis_title="% of |Δ| over all layers",
        yaxis_range=[0, 100],
        height=420,
        **_LAYOUT,
    )
    return fig


def profile_figure(shares: list[DepthShareResult]) -> go.Figure | None:
    """Per capability and layer: the layer's part of the summed mean |Δ|, the window shaded, a uniform spread dashed."""
    if not shares:
        return None
    fig = go.Figure()
    for s in shares:
        total = sum(s.scores) or 1.0
        fig.add_trace(
            go.Scatter(x=s.layers, y=[100 * v / total for v in s.scores], mode="lines+markers", name=s.capability)
        )
    first = shares[0]
    fig.add_vrect(
        x0=min(first.window) - 0.5,
        x1=max(first.window) + 0.5,
        fillcolor="#f2c14e",
        opacity=0.18,
        line_width=0,
        annotation_text="depth-scaled window",
        annotation_position="top left",
    )
    fig.add_hline(y=100 / len(first.layers), line_dash="dash", line_color="black", annotation_text="uniform")
    fig.update_layout(
        title=f"Layer profile: each layer's part of the summed mean |Δ| ({first.hook}, {first.metric})",
        xaxis_title="layer",
        yaxis_title="% of |Δ|",
        height=420,
        **_LAYOUT,
    )
    fig.update_xaxes(
        dtick=1 if len(first.layers) <= 40 else None, range=[min(first.layers) - 0.6, max(first.layers) + 0.6]
    )
    return fig


def heatmap_figure(maps: MetricMaps) -> go.Figure:
    """DPO − SFT over the analysed window, down-sampled (module doc), on a symmetric diverging scale."""
    values, starts = pool_columns(maps.delta, MAX_COLUMNS)
    bound = float(np.max(np.abs(values))) or 1.0
    pooled = len(starts) < maps.width
    fig = go.Figure(
        go.Heatmap(
            z=values.astype(np.float32),
            x=starts,
            y=maps.layers,
            colorscale="RdBu_r",
            zmid=0.0,
            zmin=-bound,
            zmax=bound,
            colorbar={"title": {"text": delta_label(maps)}},
            hovertemplate=("layer %{y}, units from %{x}" if pooled else "layer %{y}, unit %{x}")
            + ": %{z:.3g}<extra></extra>",
        )
    )
    note = f", units pooled by {math.ceil(maps.width / len(starts))} (largest |Δ| kept)" if pooled else ""
    fig.update_layout(
        title=f"{title_of(maps.capability)} · DPO − SFT · {maps.hook} · {maps.metric} (N={maps.n_samples}){note}",
        xaxis_title="unit",
        yaxis_title="layer",
        height=max(260, 14 * len(maps.layers) + 120),
        **_LAYOUT,
    )
    return fig


def placebo_figure(report: ABReport, arm: ArmResult) -> go.Figure | None:
    """How many placebo sets gave each Δ on the target capability (Δs are whole rows), with the real Δ marked (None
    for an arm without compliance, of ``--outcomes only``)."""
    c = next((c for c in arm.capabilities if c.capability == report.capability), None)
    if c is None:
        return None
    deltas = [round(100 * d, 6) for d in (c.placebo.deltas if c.placebo else []) if math.isfinite(d)]
    if not deltas:
        return None
    values = sorted(set(deltas))
    step, real = 100 / max(1, c.effect.n), 100 * c.effect.delta
    fig = go.Figure(
        go.Bar(
            x=values,
            y=[deltas.count(v) for v in values],
            width=0.8 * step,
            name="placebo sets",
            marker_color="#9aa5b1",
            hovertemplate="Δ %{x:+.1f}: %{y} placebo sets<extra></extra>",
        )
    )
    fig.add_vline(x=real, line_color="#d62728", line_width=3, annotation_text=f"real Δ {fmt_delta(c.effect.delta)}")
    low, high = min([*values, real]), max([*values, real])
    fig.update_layout(
        title=f"{arm.name} ({arm.model}): the real Δ among {len(deltas)} placebo sets, {report.capability}",
        xaxis_title="Δ compliance (points)",
        yaxis_title="placebo sets",
        xaxis_range=[low - 2 * step, high + 2 * step],
        height=320,
        **_LAYOUT,
    )
    return fig


def dose_figure(report: ABReport) -> go.Figure | None:
    """Per scale factor: Δ on the target capability with its 95% CI, and the share of generations it changed (when the
    report has two or more factors)."""
    from plotly.subplots import make_subplots

    arms = report.scale_arms
    results = [c for a in arms for c in a.capabilities if c.capability == report.capability]
    if len(arms) < 2 or len(results) != len(arms):  # --outcomes only: no compliance to plot
        return None
    effects = [c.effect for c in results]
    x = [repr(a.factor) for a in arms]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(
        go.Scatter(
            x=x,
            y=[100 * e.delta for e in effects],
            mode="lines+markers",
            name="Δ compliance (points)",
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [_err(100 * e.ci_high, 100 * e.delta) for e in effects],
                "arrayminus": [_err(100 * e.delta, 100 * e.ci_low) for e in effects],
            },
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Bar(
            x=x,
            y=[100 * c.rows_changed / max(1, c.n_rows) for c in results],
            name="generations changed (%)",
            opacity=0.35,
            marker_color="#7f7f7f",
        ),
        secondary_y=True,
    )
    fig.update_layout(
        title=f"Dose curve: {report.capability} compliance against the factor ({report.model} model)",
        xaxis_title="scale factor",
        xaxis_type="category",
        height=360,
        **_LAYOUT,
    )
    fig.update_yaxes(title_text="Δ (points)", secondary_y=False)
    fig.update_yaxes(title_text="generations changed (%)", range=[0, 100], showgrid=False, secondary_y=True)
    return fig


def _err(high: float, low: float) -> float:
    """An error bar's length (0 where either end is unknown)."""
    return high - low if math.isfinite(high) and math.isfinite(low) else 0.0


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def compliance_figure(table: list[EvalRow], judge: str = "rules") -> go.Figure | None:
    """Per capability, each evaluated model's compliance with its Wilson 95% interval."""
    if not table:
        return None
    names = [row.capability for row in table]
    fig = go.Figure()
    for key, label, colour in _MODELS:
        if getattr(table[0], f"{key}_rate") is None:
            continue
        rates = [100 * _or_nan(getattr(row, f"{key}_rate")) for row in table]
        cis = [[100 * v for v in (getattr(row, f"{key}_ci", None) or (math.nan, math.nan))] for row in table]
        fig.add_trace(
            go.Bar(
                x=names,
                y=rates,
                name=label,
                marker_color=colour,
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [_err(c[1], r) for c, r in zip(cis, rates, strict=True)],
                    "arrayminus": [_err(r, c[0]) for c, r in zip(cis, rates, strict=True)],
                },
            )
        )
    fig.update_layout(
        title=f"Compliance per capability ({judge} judge, greedy; Wilson 95% intervals)",
        barmode="group",
        yaxis_title="% of rows complying",
        yaxis_range=[0, 105],
        height=400,
        **_LAYOUT,
    )
    return fig

"""Plotly figures of the maps, written as offline HTML and, where Chromium exists, PNG.

Per capability × hook: the SFT map, the DPO map and the discrepancy (layers × units,
Δ on a diverging scale centred at 0, optionally units reordered by summed |Δ| as the
authors' ``lin_heat_map`` meant to), and the per-layer profile (mean |Δ| bars, share of
FDR-significant units as a line). Per hook: one faceted view of every capability's
discrepancy on a *shared* symmetric colour scale, so panels compare. Every title names
the layer window, and a subtitle says why it is that window (``MetricMaps.window``).

HTML is written with ``include_plotlyjs="directory"``: one ``plotly.min.js`` next to
the files, no CDN, so the plots open on an offline machine. That file is written here,
atomically, before any HTML (plotly would write it itself, in place). PNG goes through kaleido,
which needs a Chrome/Chromium binary; all PNGs are exported in one kaleido session.

Example:
    >>> d = np.array([[0.5, -2.0, 0.1], [0.0, 0.3, -0.4]])   # DPO − SFT at layers 12 and 13, 3 units each
    >>> sft, p = np.zeros_like(d), np.full_like(d, 0.5)
    >>> maps = MetricMaps("multi_turn", "mlp_out", "mean_diff", [12, 13], sft, d, d, p, p, n_samples=40)
    >>> [trace.type for trace in maps_figure(maps).data], title_of("multi_turn")   # SFT, DPO, DPO − SFT
    (['heatmap', 'heatmap', 'heatmap'], 'Multi-turn Instructions')
    >>> fig = maps_figure(maps)              # doctest: +SKIP
    >>> fig.show()                           # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.basis import basis_of_settings
from analysis.metric_maps import MetricMaps
from analysis.profile import layer_profile, unit_order
from analysis.rankings import ranking
from analysis.window import format_layers
from core.atomic import atomic_path, write_atomic
from core.capabilities import parse_capability
from core.errors import ProbeError

_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
_TITLE_ROOM = {"t": 120}  # a title and its window subtitle above the first panel's own title


def delta_label(maps: MetricMaps) -> str:
    """What Δ means for this map, including the normalisation of count differences."""
    row = ranking(maps.metric)
    if not row.normalizes:
        return row.delta_label
    return f"{row.delta_label} / {'N' if maps.settings.get('normalize', 'samples') == 'samples' else 'width'}"


def chromium_available() -> bool:
    """True when kaleido can find a browser to render PNGs with."""
    if os.environ.get("BROWSER_PATH") and Path(os.environ["BROWSER_PATH"]).exists():
        return True
    return any(shutil.which(name) for name in _BROWSERS)


def title_of(capability: str) -> str:
    """'multi_turn' -> 'Multi-turn Instructions' (the paper's panel titles); unknown names unchanged."""
    try:
        return parse_capability(capability).panel_title
    except ProbeError:
        return capability


def _columns(maps: MetricMaps, reorder: bool) -> tuple[np.ndarray, list[str] | np.ndarray, str]:
    if not reorder:
        return np.arange(maps.width), np.arange(maps.width), "unit"
    order = unit_order(maps)
    return order, [str(u) for u in order], "unit (sorted by Σ|Δ| over layers)"


def _symmetric(values: np.ndarray) -> float:
    bound = float(np.max(np.abs(values))) if values.size else 0.0
    return bound if bound > 0 else 1.0


def maps_figure(maps: MetricMaps, reorder: bool = False) -> go.Figure:
    """Three stacked heatmaps: SFT, DPO, and DPO − SFT (diverging, centred at 0)."""
    order, x, x_title = _columns(maps, reorder)
    value_label = ranking(maps.metric).value_label
    fig = make_subplots(
        rows=3,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=(f"SFT: {value_label}", f"DPO: {value_label}", f"DPO − SFT: {delta_label(maps)}"),
    )
    low = float(min(maps.sft.min(), maps.dpo.min())) if maps.sft.size else 0.0
    high = float(max(maps.sft.max(), maps.dpo.max())) if maps.sft.size else 1.0
    shared = {"zmin": low, "zmax": high}  # one scale for both models, so they compare
    bound = _symmetric(maps.delta)
    panels = (
        (maps.sft, "Viridis", shared),
        (maps.dpo, "Viridis", shared),
        (maps.delta, "RdBu_r", {"zmid": 0.0, "zmin": -bound, "zmax": bound}),
    )
    for i, (values, scale, extra) in enumerate(panels):
        fig.add_trace(
            go.Heatmap(
                z=values[:, order],
                x=x,
                y=maps.layers,
                colorscale=scale,
                colorbar={"len": 0.28, "y": 0.86 - 0.36 * i, "title": {"text": ""}},
                hovertemplate="layer %{y}, unit %{x}: %{z:.4g}<extra></extra>",
                **extra,
            ),
            row=i + 1,
            col=1,
        )
        fig.update_yaxes(title_text="layer", row=i + 1, col=1)
    if reorder:
        fig.update_xaxes(type="category", showticklabels=False)
    fig.update_xaxes(title_text=x_title, row=3, col=1)
    fig.update_layout(title=_title(maps), height=900, width=1200, margin=_TITLE_ROOM)
    return fig


def _title(maps: MetricMaps) -> str:
    """Capability, hook, metric, N and layers, then a subtitle with why these layers (when known)."""
    head = (
        f"{title_of(maps.capability)} · {maps.hook} · {maps.metric} (N={maps.n_samples}) "
        f"· layers {format_layers(maps.layers)} · {basis_tag(maps)}"
    )
    return head + _window_subtitle([maps])


def basis_tag(maps: MetricMaps) -> str:
    """'global basis' or 'local basis (dpo_on_sft)': which basis a map is in (:mod:`analysis.basis`)."""
    basis, direction = basis_of_settings(maps.settings)
    return f"{basis} basis" + (f" ({direction})" if direction else "")


def _window_subtitle(all_maps: list[MetricMaps]) -> str:
    """'<br><sup>window: …</sup>' from the maps' windows (each distinct reason once); '' when none is known."""
    reasons = list(dict.fromkeys(m.window.reason for m in all_maps if m.window is not None))
    return f"<br><sup>window: {'; '.join(reasons)}</sup>" if reasons else ""


def profile_figure(maps: MetricMaps, alpha: float) -> go.Figure:
    """Per layer: mean |Δ| (bars, left axis) and share of FDR-significant units (line, right axis)."""
    by_layer = sorted(layer_profile(maps, alpha), key=lambda r: r.layer)
    layers = [r.layer for r in by_layer]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Bar(x=layers, y=[r.mean_abs_delta for r in by_layer], name="mean |Δ|"), secondary_y=False)
    fig.add_trace(
        go.Scatter(
            x=layers,
            y=[r.share_significant for r in by_layer],
            name=f"share with q ≤ {alpha:g}",
            mode="lines+markers",
        ),
        secondary_y=True,
    )
    fig.update_xaxes(title_text="layer", dtick=1)
    fig.update_yaxes(title_text=f"mean |{delta_label(maps)}|", secondary_y=False)
    fig.update_yaxes(
        title_text="share of units FDR-significant",
        range=[0, 1],
        tickmode="linear",
        tick0=0,
        dtick=0.2,
        tickformat=".0%",
        showgrid=False,
        secondary_y=True,
    )
    fig.update_layout(title=f"Layer profile · {_title(maps)}", height=450, width=1000, margin=_TITLE_ROOM)
    return fig


def faceted_figure(all_maps: list[MetricMaps], reorder: bool = False) -> go.Figure:
    """Every capability's discrepancy map for one hook, one row each, on one shared colour scale."""
    if not all_maps:
        raise ProbeError("no maps to plot")
    bound = max(_symmetric(m.delta) for m in all_maps)
    fig = make_subplots(
        rows=len(all_maps),
        cols=1,
        vertical_spacing=0.25 / len(all_maps),
        subplot_titles=[f"{title_of(m.capability)} (N={m.n_samples})" for m in all_maps],
    )
    for i, maps in enumerate(all_maps):
        order, x, _ = _columns(maps, reorder)
        fig.add_trace(
            go.Heatmap(
                z=maps.delta[:, order],
                x=x,
                y=maps.layers,
                colorscale="RdBu_r",
                zmid=0.0,
                zmin=-bound,
                zmax=bound,
                showscale=i == 0,
                colorbar={"title": {"text": delta_label(maps)}},
                hovertemplate="layer %{y}, unit %{x}: %{z:.4g}<extra></extra>",
            ),
            row=i + 1,
            col=1,
        )
        fig.update_yaxes(title_text="layer", row=i + 1, col=1)
    if reorder:
        fig.update_xaxes(type="category", showticklabels=False)
    first = all_maps[0]
    spans = ", ".join(dict.fromkeys(format_layers(m.layers) for m in all_maps))
    fig.update_layout(
        title=f"DPO − SFT by capability · {first.hook} · {first.metric} · layers {spans} · {basis_tag(first)}"
        f"{_window_subtitle(all_maps)}",
        height=260 * len(all_maps) + 120,
        width=1200,
        margin=_TITLE_ROOM,
    )
    return fig


def write_figures(figures: dict[str, go.Figure], out_dir: Path, png: bool | None) -> tuple[list[Path], list[str]]:
    """Write ``{stem: figure}`` as ``stem.html`` (always) and ``stem.png`` (per ``png``); returns (paths, warnings).

    ``png=None``: PNG when a browser exists; ``True``: PNG required (:class:`ProbeError` without one);
    ``False``: HTML only.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    warnings: list[str] = []
    if figures:
        from plotly.offline import get_plotlyjs

        write_atomic(out_dir / "plotly.min.js", get_plotlyjs())
    for stem, fig in figures.items():
        target = out_dir / f"{stem}.html"
        with atomic_path(target) as tmp:  # plotly.min.js goes beside it, into out_dir
            fig.write_html(tmp, include_plotlyjs="directory", full_html=True)
        paths.append(target)
    if png is False or not figures:
        return paths, warnings
    if not chromium_available():
        if png:
            raise ProbeError(
                "--png: PNG export needs Chromium (kaleido renders with it); install it (`make chromium`) "
                "or pass --no-png"
            )
        warnings.append("PNG export skipped: no Chromium found (kaleido needs it); HTML plots were written")
        return paths, warnings
    pngs = [out_dir / f"{stem}.png" for stem in figures]
    try:
        import plotly.io as pio

        figs = list(figures.values())
        pio.write_images(figs, pngs, width=[f.layout.width for f in figs], height=[f.layout.height for f in figs])
    except Exception as exc:  # kaleido/browser failures are environmental, not user mistakes
        if png:
            raise ProbeError(f"PNG export failed ({type(exc).__name__}: {exc}); pass --no-png to skip it") from None
        warnings.append(f"PNG export failed ({type(exc).__name__}: {exc}); HTML plots were written")
        return paths, warnings
    return paths + pngs, warnings

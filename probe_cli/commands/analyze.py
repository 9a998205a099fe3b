"""``probe analyze RUN_DIR``: discrepancy maps, neuron sets, plots and the top-layers table.

Thin wrapper over :func:`analysis.analyze_run`; prints, per capability and hook, the
layers ranked by mean |Δ| with the share of FDR-significant units and each layer's RMS activation per model,
the layer window and why (:func:`window_line`), the top layers' bootstrap stability (:func:`stability_line`),
then any warnings (window cut to the recorded layers, skipped PNG export, a neuron set in near-silent layers)
and where the files went. ``probe run`` ends a recording with a one-line summary per capability and the same
window line and warnings (:func:`print_warnings`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from analysis.config import AnalysisConfig
from core.paths import check_output_dir

if TYPE_CHECKING:
    from rich.console import Console

    from analysis.run import AnalysisResult
    from analysis.summary import HookSummary


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)


def analyze(
    ctx: typer.Context,
    run_dir: Path = typer.Argument(..., help="A run directory holding activations.h5 (from `probe run`)."),
    metric: str = typer.Option(
        AnalysisConfig.metric,
        "--metric",
        help="topk_count (the paper's top-k% membership counts), mean_diff, effect_size (paired d_z), or attribution (gradient x (SFT - DPO) activation: the estimated change of --attribution-m if the DPO unit took the SFT value; loads the run's models).",
    ),
    attribution_m: str = typer.Option(
        AnalysisConfig.attribution_m,
        "--attribution-m",
        help="attribution: reference_logprob (DPO log-prob of each test row's reference answer) or dpo_margin (chosen - rejected log-prob on the capability's DPO pairs).",
    ),
    attribution_positions: str = typer.Option(
        AnalysisConfig.attribution_positions,
        "--attribution-positions",
        help="attribution: sum over all tokens (the positions an intervention acts at) or the response tokens only.",
    ),
    dpo_data: Optional[Path] = typer.Option(
        AnalysisConfig.dpo_data,
        "--dpo-data",
        help="attribution with dpo_margin: the DPO pairs (default: the run's --responses file or DPO --data).",
    ),
    top_percent: float = typer.Option(
        AnalysisConfig.top_percent,
        "--top-percent",
        help="topk_count: share of units kept per sample and layer, in percent.",
    ),
    layers: Optional[str] = typer.Option(
        AnalysisConfig.layers,
        "--layers",
        help="Layer window, e.g. 12-31, 12-, 3,5,7 or all; must lie in the model. Default: the paper's 12-31 scaled by depth (11-29 of 30 layers).",
    ),
    capability: Optional[list[str]] = typer.Option(
        None,
        "--capability",
        "-c",
        help="Capability (repeatable, or comma-separated, or 'all'); default: every recorded one.",
    ),
    hook: Optional[list[str]] = typer.Option(
        None,
        "--hook",
        help="Hook point (repeatable): mlp_out, attn_out, resid_post, mlp_post; default: every recorded one.",
    ),
    normalize: str = typer.Option(
        AnalysisConfig.normalize,
        "--normalize",
        help="topk_count: divide count differences by the number of samples, or by the width (the authors' script).",
    ),
    top_k: int = typer.Option(
        AnalysisConfig.top_k, "--top-k", help="Units in each neuron set (the cap, for --rule fdr)."
    ),
    rule: str = typer.Option(
        AnalysisConfig.rule,
        "--rule",
        help="Neuron selection: top_k_abs (largest |Δ|) or fdr (BH-significant, |Δ| >= --threshold).",
    ),
    threshold: float = typer.Option(AnalysisConfig.threshold, "--threshold", help="Minimum |Δ| for a selected unit."),
    fdr_alpha: float = typer.Option(
        AnalysisConfig.fdr_alpha, "--fdr-alpha", help="Benjamini-Hochberg level across layers x units."
    ),
    test: str = typer.Option(
        AnalysisConfig.test,
        "--test",
        help="mean_diff/effect_size: paired t-test (t) or Wilcoxon signed-rank (wilcoxon).",
    ),
    reorder: bool = typer.Option(
        AnalysisConfig.reorder,
        "--reorder",
        help="Plot units sorted by summed |Δ| (as the authors' lin_heat_map intended).",
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Output directory (default: RUN_DIR/analysis)."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write plotly figures."),
    png: Optional[bool] = typer.Option(
        None, "--png/--no-png", help="PNG export through kaleido (default: when Chromium is installed)."
    ),
    show: int = typer.Option(5, "--show", min=1, help="Layers shown per capability and hook."),
    stability_resamples: int = typer.Option(
        AnalysisConfig.stability_resamples,
        "--stability-resamples",
        help="Bootstrap resamples of the prompts for the top layers' stability (0: off).",
    ),
    config_file: Optional[Path] = typer.Option(
        None, "--config", help="JSON or YAML file of AnalysisConfig fields (flags override it)."
    ),
) -> None:
    """Compare SFT and DPO activations of a run: maps, per-layer profile, neuron sets, plots."""
    from dataclasses import asdict

    from analysis import analyze_run
    from core.config_file import build_config
    from probe_cli.console import console

    options = dict(
        metric=metric,
        top_percent=top_percent,
        layers=layers,
        normalize=normalize,
        top_k=top_k,
        fdr_alpha=fdr_alpha,
        rule=rule,
        threshold=threshold,
        test=test,
        reorder=reorder,
        stability_resamples=stability_resamples,
        attribution_m=attribution_m,
        attribution_positions=attribution_positions,
        dpo_data=dpo_data,
    )
    given = {
        key: value
        for key, value in options.items()  # flags left at their defaults do not override the file
        if getattr(ctx.get_parameter_source(key), "name", None) == "COMMANDLINE"
    }  # typer's click, not necessarily `click`
    config = build_config(AnalysisConfig, config_file, given)
    if out is not None or run_dir.is_dir():
        check_output_dir(out or run_dir / "analysis", "--out" if out is not None else "the default --out")
    result = analyze_run(
        run_dir, capabilities=capability, hooks=hook, out_dir=out, plots=plots, png=png, **asdict(config)
    )
    print_report(result, console(), show)


def print_warnings(result: AnalysisResult, console: Console) -> None:
    for note in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {note}")


def window_line(body: HookSummary) -> str | None:
    """'window: layers 11-29 — default window: …' for one capability × hook of the summary."""
    return f"window: {body.window.describe()}" if body.window else None


def stability_line(body: HookSummary) -> str | None:
    """'top layers 25, 18, … — stable in 19/20 resamples (≥4 of 5 kept)', or None without a bootstrap."""
    return body.stability.describe() if body.stability else None


def base_line(body: HookSummary) -> str | None:
    """The SFT − base against DPO − SFT comparison (a run recorded with --base), or None."""
    return body.base.describe() if body.base else None


def print_report(result: AnalysisResult, console: Console, show: int = 5) -> None:
    """The top-layers table per capability × hook, then warnings and output paths."""
    from rich.table import Table

    summary = result.summary
    assert summary is not None
    alpha = summary.settings["fdr_alpha"]
    for cap, hook, body in summary.hooks():
        table = Table(title=f"{cap} · {hook} · {summary.metric} · N={body.n_samples} · layers {body.layers}")
        for name in ("rank", "layer", "mean |Δ|", f"share q≤{alpha:g}", "RMS sft", "RMS dpo", "top unit", "its Δ"):
            table.add_column(name, justify="right")
        best = _best_unit_by_layer(body.top_units)
        for row in body.top_layers[:show]:
            unit = best.get(row["layer"])
            table.add_row(
                str(row["rank"]),
                str(row["layer"]),
                f"{row['mean_abs_delta']:.4g}",
                f"{row['share_significant']:.1%}",
                f"{row['rms_sft']:.3g}" if "rms_sft" in row else "-",
                f"{row['rms_dpo']:.3g}" if "rms_dpo" in row else "-",
                str(unit["unit"]) if unit else "-",
                f"{unit['delta']:+.4g}" if unit else "-",
            )
        console.print(table)
        for line in (window_line(body), stability_line(body), base_line(body)):
            if line:
                console.print(line, markup=False, highlight=False, soft_wrap=True)
    print_warnings(result, console)
    console.print(f"summary: {result.summary_path}")
    console.print(f"maps: {result.maps_path}")
    for path in result.neuron_sets.values():
        console.print(f"neuron set: {path}")
    if result.plots:
        console.print(f"plots: {len(result.plots)} files in {result.plots[0].parent}")


def _best_unit_by_layer(units: list[dict]) -> dict[int, dict]:
    best: dict[int, dict] = {}
    for unit in units:  # already ranked by |Δ|
        best.setdefault(unit["layer"], unit)
    return best

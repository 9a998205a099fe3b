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
from typing import TYPE_CHECKING

import typer

from analysis.config import AnalysisConfig
from core.config_file import Range
from core.paths import check_output_dir
from core.run_dir import ACTIVATIONS_FILE, RunDir, Writer
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options, count_option

if TYPE_CHECKING:
    from rich.console import Console

    from analysis.profile import RankedUnit
    from analysis.run import AnalysisResult
    from analysis.summary import HookSummary


def register(app: typer.Typer) -> None:
    app.command("analyze")(analyze)


@config_options(AnalysisConfig)
def analyze(
    run_dir: Path = typer.Argument(..., help=f"A run directory holding {ACTIVATIONS_FILE} (from `probe run`)."),
    settings: ConfigFlags = FROM_CONFIG,
    capability: list[str] | None = typer.Option(
        None,
        "--capability",
        "-c",
        help="Capability (repeatable, or comma-separated, or 'all'); default: every recorded one.",
    ),
    hook: list[str] | None = typer.Option(
        None,
        "--hook",
        help="Hook point (repeatable): mlp_out, attn_out, resid_post, mlp_post; default: every recorded one.",
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Output directory (default: RUN_DIR/analysis; RUN_DIR/analysis/local for --basis local)."
    ),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Write plotly figures."),
    png: bool | None = typer.Option(
        None, "--png/--no-png", help="PNG export through kaleido (default: when Chromium is installed)."
    ),
    show: int = count_option(5, "--show", "Layers shown per capability and hook.", Range(1, 10_000)),
) -> None:
    """Compare SFT and DPO activations of a run: maps, per-layer profile, neuron sets, plots."""
    from analysis import analyze_run
    from analysis.basis import analysis_dir
    from analysis.run import prior_pass_first
    from probe_cli.console import console

    config = settings.build()
    if out is not None or run_dir.is_dir():
        run = RunDir(run_dir)
        check_output_dir(
            analysis_dir(run_dir, config.basis, out).root,
            "--out" if out is not None else "the default --out",
            {"RUN_DIR's recording": run.activations, "RUN_DIR's settings": run.settings_file},
            writer=Writer.ANALYZE,
        )
    if not prior_pass_first(run_dir, config):  # a helper rank of a data-parallel prior pass: its share is done
        return
    result = analyze_run(run_dir, config, capabilities=capability, hooks=hook, out_dir=out, plots=plots, png=png)
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

    from analysis.basis import describe_basis

    summary = result.summary
    alpha = summary.settings["fdr_alpha"]
    basis = summary.settings.get("basis", "global")
    for cap, hook, body in summary.hooks():
        table = Table(
            title=f"{cap} · {hook} · {summary.metric} · {basis} basis · N={body.n_samples} · layers {body.layers}"
        )
        for name in ("rank", "layer", "mean |Δ|", f"share q≤{alpha:g}", "RMS sft", "RMS dpo", "top unit", "its Δ"):
            table.add_column(name, justify="right")
        best = _best_unit_by_layer(body.top_units)
        for row in body.top_layers[:show]:
            unit = best.get(row.layer)
            table.add_row(
                str(row.rank),
                str(row.layer),
                f"{row.mean_abs_delta:.4g}",
                f"{row.share_significant:.1%}",
                f"{row.rms_sft:.3g}" if row.rms_sft is not None else "-",
                f"{row.rms_dpo:.3g}" if row.rms_dpo is not None else "-",
                str(unit.unit) if unit else "-",
                f"{unit.delta:+.4g}" if unit else "-",
            )
        console.print(table)
        for line in (window_line(body), stability_line(body), base_line(body)):
            if line:
                console.print(line, markup=False, highlight=False, soft_wrap=True)
    maps = next(iter(result.maps.values()), None)
    direction = maps.settings.get("direction") if maps is not None else None
    console.print(describe_basis(basis, direction), markup=False, highlight=False, soft_wrap=True)
    print_warnings(result, console)
    console.print(f"summary: {result.summary_path}")
    console.print(f"maps: {result.maps_path}")
    for path in result.neuron_sets.values():
        console.print(f"neuron set: {path}")
    if result.plots:
        console.print(f"plots: {len(result.plots)} files in {result.plots[0].parent}")


def _best_unit_by_layer(units: list[RankedUnit]) -> dict[int, RankedUnit]:
    best: dict[int, RankedUnit] = {}
    for unit in units:  # already ranked by |Δ|
        best.setdefault(unit.layer, unit)
    return best

"""``probe explain RUN_DIR -c CAPABILITY``: a neuron card per top unit, weight change, and the mean difference read out.

Thin wrapper over :func:`analysis.explain.explain_run`. Prints, per hook point, one row per
top unit of the run's analysis (layer:unit, its rank under each ranking, Δ with its 95% CI,
its relative weight change SFT → DPO and base → SFT, the tokens it promotes and suppresses
through the DPO model's final norm and unembedding, and the prompts on which it is most
active in each model); then, per layer of the window, Spearman's ρ between weight change
and |Δ| with its permutation p, the top-K overlap, and what the DPO − SFT mean difference
pushes up and down; then notes and the files written (``analysis/explain_*.json|html``,
the weight change, plots).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from analysis.explain_config import ExplainConfig
from analysis.rankings import RANKINGS
from core.config_file import Range
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options, count_option

if TYPE_CHECKING:
    from rich.console import Console

    from analysis.explain import ExplainResult
    from analysis.explain_record import ExplainRecord
    from analysis.readout import ReadOut

RANK_NAMES = {
    **{name: row.short for name, row in RANKINGS.items() if row.analyzed},
    "weights_sft_dpo": "w s→d",
    "weights_base_sft": "w b→s",
}


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)


@config_options(ExplainConfig)
def explain(
    run_dir: Path = typer.Argument(..., help="A run directory from `probe run`, analysed (`probe analyze`)."),
    settings: ConfigFlags = FROM_CONFIG,
    show: int = count_option(
        3, "--show", "Tokens per read-out and prompts per model printed (the files keep all).", Range(1, 10_000)
    ),
) -> None:
    """Explain the top units of a run: read-out through the unembedding, weight change, ranking agreement,
    neuron cards."""
    from analysis.explain import explain_run
    from core.paths import check_output_dir
    from core.run_dir import AnalysisDir, RunDir, Writer
    from probe_cli.console import console

    config = settings.build()
    if config.out_dir is not None or run_dir.is_dir():
        run, analysis = RunDir(run_dir), AnalysisDir(config.analysis_dir or RunDir(run_dir).analysis.root)
        inputs = {
            "RUN_DIR's recording": run.activations,
            "RUN_DIR's settings": run.settings_file,
            "the analysis": analysis.summary,
            "--sft": config.models.sft_dir,
            "--dpo": config.models.dpo_dir,
            "--base": config.models.base_dir,
        }
        flag = "--out" if config.out_dir is not None else "the default --out"
        check_output_dir(config.out_dir or analysis.root, flag, inputs, writer=Writer.EXPLAIN)
    print_report(explain_run(run_dir, config), console(), show)


def print_report(result: ExplainResult, out: Console, show: int = 3) -> None:
    for record in result.records.values():
        out.print(_cards_table(record, show))
        out.print(_agreement_table(record))
        for agreement in record.agreement:
            t = agreement.top
            out.print(
                f"{_label(agreement.transition)}: the top {t.k} units by |Δ| and by weight change share {t.overlap} "
                f"(chance {t.expected:.2g}, hypergeometric p {t.p_hypergeometric:.2g})",
                highlight=False,
            )
        out.print(_mean_difference_table(record, show))
    for note in result.notes:
        out.print(f"[yellow]note:[/yellow] {note}", soft_wrap=True)
    for path in result.files:
        if path.suffix in (".json", ".html", ".h5") and "plots" not in path.parts:
            out.print(f"wrote: {path}", soft_wrap=True, highlight=False)
    plots = [p for p in result.files if "plots" in p.parts]
    if plots:
        out.print(f"plots: {len(plots)} files in {plots[0].parent}", highlight=False)


def _label(transition: str) -> str:
    from analysis.weight_change import LABELS

    return LABELS.get(transition, transition)


def _tokens(readout: ReadOut, show: int) -> tuple[str, str]:
    from analysis.readout import shown

    return " ".join(shown(t.token) for t in readout.promoted[:show]), " ".join(
        shown(t.token) for t in readout.suppressed[:show]
    )


def _cards_table(record: ExplainRecord, show: int) -> object:
    from rich.table import Table

    from analysis.explain_html import num

    table = Table(
        title=f"{record.capability} · {record.hook} · top {len(record.cards)} by |Δ {record.metric}| · "
        f"N={record.n_samples} · layers {record.window.layers[0]}-{record.window.layers[-1]} · read through the DPO "
        "model's unembedding"
    )
    for name in ("unit", "ranks", "Δ [95% CI]", "weight change", "promotes", "suppresses", "most active (sft | dpo)"):
        table.add_column(name, overflow="fold")
    for card in record.cards:
        ranks = " ".join(f"{RANK_NAMES.get(k, k)} {v}" for k, v in card.ranks.items())
        change = "\n".join(f"{_label(t)} {num(v['relative'], 3)}" for t, v in card.weight_change.items())
        up, down = _tokens(card.readout, show)
        hits = "\n".join(
            f"{model}: "
            + "; ".join(f"#{h.row} {num(getattr(h, model), 3)} {h.distinct_tail[-48:]!r}" for h in hits[:show])
            for model, hits in card.top_prompts.items()
        )
        table.add_row(
            f"{card.layer}:{card.unit}",
            ranks,
            f"{card.delta:+.4g} [{num(card.ci_low)}, {num(card.ci_high)}]",
            change,
            up,
            down,
            hits,
        )
    return table


def _agreement_table(record: ExplainRecord) -> object:
    from rich.table import Table

    from analysis.explain_html import num

    table = Table(
        title=f"Spearman ρ(weight change, |Δ {record.metric}|) per layer, permutation p, "
        f"BH q · {record.capability} · {record.hook}"
    )
    table.add_column("layer", justify="right")
    for agreement in record.agreement:
        for column in ("ρ", "p", "q"):
            table.add_column(f"{_label(agreement.transition)} {column}", justify="right")
    for i, layer in enumerate(record.window.layers):
        cells = []
        for agreement in record.agreement:
            row = agreement.layers[i]
            cells += [
                num(row.spearman, 3) if row.spearman is not None else "n/a",
                num(row.p_permutation, 2),
                num(row.q, 2),
            ]
        table.add_row(str(layer), *cells)
    return table


def _mean_difference_table(record: ExplainRecord, show: int) -> object:
    from rich.table import Table

    from analysis.explain_html import num

    table = Table(
        title=f"DPO − SFT mean difference of {record.capability} at {record.hook} ({record.position} position), "
        "through the DPO model's final norm and unembedding"
    )
    for name in ("layer", "‖mean Δ‖", "pushes up", "pushes down"):
        table.add_column(name, overflow="fold")
    for row in record.mean_difference:
        up, down = _tokens(row.readout, max(show, 5))
        table.add_row(str(row.layer), num(row.norm, 3), up, down)
    return table

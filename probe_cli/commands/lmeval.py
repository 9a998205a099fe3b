"""``probe lmeval``: any lm-evaluation-harness task before and after an edit, with a paired test per task.

Thin wrapper over :func:`interventions.lmeval.run_lmeval`: flags build an
:class:`interventions.lmeval.LMEvalConfig` (the edit options are ``probe intervene``'s, checked
the same way), the library writes ``lmeval_report.json``, ``lmeval_report.md`` and
``lmeval_items.jsonl``, and this prints one table per edited arm. lm-eval is an optional extra;
without it the command says in one line how to install it, before anything else runs.
``--ab-report DIR`` takes the edit of an A/B run (``probe intervene --out DIR``) and adds the table
to its report.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from core.paths import check_output_dir
from core.run_dir import RunDir
from probe_cli.console import console
from probe_cli.pairs import default_pair, pair_option

if TYPE_CHECKING:
    from interventions.lmeval_report import LMEvalReport


def register(app: typer.Typer) -> None:
    app.command("lmeval")(lmeval)


def lmeval(
    run_dir: Optional[Path] = typer.Argument(None, help="Run directory from `probe run` (model dirs, ranking, means)."),
    tasks: Optional[str] = typer.Option(
        None, "--tasks", help="lm-eval tasks, groups or task YAML files, comma-separated, e.g. mmlu,gsm8k."
    ),
    include_path: Optional[list[Path]] = typer.Option(
        None, "--include-path", help="Directory (or file) of local task YAMLs; repeatable."
    ),
    limit: Optional[int] = typer.Option(
        None, "--limit", help="At most N items per task (the same items in every pass)."
    ),
    num_fewshot: Optional[int] = typer.Option(
        None, "--num-fewshot", help="Few-shot examples per item (default: the task's)."
    ),
    chat_template: Optional[bool] = typer.Option(
        None,
        "--chat-template/--no-chat-template",
        help="Render prompts with the model's chat template (lm-eval's apply_chat_template). Default: off.",
    ),
    gen_kwargs: Optional[str] = typer.Option(
        None, "--gen-kwargs", help="lm-eval generation overrides, e.g. max_gen_toks=64."
    ),
    capability: Optional[str] = typer.Option(
        None,
        "--capability",
        "-c",
        help="The run's capability whose ranking and means define the edit. Default: multi_turn.",
    ),
    model: Optional[str] = typer.Option(
        None, "--model", help="Which model of the pair to evaluate: sft or dpo (default)."
    ),
    edit: Optional[list[str]] = typer.Option(
        None,
        "--edit",
        metavar="KIND[,KIND]",
        help="Edited arms: scale (--factor, --dose), mean (the other model's mean), patch (from the other model), "
        "steer (mean-difference vector). Default: scale.",
    ),
    factor: Optional[float] = typer.Option(
        None, "--factor", help="Scale factor (0 ablates). Default: the paper's 1 - 1e-6."
    ),
    dose: Optional[str] = typer.Option(None, "--dose", help="More scale arms: comma-separated factors, e.g. 0,0.5."),
    neurons: Optional[Path] = typer.Option(None, "--neurons", help="Neuron-set JSON file (from `probe analyze`)."),
    top_k: Optional[int] = typer.Option(
        None, "--top-k", help="Top K units by |delta| of the run's ranking (or of --neurons)."
    ),
    units: Optional[str] = typer.Option(None, "--units", help="Explicit units LAYER:UNIT[,...], e.g. 14:3,14:9,20:0."),
    hook: Optional[str] = typer.Option(
        None, "--hook", help="Hook point for --top-k from a run and --units. Default: mlp_out."
    ),
    placebo: Optional[int] = typer.Option(
        None, "--placebo", help="Random matched unit sets per arm, each a full lm-eval pass. Default: 0."
    ),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the bootstrap and the placebo draws. Default: 0."),
    bootstrap: Optional[int] = typer.Option(
        None, "--bootstrap", help="Bootstrap resamples for the CIs. Default: 10000."
    ),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="lm-eval batch size. Default: 8."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Model dtype: float32 (default), bfloat16 or float16."),
    device: Optional[str] = typer.Option(None, "--device", help="Torch device, e.g. cpu (default) or cuda."),
    model_dir: Optional[Path] = typer.Option(
        None, "--model-dir", help="Model to evaluate (default: the run's --model, or the embedded default pair's)."
    ),
    source_dir: Optional[Path] = typer.Option(
        None,
        "--source-dir",
        help="The other model of the pair, the source of --edit patch (default: the run's, or the default pair's).",
    ),
    pair: str = pair_option(),
    ab_report: Optional[Path] = typer.Option(
        None,
        "--ab-report",
        help="Output dir of `probe intervene`: use its edit (flags override) and add this table to its ab_report.md.",
    ),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Output dir (default: RUN_DIR/lmeval/<time>, the --ab-report dir, or runs/lmeval/<time>)."
    ),
    config_file: Optional[Path] = typer.Option(
        None, "--config", help="JSON or YAML file of LMEvalConfig fields (flags override it)."
    ),
) -> None:
    """Run lm-eval tasks on the model unedited and edited (scale, mean-ablate, patch, steer)
    and compare them item by item."""
    from dataclasses import replace

    from core.config_file import build_config
    from interventions.lmeval import LMEvalConfig, ab_defaults, run_lmeval
    from interventions.lmeval_model import require_lm_eval
    from interventions.scaling import parse_factors

    require_lm_eval()
    flags: dict[str, Any] = dict(
        tasks=tasks,
        include_path=include_path,
        limit=limit,
        num_fewshot=num_fewshot,
        apply_chat_template=chat_template,
        gen_kwargs=gen_kwargs,
        run_dir=run_dir,
        capability=capability,
        model=model,
        edits=[n for spec in edit for n in spec.split(",")] if edit else None,
        factor=factor,
        doses=parse_factors(dose) if dose is not None else None,
        neurons=neurons,
        top_k=top_k,
        units=units,
        hook=hook,
        placebo=placebo,
        seed=seed,
        n_bootstrap=bootstrap,
        batch_size=batch_size,
        dtype=dtype,
        device=device,
        model_dir=model_dir,
        source_dir=source_dir,
        ab_report=ab_report,
        out_dir=out,
    )
    if ab_report is not None:
        from_ab = ab_defaults(ab_report)
        flags = {key: value if value is not None else from_ab.get(key) for key, value in flags.items()}
    config = build_config(LMEvalConfig, config_file, flags, required=("tasks",))
    config = _with_defaults(config, pair)
    out_dir = Path(config.out_dir) if config.out_dir is not None else _default_out(config)
    check_output_dir(out_dir, "--out" if config.out_dir is not None else "the default --out")
    err = console(stderr=True)
    report = run_lmeval(replace(config, out_dir=out_dir), progress=lambda line: err.print(f"[dim]{line}[/dim]"))
    _print(report)


def _with_defaults(config: Any, pair: str) -> Any:
    """Without a run or --model-dir, the embedded default pair's model (and, for --edit patch, its other model)."""
    from dataclasses import replace

    patch = "patch" in config.ab_config().edits
    if config.run_dir is not None or (config.model_dir is not None and (not patch or config.source_dir is not None)):
        return config
    default = default_pair(pair)
    dirs = {"dpo": default.dpo_dir, "sft": default.sft_dir}
    source = config.source_dir or (dirs["sft" if config.model == "dpo" else "dpo"] if patch else None)
    return replace(config, model_dir=config.model_dir or dirs[config.model], source_dir=source)


def _default_out(config: Any) -> Path:
    if config.ab_report is not None:
        return Path(config.ab_report)
    runs = RunDir(config.run_dir if config.run_dir is not None else "runs")  # without a run, under runs/ alike
    return runs.lmeval / time.strftime("%Y%m%d-%H%M%S")


def _print(report: LMEvalReport) -> None:
    from rich.table import Table

    from interventions.lmeval_report import fmt_change, fmt_value
    from interventions.report import fmt_p, fmt_percentile

    out = console()
    for warning in report.warnings:
        out.print(f"[yellow]warning:[/yellow] {warning}")
    for arm in report.arms:
        table = Table(
            title=f"{arm.label} on {report.neurons.get('size', 0)} units of {report.neurons.get('hook')}, "
            f"{report.model} model, {report.dtype}"
        )
        columns = ["task", "metric", "filter", "n", "before", "after", "Δ", "95% CI", "McNemar p", "changed"] + (
            ["placebo"] if arm.placebo.get("n_sets") else []
        )
        for name in columns:
            table.add_column(
                name,
                justify="left" if name in ("task", "metric", "filter", "95% CI") else "right",
                no_wrap=name == "task",
            )
        for r in arm.rows:
            cells = [
                r.task + (" (group)" if r.group else ""),
                r.metric,
                r.filter,
                str(r.n),
                fmt_value(r.before, r.binary),
                fmt_value(r.after, r.binary),
                fmt_change(r.delta, r.binary),
                f"[{fmt_change(r.ci_low, r.binary)}, {fmt_change(r.ci_high, r.binary)}]",
                fmt_p(r.p_value) if r.p_value is not None else "-",
                "-" if r.items_changed is None else f"{r.items_changed}/{r.n}",
            ]
            if arm.placebo.get("n_sets"):
                cells.append(
                    f"{fmt_percentile(r.placebo['percentile'])} (p={fmt_p(r.placebo['p_empirical'])})"
                    if r.placebo
                    else "-"
                )
            table.add_row(*cells)
        out.print(table)
        for flag in arm.flags:
            out.print(f"[bold red]NO-OP:[/bold red] {flag}")
    for kind, path in report.paths.items():
        out.print(f"{kind}: {path}", soft_wrap=True)

"""``probe intervene``: placebo-controlled A/B evaluation of edits to the selected units during generation.

Thin wrapper over :func:`interventions.ab.run_ab`: flags build an
:class:`interventions.config.ABConfig` (which validates them), the library writes
``ab_report.json``, ``ab_report.md`` and ``generations.jsonl``, and this prints one table of
every arm, the per-arm tables, any no-op warning and any arm whose edit broke the model. Ctrl-C keeps the
finished generation arms in ``OUT/.arms``; the same command with the same ``--out``
resumes from them (:mod:`interventions.arms`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from core.paths import check_output_dir
from probe_cli.console import console
from probe_cli.latest import point_latest
from probe_cli.pairs import default_pair, pair_option

if TYPE_CHECKING:
    from interventions.results import ABReport


def register(app: typer.Typer) -> None:
    app.command("intervene")(intervene)


def _default_out(run_dir: Optional[Path], capability: str, model: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = run_dir / "interventions" if run_dir is not None else Path("runs") / "interventions"
    return root / f"{capability}_{model}_{stamp}"


def intervene(
    run_dir: Optional[Path] = typer.Argument(
        None, help="Run directory from `probe run` (model dirs, data file, ranking)."
    ),
    capability: Optional[str] = typer.Option(
        None, "--capability", "-c", help="Target capability (the others are scored as collateral). Default: multi_turn."
    ),
    model: Optional[str] = typer.Option(
        None, "--model", help="Which model of the pair to intervene on: sft or dpo (default)."
    ),
    edit: Optional[list[str]] = typer.Option(
        None,
        "--edit",
        metavar="KIND[,KIND]",
        help="Arms, comma-separated or repeated: scale (factor, doses, control), mean (the other model's mean), patch (both ways between the pair), steer (mean-difference vector). Default: scale.",
    ),
    factor: Optional[float] = typer.Option(
        None, "--factor", help="Scale factor (0 ablates). Default: the paper's 1 - 1e-6 (ABConfig.factor)."
    ),
    neurons: Optional[Path] = typer.Option(None, "--neurons", help="Neuron-set JSON file (from `probe analyze`)."),
    top_k: Optional[int] = typer.Option(
        None, "--top-k", help="Top K units by |delta| of the run's ranking (or of --neurons)."
    ),
    units: Optional[str] = typer.Option(None, "--units", help="Explicit units LAYER:UNIT[,...], e.g. 14:3,14:9,20:0."),
    hook: Optional[str] = typer.Option(
        None, "--hook", help="Hook point for --top-k from a run and --units. Default: mlp_out."
    ),
    placebo: Optional[int] = typer.Option(
        None, "--placebo", help="Random matched neuron sets for the placebo control (0 = none). Default: 20."
    ),
    dose: Optional[str] = typer.Option(
        None, "--dose", help="Dose sweep: comma-separated factors, e.g. 0,0.5,0.999999."
    ),
    control: Optional[bool] = typer.Option(
        None, "--control/--no-control", help="Also run factor 0 as a positive control (effect-size guard). Default: on."
    ),
    judge: Optional[str] = typer.Option(
        None, "--judge", help="rules (default: offline, synthetic data) or llm (OpenAI-compatible endpoint)."
    ),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="LLM judge model. Env: OPENAI_MODEL."),
    judge_base_url: Optional[str] = typer.Option(
        None, "--judge-base-url", help="LLM judge endpoint. Env: OPENAI_BASE_URL."
    ),
    judge_timeout: Optional[float] = typer.Option(
        None, "--judge-timeout", help="LLM judge: seconds per request before a retry (default 60)."
    ),
    judge_retries: Optional[int] = typer.Option(
        None, "--judge-retries", help="LLM judge: retries after the first attempt (default 4)."
    ),
    judge_backoff: Optional[float] = typer.Option(
        None, "--judge-backoff", help="LLM judge: first wait between retries, doubling (default 1 s)."
    ),
    max_new_tokens: Optional[int] = typer.Option(
        None, "--max-new-tokens", help="Tokens generated per prompt. Default: 32."
    ),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Prompts per generation batch. Default: 16."),
    sample: Optional[bool] = typer.Option(
        None,
        "--sample/--greedy",
        help="Seeded sampling instead of greedy decoding (same seed in every arm). Default: greedy.",
    ),
    temperature: Optional[float] = typer.Option(
        None, "--temperature", help="Sampling temperature (with --sample). Default: 1.0."
    ),
    seed: Optional[int] = typer.Option(
        None, "--seed", help="Seed for placebo draws, bootstrap and sampling. Default: 0."
    ),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Model dtype: float32 (default), bfloat16 or float16."),
    device: Optional[str] = typer.Option(None, "--device", help="Torch device, e.g. cpu (default) or cuda."),
    backend: Optional[str] = typer.Option(None, "--backend", help="torch (default: hooks) or nnsight."),
    engine: Optional[str] = typer.Option(
        None,
        "--engine",
        help="shared (default: every arm of a model decodes in shared batches, sharing the blocks below the edits) or per-arm (one generate() per arm).",
    ),
    max_batch_tokens: Optional[int] = typer.Option(
        None,
        "--max-batch-tokens",
        help="Shared engine: padded tokens per prompt-pass forward. Default: the device's (2048 on CPU).",
    ),
    limit: Optional[int] = typer.Option(
        None, "--limit", help="At most N rows per capability (interleaved across tasks)."
    ),
    collateral: Optional[bool] = typer.Option(
        None, "--collateral/--no-collateral", help="Score the other capabilities too. Default: on."
    ),
    collateral_rows: Optional[int] = typer.Option(
        None,
        "--collateral-rows",
        help="Rows of each other capability scored as collateral (interleaved across tasks). Default: 16.",
    ),
    model_dir: Optional[Path] = typer.Option(
        None, "--model-dir", help="Model to intervene on (default: the run's --model, or the embedded default pair's)."
    ),
    source_dir: Optional[Path] = typer.Option(
        None,
        "--source-dir",
        help="The other model of the pair, the source of --edit patch (default: the run's, or the default pair's).",
    ),
    data: Optional[Path] = typer.Option(
        None, "--data", help="Test rows JSONL (default: the run's data file, or the default pair's test split)."
    ),
    pair: str = pair_option(),
    out: Optional[Path] = typer.Option(
        None, "--out", help="Output dir (default: RUN_DIR/interventions/<capability>_<model>_<time>)."
    ),
    config_file: Optional[Path] = typer.Option(
        None, "--config", help="JSON or YAML file of ABConfig fields (flags override it)."
    ),
) -> None:
    """Edit the selected units during generation (scale, mean-ablate, patch, steer) and compare with the baselines and placebo arms."""
    from dataclasses import replace

    from core.config_file import build_config
    from interventions.ab import run_ab
    from interventions.config import ABConfig
    from interventions.scaling import parse_factors

    err = console(stderr=True)
    flags = dict(
        run_dir=run_dir,
        capability=capability,
        model=model,
        edits=[n for spec in edit for n in spec.split(",")] if edit else None,
        factor=factor,
        neurons=neurons,
        top_k=top_k,
        units=units,
        hook=hook,
        doses=parse_factors(dose) if dose is not None else None,
        positive_control=control,
        placebo=placebo,
        seed=seed,
        judge=judge,
        judge_base_url=judge_base_url,
        judge_model=judge_model,
        judge_timeout=judge_timeout,
        judge_retries=judge_retries,
        judge_backoff=judge_backoff,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        do_sample=sample,
        temperature=temperature,
        dtype=dtype,
        device=device,
        backend=backend,
        engine=engine,
        max_batch_tokens=max_batch_tokens,
        limit=limit,
        collateral=collateral,
        collateral_rows=collateral_rows,
        model_dir=model_dir,
        data_file=data,
        source_dir=source_dir,
        out_dir=out,
    )
    config = build_config(ABConfig, config_file, flags)
    run_dir = Path(config.run_dir) if config.run_dir is not None else None
    given_out = Path(config.out_dir) if config.out_dir is not None else None
    out_dir = given_out or _default_out(run_dir, config.capability, config.model)
    if given_out is not None or run_dir is None or run_dir.is_dir():
        check_output_dir(out_dir, "--out" if given_out is not None else "the default --out")
    model_dir, data, source = config.model_dir, config.data_file, config.source_dir
    if run_dir is None and (model_dir is None or data is None or ("patch" in config.edits and source is None)):
        default = default_pair(pair)
        dirs = {"dpo": default.dpo_dir, "sft": default.sft_dir}
        model_dir = model_dir or dirs[config.model]
        source = source or ("patch" in config.edits and dirs["sft" if config.model == "dpo" else "dpo"]) or None
        data = data or default.test_file
    config = replace(config, model_dir=model_dir, data_file=data, source_dir=source, out_dir=out_dir)
    report = run_ab(config, progress=lambda line: err.print(f"[dim]{line}[/dim]"))
    point_latest(Path(config.out_dir))
    _print(report)


def _print(report: ABReport) -> None:
    from rich.table import Table

    from interventions.report import fmt_delta, fmt_p, fmt_pct

    out = console()
    guard_notes = {note for arm in report.arms for note in [*arm.guard.flags, *arm.guard.faults]}
    for warning in report.warnings:
        if warning not in guard_notes:
            out.print(f"[yellow]warning:[/yellow] {warning}")
    for arm in report.arms:
        table = Table(
            title=f"{arm.label or arm.name} ({arm.role}) on {report.neurons['size']} units of {report.neurons['hook']}, {arm.model} model, {report.dtype}"
        )
        for name in ("capability", "n", "before", "after", "Δ pts", "95% CI", "McNemar p", "placebo pct", "changed"):
            table.add_column(
                name, justify="left" if name in ("capability", "95% CI") else "right", no_wrap=name == "capability"
            )
        for c in arm.capabilities:
            table.add_row(
                c.capability + (" *" if c.target else ""),
                str(c.n_scored),
                fmt_pct(c.before),
                fmt_pct(c.after),
                fmt_delta(c.delta),
                f"[{fmt_delta(c.ci_low)}, {fmt_delta(c.ci_high)}]",
                fmt_p(c.p_value),
                _placebo(c.placebo),
                f"{c.rows_changed}/{c.n_rows}",
            )
        out.print(table)
        for fault in arm.guard.faults:
            out.print(f"[bold red]INVALID:[/bold red] {fault}")
        for flag in arm.guard.flags:
            out.print(f"[bold red]NO-OP:[/bold red] {flag}")
    if len(report.arms) > 1:
        summary = Table(title=f"every arm on {report.capability} (against the baseline of the model it ran on)")
        for name in ("arm", "model", "Δ pts", "95% CI", "McNemar p", "placebo pct", "changed"):
            summary.add_column(
                name, justify="left" if name in ("arm", "model", "95% CI") else "right", no_wrap=name == "arm"
            )
        for arm in report.arms:
            c = arm.capability(report.capability)
            summary.add_row(
                arm.name,
                arm.model,
                fmt_delta(c.delta),
                f"[{fmt_delta(c.ci_low)}, {fmt_delta(c.ci_high)}]",
                fmt_p(c.p_value),
                _placebo(c.placebo),
                f"{c.rows_changed}/{c.n_rows}",
            )
        out.print(summary)
    for kind, path in report.paths.items():
        out.print(f"{kind}: {path}", soft_wrap=True)


def _placebo(placebo: dict | None) -> str:
    from interventions.report import fmt_p

    return f"{placebo['percentile']:.0f} (p={fmt_p(placebo['p_empirical'])})" if placebo else "-"

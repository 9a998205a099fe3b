"""``probe intervene``: placebo-controlled A/B evaluation of scaling neurons during generation.

Thin wrapper over :func:`interventions.ab.run_ab`: flags build an
:class:`interventions.config.ABConfig` (which validates them), the library writes
``ab_report.json``, ``ab_report.md`` and ``generations.jsonl``, and this prints the
table and any no-op warning.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

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
    run_dir: Optional[Path] = typer.Argument(None, help="Run directory from `probe run` (model dirs, data file, ranking)."),
    capability: str = typer.Option("multi_turn", "--capability", "-c", help="Target capability (the others are scored as collateral)."),
    model: str = typer.Option("dpo", "--model", help="Which model of the pair to intervene on: sft or dpo."),
    factor: Optional[float] = typer.Option(None, "--factor", help="Scale factor (0 ablates). Default: the paper's 1 - 1e-6 (ABConfig.factor)."),
    neurons: Optional[Path] = typer.Option(None, "--neurons", help="Neuron-set JSON file (from `probe analyze`)."),
    top_k: Optional[int] = typer.Option(None, "--top-k", help="Top K units by |delta| of the run's ranking (or of --neurons)."),
    units: Optional[str] = typer.Option(None, "--units", help="Explicit units LAYER:UNIT[,...], e.g. 14:3,14:9,20:0."),
    hook: str = typer.Option("mlp_out", "--hook", help="Hook point for --top-k from a run and --units."),
    placebo: int = typer.Option(20, "--placebo", help="Random matched neuron sets for the placebo control (0 = none)."),
    dose: Optional[str] = typer.Option(None, "--dose", help="Dose sweep: comma-separated factors, e.g. 0,0.5,0.999999."),
    control: bool = typer.Option(True, "--control/--no-control", help="Also run factor 0 as a positive control (effect-size guard)."),
    judge: str = typer.Option("rules", "--judge", help="rules (offline, synthetic data) or llm (OpenAI-compatible endpoint)."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="LLM judge model. Env: OPENAI_MODEL."),
    judge_base_url: Optional[str] = typer.Option(None, "--judge-base-url", help="LLM judge endpoint. Env: OPENAI_BASE_URL."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Tokens generated per prompt."),
    batch_size: int = typer.Option(16, "--batch-size", help="Prompts per generation batch."),
    sample: bool = typer.Option(False, "--sample", help="Seeded sampling instead of greedy decoding (same seed in every arm)."),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature (with --sample)."),
    seed: int = typer.Option(0, "--seed", help="Seed for placebo draws, bootstrap and sampling."),
    dtype: str = typer.Option("float32", "--dtype", help="Model dtype: float32, bfloat16 or float16."),
    device: str = typer.Option("cpu", "--device", help="Torch device, e.g. cpu or cuda."),
    backend: str = typer.Option("torch", "--backend", help="torch (hooks) or nnsight."),
    limit: Optional[int] = typer.Option(None, "--limit", help="At most N rows per capability (interleaved across tasks)."),
    collateral: bool = typer.Option(True, "--collateral/--no-collateral", help="Score the other capabilities too."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", help="Model to intervene on (default: the run's --model, or the embedded default pair's)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Test rows JSONL (default: the run's data file, or the default pair's test split)."),
    pair: str = pair_option(),
    out: Optional[Path] = typer.Option(None, "--out", help="Output dir (default: RUN_DIR/interventions/<capability>_<model>_<time>)."),
) -> None:
    """Scale neurons during generation and compare with the baseline, placebo sets and a dose sweep."""
    from rich.console import Console

    from interventions.ab import run_ab
    from interventions.config import ABConfig
    from interventions.scaling import parse_factors

    console = Console(stderr=True)
    if run_dir is None and (model_dir is None or data is None):
        default = default_pair(pair)
        model_dir = model_dir or (default.dpo_dir if model == "dpo" else default.sft_dir)
        data = data or default.test_file
    config = ABConfig(
        **({"factor": factor} if factor is not None else {}), run_dir=run_dir, capability=capability, model=model, neurons=neurons, top_k=top_k, units=units, hook=hook,
        doses=parse_factors(dose) if dose is not None else [], positive_control=control, placebo=placebo, seed=seed, judge=judge,
        judge_base_url=judge_base_url, judge_model=judge_model, max_new_tokens=max_new_tokens, batch_size=batch_size,
        do_sample=sample, temperature=temperature, dtype=dtype, device=device, backend=backend, limit=limit, collateral=collateral,
        model_dir=model_dir, data_file=data, out_dir=out or _default_out(run_dir, capability, model),
    )
    report = run_ab(config, progress=lambda line: console.print(f"[dim]{line}[/dim]"))
    point_latest(Path(config.out_dir))
    _print(report)


def _print(report: ABReport) -> None:
    from rich.console import Console
    from rich.table import Table

    from interventions.report import fmt_delta, fmt_p, fmt_pct

    console = Console()
    for arm in report.arms:
        table = Table(title=f"factor {arm.factor!r} ({arm.role}) on {report.neurons['size']} units of {report.neurons['hook']}, {report.model} model, {report.dtype}")
        for name in ("capability", "n", "before", "after", "Δ pts", "95% CI", "McNemar p", "placebo pct", "changed"):
            table.add_column(name, justify="left" if name in ("capability", "95% CI") else "right", no_wrap=name == "capability")
        for c in arm.capabilities:
            placebo = f"{c.placebo['percentile']:.0f} (p={fmt_p(c.placebo['p_empirical'])})" if c.placebo else "-"
            table.add_row(c.capability + (" *" if c.target else ""), str(c.n_scored), fmt_pct(c.before), fmt_pct(c.after), fmt_delta(c.delta),
                          f"[{fmt_delta(c.ci_low)}, {fmt_delta(c.ci_high)}]", fmt_p(c.p_value), placebo, f"{c.rows_changed}/{c.n_rows}")
        console.print(table)
        for flag in arm.guard.flags:
            console.print(f"[bold red]NO-OP:[/bold red] {flag}")
    for kind, path in report.paths.items():
        console.print(f"{kind}: {path}", soft_wrap=True)

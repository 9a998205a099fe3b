"""``probe lmeval``: any lm-evaluation-harness task before and after an edit, with a paired test per task.

Thin wrapper over :func:`lmeval.run.run_lmeval`: the options are the fields of
:class:`lmeval.config.LMEvalConfig` (the edit options are ``probe intervene``'s, checked
the same way), the library writes ``lmeval_report.json``, ``lmeval_report.md`` and
``lmeval_items.jsonl``, and this prints one table per edited arm. lm-eval is an optional extra;
without it the command says in one line how to install it, before anything else runs.
``--ab-report DIR`` takes the edit of an A/B run (``probe intervene --out DIR``) and adds the table
to its report.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from core.config_fields import flat_fields
from core.paths import check_output_dir, check_outputs
from core.run_dir import InterventionDir, RunDir, Writer
from lmeval.config import LMEvalConfig, ab_defaults
from probe_cli.console import console
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options, help_text
from probe_cli.pairs import default_pair, pair_option

if TYPE_CHECKING:
    from lmeval.report import LMEvalReport

_RUN_DIR_HELP = help_text(flat_fields(LMEvalConfig)["run_dir"])  # the RUN_DIR argument's help, from its field


def register(app: typer.Typer) -> None:
    app.command("lmeval")(lmeval)


@config_options(LMEvalConfig, exclude=["run_dir"])
def lmeval(
    run_dir: Path | None = typer.Argument(None, help=_RUN_DIR_HELP),
    settings: ConfigFlags = FROM_CONFIG,
    pair: str = pair_option(),
) -> None:
    """Run lm-eval tasks on the model unedited and edited (scale, mean-ablate, patch, steer)
    and compare them item by item."""
    from dataclasses import replace

    from core.progress import heartbeat, is_terminal, quiet_library_bars
    from lmeval.model import require_lm_eval
    from lmeval.report import report_files
    from lmeval.run import run_lmeval
    from probes.distributed import world_from_env

    require_lm_eval()
    given = {**settings.values, "run_dir": run_dir}
    if settings.values["ab_report"] is not None:
        from_ab = ab_defaults(settings.values["ab_report"])
        given = {key: value if value is not None else from_ab.get(key) for key, value in given.items()}
    config = _with_defaults(settings.build(**given), pair)
    out_dir = Path(config.out_dir) if config.out_dir is not None else _default_out(config)
    flag, inputs = "--out" if config.out_dir is not None else "the default --out", _inputs(config)
    check_output_dir(out_dir, flag, inputs, writer=Writer.LMEVAL)
    check_outputs(flag, out_dir, report_files(out_dir).values(), inputs)
    err = console(stderr=True)
    if not is_terminal(sys.stderr):
        quiet_library_bars()  # transformers' "Loading weights" bars are carriage returns in a log
    beat = heartbeat(lambda line: err.print(f"[dim]{line}[/dim]"), enabled=world_from_env().is_main)
    with beat as say:  # a line a minute at least, in a log too (rank 0 of a data-parallel launch)
        report = run_lmeval(replace(config, out_dir=out_dir), progress=say)
    if report is not None:  # None: a helper rank under accelerate launch; rank 0 reports
        _print(report)


def _with_defaults(config: LMEvalConfig, pair: str) -> LMEvalConfig:
    """Without a run or --model-dir, the embedded default pair's model (and, for an edit that runs the pair's other
    model, that one)."""
    from dataclasses import replace

    from interventions.recipes import RECIPES

    patch = any(RECIPES[name].needs_source for name in config.ab_config().edit.edits)
    if config.run_dir is not None or (config.model_dir is not None and (not patch or config.source_dir is not None)):
        return config
    default = default_pair(pair)
    dirs = {"dpo": default.dpo_dir, "sft": default.sft_dir}
    source = config.source_dir or (dirs["sft" if config.model == "dpo" else "dpo"] if patch else None)
    return replace(config, model_dir=config.model_dir or dirs[config.model], source_dir=source)


def _inputs(config: LMEvalConfig) -> dict[str, str | Path | None]:
    """The files the command reads, by option (a model directory for every file in it)."""
    run = RunDir(config.run_dir) if config.run_dir is not None else None
    return {
        "RUN_DIR's recording": run.activations if run else None,
        "RUN_DIR's analysis": run.analysis.summary if run else None,
        "--neurons": config.edit.neurons,
        "--model-dir": config.model_dir,
        "--source-dir": config.source_dir,
        "--ab-report": InterventionDir(config.ab_report).report if config.ab_report is not None else None,
        **{f"--include-path {p}": p for p in config.include_path},
        **{f"--tasks {t}": t for t in config.tasks if Path(t).is_file()},
    }


def _default_out(config: LMEvalConfig) -> Path:
    if config.ab_report is not None:
        return Path(config.ab_report)
    runs = RunDir(config.run_dir if config.run_dir is not None else "runs")  # without a run, under runs/ alike
    return runs.lmeval / time.strftime("%Y%m%d-%H%M%S")


def _print(report: LMEvalReport) -> None:
    from interventions.cells import terminal
    from lmeval.report import columns, table_row

    out = console()
    for warning in report.warnings:
        out.print(f"[yellow]warning:[/yellow] {warning}")
    for arm in report.arms:
        title = (
            f"{arm.label} on {report.neurons.size} units of {report.neurons.hook}, {report.model} model, {report.dtype}"
        )
        out.print(terminal(columns(bool(arm.placebo.n_sets)), [table_row(r) for r in arm.rows], title))
        for flag in arm.flags:
            out.print(f"[bold red]NO-OP:[/bold red] {flag}")
    for kind, path in report.paths.items():
        out.print(f"{kind}: {path}", soft_wrap=True)

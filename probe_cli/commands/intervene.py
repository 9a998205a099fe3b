"""``probe intervene``: placebo-controlled A/B evaluation of edits to the selected units during generation.

Thin wrapper over :func:`interventions.ab.run_ab`: flags build an
:class:`interventions.config.ABConfig` (which validates them), :func:`interventions.parallel.intervene` plans it
(:func:`interventions.plan.plan_ab`) and runs it in the launcher's world, the library writes the report
and the generations (:class:`core.run_dir.InterventionDir`), and this prints one table of every
arm, the per-arm tables, any no-op warning and any arm whose edit broke the model. Ctrl-C keeps the
finished generation arms in the output directory; the same command with the same ``--out``
resumes from them (:mod:`interventions.arms`).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from core.config_fields import flat_fields
from core.paths import check_output_dir, check_outputs
from core.run_dir import DataDir, InterventionDir, RunDir, Writer
from interventions.config import ABConfig
from probe_cli.console import console
from probe_cli.latest import point_latest
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options, help_text
from probe_cli.pairs import default_pair, pair_option
from training.eval_config import HELDOUT

if TYPE_CHECKING:
    from interventions.results import ABReport

_RUN_DIR_HELP = help_text(flat_fields(ABConfig)["run_dir"])  # the RUN_DIR argument's help, from its field


def register(app: typer.Typer) -> None:
    app.command("intervene")(intervene)


def _default_out(run_dir: Path | None, capability: str, model: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    runs = RunDir(run_dir if run_dir is not None else "runs")  # without a run, under runs/ alike
    return runs.intervention(f"{capability}_{model}_{stamp}").root


def _responses_folder(responses: str) -> Path | None:
    """The folder ``--responses`` reads from (an earlier A/B's, or a file's): an ``--out`` that would replace a
    report in it is refused (its files are the command's inputs)."""
    from probes.outcome_rows import response_source

    path = Path(responses)
    return None if response_source(responses) != "file" else path if path.is_dir() else path.parent


@config_options(ABConfig, exclude=["run_dir"])
def intervene(
    run_dir: Path | None = typer.Argument(None, help=_RUN_DIR_HELP),
    settings: ConfigFlags = FROM_CONFIG,
    pair: str = pair_option(),
) -> None:
    """Edit the selected units during generation (scale, mean-ablate, patch, steer) and compare with the baselines and
    placebo arms."""
    from core.progress import heartbeat, is_terminal, quiet_library_bars
    from interventions import parallel
    from interventions.report import selection_markdown
    from interventions.results import Selection
    from probes.distributed import world_from_env

    err = console(stderr=True)
    factor = settings.values["factor"]
    config = settings.build(run_dir=run_dir, factor=0.0 if factor is None and settings.values["select"] else factor)
    run_dir = Path(config.run_dir) if config.run_dir is not None else None
    given_out = Path(config.out_dir) if config.out_dir is not None else None
    out_dir = given_out or _default_out(run_dir, config.capability, config.model)
    if given_out is not None or run_dir is None or run_dir.is_dir():
        flag, files = "--out" if given_out is not None else "the default --out", InterventionDir(out_dir)
        inputs = {
            "RUN_DIR's recording": RunDir(run_dir).activations if run_dir is not None else None,
            "--neurons": config.neurons,
            "--data": config.data_file,
            "--model-dir": config.model_dir,
            "--source-dir": config.source_dir,
            "--responses": _responses_folder(config.responses),
        }
        check_output_dir(out_dir, flag, inputs, writer=Writer.INTERVENE)
        check_outputs(flag, out_dir, [files.report, files.markdown, files.generations], inputs)
    config = _with_defaults(config, pair, out_dir)
    if not is_terminal(sys.stderr):
        quiet_library_bars()  # transformers' "Loading weights" bars are carriage returns in a log
    beat = heartbeat(lambda line: err.print(f"[dim]{line}[/dim]"), enabled=world_from_env().is_main)
    with beat as say:  # a line a minute at least, in a log too (rank 0 of a data-parallel launch)
        report = parallel.intervene(config, say)
    if report is None:  # a helper rank of a data-parallel launch: rank 0 reports
        return
    point_latest(out_dir)
    _print(report)
    if isinstance(report.selection, Selection):
        console().print(
            "\n".join(selection_markdown(report, report.selection)), markup=False, highlight=False, soft_wrap=True
        )


def _with_defaults(config: ABConfig, pair: str, out_dir: Path) -> ABConfig:
    """``config`` writing into ``out_dir``; without a run, what it lacks from the embedded default pair: the model,
    the rows of the test split, the pair's other model for an edit that runs it, and the DPO margin's pairs."""
    from dataclasses import replace

    from interventions.recipes import RECIPES

    model_dir, data, source, dpo_file = config.model_dir, config.data_file, config.source_dir, config.dpo_file
    test_split = config.split != HELDOUT  # the held-out rows need no pair's data file (interventions.plan)
    needs_source = any(RECIPES[name].needs_source for name in config.edit.edits)
    if config.run_dir is None and (
        model_dir is None or (data is None and test_split) or (needs_source and source is None)
    ):
        default = default_pair(pair)
        dirs = {"dpo": default.dpo_dir, "sft": default.sft_dir}
        model_dir = model_dir or dirs[config.model]
        source = source or (needs_source and dirs["sft" if config.model == "dpo" else "dpo"]) or None
        data = data or (default.test_file if test_split else None)
        pairs = DataDir(default.data_dir).dpo  # the DPO margin's pairs: the training distribution's
        dpo_file = dpo_file or (pairs if data is None and pairs.is_file() else None)
    return replace(config, model_dir=model_dir, data_file=data, source_dir=source, dpo_file=dpo_file, out_dir=out_dir)


def _print(report: ABReport) -> None:
    from interventions.cells import terminal
    from interventions.report import (
        ARM_TERMINAL_COLUMNS,
        OUTCOME_COLUMNS,
        SUMMARY_TERMINAL_COLUMNS,
        arm_rows,
        outcome_rows,
        responses_line,
        summary_rows,
    )

    out = console()
    guard_notes = {note for arm in report.arms for note in [*arm.guard.flags, *arm.guard.faults]}
    for warning in report.warnings:
        if warning not in guard_notes:
            out.print(f"[yellow]warning:[/yellow] {warning}")
    for arm in (a for a in report.arms if a.capabilities):
        title = (
            f"{arm.label or arm.name} ({arm.role}) on {report.units_of(arm).size} units of "
            f"{report.neurons.hook}, {arm.model} model, {report.dtype}"
        )
        out.print(terminal(ARM_TERMINAL_COLUMNS, arm_rows(arm), title))
        for fault in arm.guard.faults:
            out.print(f"[bold red]INVALID:[/bold red] {fault}")
        for flag in arm.guard.flags:
            out.print(f"[bold red]NO-OP:[/bold red] {flag}")
    if len(summary_rows(report)) > 1:
        title = f"every arm on {report.capability} (against the baseline of the model it ran on)"
        out.print(terminal(SUMMARY_TERMINAL_COLUMNS, summary_rows(report), title))
    if outcome_rows(report):
        title = f"continuous outcomes on {report.capability} ({responses_line(report)})"
        out.print(terminal(OUTCOME_COLUMNS, outcome_rows(report), title))
    for kind, path in report.paths.items():
        out.print(f"{kind}: {path}", soft_wrap=True)

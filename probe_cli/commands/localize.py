"""``probe localize``: where the change lives, as faithfulness curves per ranking and a layer and component profile.

Thin wrapper over :func:`localize.run.localize`: flags build a :class:`localize.config.LocalizeConfig` (which checks
them), the library checks the run, the pair, the rows and the output before anything loads, writes ``localize.json``
and ``localize.html`` (:class:`core.run_dir.LocalizeDir`), and this prints the summary table (each ranking's f at
0.2% and 2%, CPR and CMD with CIs, k50, k80, the estimates' agreement), the verdicts and the profile.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from core.config_fields import flat_fields
from core.run_dir import LocalizeDir
from localize.config import LocalizeConfig
from probe_cli.console import console
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options, help_text

if TYPE_CHECKING:
    from localize.records import LocalizeReport

_RUN_DIR_HELP = help_text(flat_fields(LocalizeConfig)["run_dir"])


def register(app: typer.Typer) -> None:
    app.command("localize")(localize)


@config_options(LocalizeConfig, exclude=["run_dir"])
def localize(
    run_dir: Path = typer.Argument(..., help=_RUN_DIR_HELP),
    settings: ConfigFlags = FROM_CONFIG,
) -> None:
    """Measure how many units carry the SFT -> DPO change (faithfulness f(k) per ranking, both directions) and which
    layers, sub-layers and heads carry it."""
    from core.progress import heartbeat, is_terminal, quiet_library_bars
    from localize.run import localize as run_localize
    from probe_cli.latest import point_latest
    from probes.distributed import world_from_env

    config = settings.build(run_dir=run_dir)
    err = console(stderr=True)
    if not is_terminal(sys.stderr):
        quiet_library_bars()
    with heartbeat(lambda line: err.print(f"[dim]{line}[/dim]"), enabled=world_from_env().is_main) as say:
        report = run_localize(config, say)
    if report is None:  # a helper rank of a torchrun launch: rank 0 reports
        return
    point_latest(Path(report.out_dir))
    _print(report)


def _print(report: LocalizeReport) -> None:
    from rich.table import Table
    from rich.text import Text

    from localize.page import PROFILE_COLUMNS, SUMMARY_COLUMNS, placebo_line, profile_rows, summary_rows

    out = console()
    gaps = "; ".join(
        f"{d.label}: KL {d.gap:.3g} nats/token on {d.rows} rows ({d.responses})" for d in report.directions
    )
    for title, columns, rows in (
        (
            f"{report.capability}, {report.total_units:,} {report.unit}s of {report.hook} ({gaps})",
            SUMMARY_COLUMNS,
            summary_rows(report),
        ),
        (
            "the layer and component profile: gap closed by patching whole components",
            PROFILE_COLUMNS,
            profile_rows(report),
        ),
    ):
        if not rows:
            continue
        table = Table(title=title)
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        out.print(table)
    out.print(f"rankings: {report.ranking_verdict.verdict}: {report.ranking_verdict.reason}", markup=False)
    out.print(f"claim 1c: {report.claim_1c.verdict}: {report.claim_1c.reason}", markup=False)
    if report.placebo:
        out.print(placebo_line(report), markup=False)
    for warning in report.warnings:
        out.print(f"warning: {warning}", markup=False)
    files = LocalizeDir(report.out_dir)
    out.print(f"report: {files.report} and {files.page}", soft_wrap=True, markup=False)

"""``probe report RUN_DIR``: one self-contained HTML report of the §7 study, with a verdict per claim.

Thin wrapper over :func:`study.report_html.write_report`: it gathers what the run directory
holds (recording, analysis, neuron cards, interventions, evaluation), decides each claim by the
rules of :mod:`study.verdicts`, writes the run's report file (or ``--out``) and
prints the verdict table, what the run lacks with the command that adds it, and the file's size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from core.run_dir import RunDir, Writer
from probe_cli.options import config_options

_RUN = RunDir("RUN_DIR")  # the paths as the help spells them


def register(app: typer.Typer) -> None:
    app.command("report")(report)


@config_options()
def report(
    run_dir: Path = typer.Argument(..., help="A run directory (from `probe replicate`, or `probe run` and the rest)."),
    out: Path | None = typer.Option(None, "--out", help=f"The HTML file to write (default: {_RUN.report_file})."),
    eval_file: Path | None = typer.Option(
        None, "--eval", help=f"An evaluation saved elsewhere (`probe models eval --out`); default: {_RUN.eval_file}."
    ),
) -> None:
    """Assemble the replication report of a run: the pair, each claim with its evidence and verdict, figures,
    compliance."""
    from core.paths import check_output_file
    from study.report_html import write_report

    if out is not None:
        # its kind and place, at once; write_report holds it against every file it reads
        check_output_file(out, "--out", writer=Writer.REPORT)
    path, study = write_report(run_dir, out, eval_file)
    print_study(study, path)


def print_study(study: Any, path: Path) -> None:
    """The verdict table, the missing parts with their commands, the notes, and where the report is and how large."""
    from rich.table import Table

    from probe_cli.console import console
    from study.claims import claim
    from study.verdicts import NOT_RUN

    out = console()
    table = Table(title=f"§7 claims on {study.run_dir}")
    for name in ("#", "claim", "verdict", "why (or the command that runs it)"):
        table.add_column(name, justify="right" if name == "#" else "left")
    for verdict in study.verdicts:
        why = verdict.command if verdict.status == NOT_RUN and verdict.command else verdict.reason
        table.add_row(str(verdict.claim), claim(verdict.claim).statement, verdict.status, why)
    out.print(table)
    for missing in study.missing:
        out.print(
            f"missing: {missing.what} — {missing.why}; add it with: {missing.command}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    for note in study.notes:
        out.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    out.print(f"report: {path} ({path.stat().st_size / 1e6:.2f} MB)", markup=False, highlight=False, soft_wrap=True)

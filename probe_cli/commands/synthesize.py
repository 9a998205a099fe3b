"""``probe synthesize`` writes a RoleMRC-format dataset; ``probe validate`` checks one file.

Thin wrapper over :func:`data_synthesis.dataset.synthesize_dataset`, whose
:class:`~data_synthesis.dataset.SynthesizeConfig` makes the options: ``--backend offline`` calls
:func:`data_synthesis.offline.synthesize` (seeded, no network, seconds); ``--backend llm`` calls
:func:`data_synthesis.llm.synthesis.synthesize_llm` against an OpenAI-compatible
endpoint. Both return a summary that is printed as rich tables.

The LLM backend takes the same endpoint options as ``probe judge`` (``--timeout``,
``--max-retries``/``--retries``, ``--backoff``, ``--concurrency``, ``--cache-dir``...), so
a server that holds or fails every request ends in one ``error:`` line within a bound
the user sets; they are refused with ``--backend offline``, where they would do nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from core.paths import check_output_dir
from core.records import to_json
from core.run_dir import Writer
from data_synthesis.dataset import SynthesizeConfig, synthesize_dataset
from data_synthesis.validate import KINDS
from probe_cli.console import console
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options


def register(app: typer.Typer) -> None:
    app.command("synthesize")(synthesize)
    app.command("validate")(validate)


@config_options(SynthesizeConfig)
def synthesize(
    out: Path = typer.Option(
        ...,
        "--out",
        help="Directory for profiles.jsonl, passages.jsonl, sft.jsonl, dpo.jsonl, test.jsonl (--split heldout: "
        "heldout.jsonl).",
    ),
    settings: ConfigFlags = FROM_CONFIG,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of tables."),
) -> None:
    """Synthesize a RoleMRC-format dataset and print rows per file, capability and task; with --split heldout, the
    held-out evaluation split and its 8-gram overlap with the training data (exit status 1 above the bound)."""
    config = settings.build()
    check_output_dir(out, "--out", writer=Writer.SYNTHESIZE)
    data = to_json(synthesize_dataset(out, config))
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        _print(data)
    overlap = data.get("overlap") or {}
    if overlap:
        console(stderr=as_json).print(overlap["line"], markup=False)
        if not overlap["passed"]:
            raise typer.Exit(1)


def _print(data: dict[str, Any]) -> None:
    from rich.table import Table

    from core.capabilities import ALL_CAPABILITIES, TASKS
    from core.run_dir import DataDir

    out = console()
    files = Table(title=f"Wrote {data.get('out_dir', '')}")
    files.add_column("file")
    files.add_column("rows", justify="right")
    for name, count in data.get("files", {}).items():
        files.add_row(name, str(count))
    out.print(files)
    caps = Table(title="Test rows per capability")
    caps.add_column("capability")
    caps.add_column("rows", justify="right")
    for cap in ALL_CAPABILITIES:
        caps.add_row(cap.value, str(data.get("capabilities", {}).get(cap.value, 0)))
    out.print(caps)
    per_task = data.get("tasks", {})
    columns = [name for name in (*DataDir.SPLITS, DataDir.HELDOUT) if name in per_task]
    tasks = Table(title="Rows per task")
    tasks.add_column("task")
    for name in columns:
        tasks.add_column(name.removesuffix(".jsonl"), justify="right")
    names = [t.name for t in TASKS] + sorted({k for c in columns for k in per_task[c]} - {t.name for t in TASKS})
    for task in names:
        tasks.add_row(task, *(str(per_task[c].get(task, 0)) for c in columns))
    out.print(tasks)
    if data.get("groups"):
        groups = Table(title="Held-out rows per group")
        groups.add_column("group")
        groups.add_column("rows", justify="right")
        for name, count in data["groups"].items():
            groups.add_row(name, str(count))
        out.print(groups)


@config_options()
def validate(
    path: Path = typer.Argument(..., help="A RoleMRC JSONL file: test, SFT or DPO rows (published or synthesized)."),
    kind: str = typer.Option(KINDS[0], "--kind", help="auto (from the first row), test, sft or dpo."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Load every row of a data file (the first bad line is reported with file:line) and summarise it."""
    from data_synthesis.validate import validate_file

    report = validate_file(path, kind)
    if as_json:
        typer.echo(json.dumps(to_json(report), indent=2))
        return
    from rich.table import Table

    table = Table(
        title=f"{report.path}: {report.rows} {report.kind} rows"
        + (f", {report.with_expect} with expect" if report.kind == "test" else "")
    )
    table.add_column("group")
    table.add_column("rows", justify="right")
    for name, count in {**report.capabilities, **report.tasks}.items():
        table.add_row(name, str(count))
    console().print(table)

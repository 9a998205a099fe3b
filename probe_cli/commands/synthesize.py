"""``probe synthesize`` writes a RoleMRC-format dataset; ``probe validate`` checks one file.

Thin wrapper: ``--backend offline`` calls :func:`data_synthesis.offline.synthesize`
(seeded, no network, seconds); ``--backend llm`` calls
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
from typing import Any, Optional

import typer

from core.config_file import choice
from core.errors import ProbeError
from core.llm.config import ClientOptions
from core.paths import check_output_dir
from core.records import to_json
from data_synthesis.offline.synthesize import MAX_ROLES, SynthesisConfig
from data_synthesis.validate import KINDS
from probe_cli.config_option import config_option
from probe_cli.console import console
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options

BACKENDS = ("offline", "llm")


def register(app: typer.Typer) -> None:
    app.command("synthesize")(synthesize)
    app.command("validate")(validate)


@config_options(
    ClientOptions, exclude=["temperature"], help_prefix="LLM backend: ", flag_bounds=True, config_file=False
)
def synthesize(
    out: Path = typer.Option(
        ..., "--out", help="Directory for profiles.jsonl, passages.jsonl, sft.jsonl, dpo.jsonl, test.jsonl."
    ),
    roles: int = typer.Option(
        SynthesisConfig.n_roles,
        "--roles",
        min=2,
        max=MAX_ROLES,
        help="Roles to create; 20% are held out for the test split, which has 14*N rows (N=100: the published 1,400).",
    ),
    seed: int = typer.Option(SynthesisConfig.seed, "--seed", help="Same seed, same bytes."),
    backend: str = typer.Option(
        "offline", "--backend", help="offline (templated, no network) or llm (an OpenAI-compatible endpoint)."
    ),
    endpoint: ConfigFlags = FROM_CONFIG,
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of tables."),
    config_file: Optional[Path] = config_option(),
) -> None:
    """Synthesize a RoleMRC-format dataset and print rows per file, capability and task."""
    choice("backend", backend, BACKENDS)
    check_output_dir(out, "--out")
    if backend == "offline":
        from data_synthesis.offline import synthesize as run_offline

        given = endpoint.given()
        if given:
            raise ProbeError(f"{', '.join(given)}: only for --backend llm (the offline backend calls no endpoint)")
        summary: Any = run_offline(out, n_roles=roles, seed=seed)
    else:
        from data_synthesis.llm.synthesis import synthesize_llm

        options: ClientOptions = endpoint.build()
        if options.cache_dir is not None and not options.no_cache:
            check_output_dir(options.cache_dir, "--cache-dir")
        summary = synthesize_llm(out, roles, seed, options.client())
    data = to_json(summary)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        _print(data)


def _print(data: dict[str, Any]) -> None:
    from rich.table import Table

    from core.capabilities import ALL_CAPABILITIES, TASKS

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
    columns = [name for name in ("sft.jsonl", "dpo.jsonl", "test.jsonl") if name in per_task]
    tasks = Table(title="Rows per task")
    tasks.add_column("task")
    for name in columns:
        tasks.add_column(name.removesuffix(".jsonl"), justify="right")
    names = [t.name for t in TASKS] + sorted({k for c in columns for k in per_task[c]} - {t.name for t in TASKS})
    for task in names:
        tasks.add_row(task, *(str(per_task[c].get(task, 0)) for c in columns))
    out.print(tasks)


def validate(
    path: Path = typer.Argument(..., help="A RoleMRC JSONL file: test, SFT or DPO rows (published or synthesized)."),
    kind: str = typer.Option(KINDS[0], "--kind", help="auto (from the first row), test, sft or dpo."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    config_file: Optional[Path] = config_option(),
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

"""``probe synthesize`` writes a RoleMRC-format dataset; ``probe validate`` checks one file.

Thin wrapper: ``--backend offline`` calls :func:`data_synthesis.offline.synthesize`
(seeded, no network, seconds); ``--backend llm`` calls
:func:`data_synthesis.llm.synthesis.synthesize_llm` against an OpenAI-compatible
endpoint. Both return a summary that is printed as rich tables.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

BACKENDS = ("offline", "llm")


def register(app: typer.Typer) -> None:
    app.command("synthesize")(synthesize)
    app.command("validate")(validate)


def synthesize(
    out: Path = typer.Option(..., "--out", help="Directory for profiles.jsonl, passages.jsonl, sft.jsonl, dpo.jsonl, test.jsonl."),
    roles: int = typer.Option(40, "--roles", min=2, max=800, help="Roles to create; 20% are held out for the test split, which has 14*N rows (N=100: the published 1,400)."),
    seed: int = typer.Option(0, "--seed", help="Same seed, same bytes."),
    backend: str = typer.Option("offline", "--backend", help="offline (templated, no network) or llm (an OpenAI-compatible endpoint)."),
    model: Optional[str] = typer.Option(None, "--model", help="LLM backend: model name. Env: OPENAI_MODEL."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="LLM backend: endpoint, e.g. http://127.0.0.1:8000/v1. Env: OPENAI_BASE_URL."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of tables."),
) -> None:
    """Synthesize a RoleMRC-format dataset and print rows per file, capability and task."""
    if backend not in BACKENDS:
        raise typer.BadParameter(f"expected one of {', '.join(BACKENDS)}, got {backend!r}", param_hint="--backend")
    if backend == "offline":
        from data_synthesis.offline import synthesize as run_offline

        summary: Any = run_offline(out, n_roles=roles, seed=seed)
    else:
        from data_synthesis.llm.config import ClientConfig
        from data_synthesis.llm.synthesis import synthesize_llm

        summary = synthesize_llm(out, roles, seed, ClientConfig.from_env(base_url, model))
    data = summary.as_dict() if hasattr(summary, "as_dict") else dict(vars(summary))
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        _print(data)


def _print(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from data_synthesis.capabilities import ALL_CAPABILITIES, TASKS

    console = Console()
    files = Table(title=f"Wrote {data.get('out_dir', '')}")
    files.add_column("file")
    files.add_column("rows", justify="right")
    for name, count in data.get("files", {}).items():
        files.add_row(name, str(count))
    console.print(files)
    caps = Table(title="Test rows per capability")
    caps.add_column("capability")
    caps.add_column("rows", justify="right")
    for cap in ALL_CAPABILITIES:
        caps.add_row(cap.value, str(data.get("capabilities", {}).get(cap.value, 0)))
    console.print(caps)
    per_task = data.get("tasks", {})
    columns = [name for name in ("sft.jsonl", "dpo.jsonl", "test.jsonl") if name in per_task]
    tasks = Table(title="Rows per task")
    tasks.add_column("task")
    for name in columns:
        tasks.add_column(name.removesuffix(".jsonl"), justify="right")
    names = [t.name for t in TASKS] + sorted({k for c in columns for k in per_task[c]} - {t.name for t in TASKS})
    for task in names:
        tasks.add_row(task, *(str(per_task[c].get(task, 0)) for c in columns))
    console.print(tasks)


def validate(
    path: Path = typer.Argument(..., help="A RoleMRC JSONL file: test, SFT or DPO rows (published or synthesized)."),
    kind: str = typer.Option("auto", "--kind", help="auto (from the first row), test, sft or dpo."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Load every row of a data file (the first bad line is reported with file:line) and summarise it."""
    from data_synthesis.validate import validate_file

    report = validate_file(path, kind)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{report.path}: {report.rows} {report.kind} rows" + (f", {report.with_expect} with expect" if report.kind == "test" else ""))
    table.add_column("group")
    table.add_column("rows", justify="right")
    for name, count in {**report.capabilities, **report.tasks}.items():
        table.add_row(name, str(count))
    Console().print(table)

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
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import typer

from core.errors import ProbeError
from core.llm.config import ClientConfig
from core.paths import check_output_dir
from data_synthesis.offline.synthesize import MAX_ROLES, SynthesisConfig
from data_synthesis.validate import KINDS
from probe_cli.config_option import config_option
from probe_cli.console import console

BACKENDS = ("offline", "llm")


def register(app: typer.Typer) -> None:
    app.command("synthesize")(synthesize)
    app.command("validate")(validate)


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
    model: Optional[str] = typer.Option(None, "--model", help="LLM backend: model name. Env: OPENAI_MODEL."),
    base_url: Optional[str] = typer.Option(
        None, "--base-url", help="LLM backend: endpoint, e.g. http://127.0.0.1:8000/v1. Env: OPENAI_BASE_URL."
    ),
    api_key_env: Optional[str] = typer.Option(
        None,
        "--api-key-env",
        help=f"LLM backend: NAME of the variable holding the key (default: {ClientConfig.api_key_env}).",
    ),
    concurrency: Optional[int] = typer.Option(
        None,
        "--concurrency",
        min=1,
        max=256,
        help=f"LLM backend: requests in flight (default: {ClientConfig.concurrency}).",
    ),
    max_retries: Optional[int] = typer.Option(
        None,
        "--max-retries",
        "--retries",
        min=0,
        max=100,
        help=f"LLM backend: retries per request on 429/5xx/timeouts/broken replies (default: {ClientConfig.max_retries}).",
    ),
    timeout: Optional[float] = typer.Option(
        None,
        "--timeout",
        min=0.001,
        max=3600.0,
        help=f"LLM backend: seconds to wait for a reply (default: {ClientConfig.timeout:g}).",
    ),
    backoff: Optional[float] = typer.Option(
        None,
        "--backoff",
        min=0.0,
        max=600.0,
        help=f"LLM backend: seconds before the first retry, doubled per retry, at least the server's Retry-After (default: {ClientConfig.backoff_base:g}).",
    ),
    cache_dir: Optional[Path] = typer.Option(
        None,
        "--cache-dir",
        help=f"LLM backend: reply cache, what a rerun resumes from (default: {ClientConfig.cache_dir}).",
    ),
    no_cache: bool = typer.Option(
        False,
        "--no-cache",
        help="LLM backend: neither read nor write the reply cache (every call is paid, nothing to resume from).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON instead of tables."),
    config_file: Optional[Path] = config_option(),
) -> None:
    """Synthesize a RoleMRC-format dataset and print rows per file, capability and task."""
    if backend not in BACKENDS:
        raise ProbeError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    check_output_dir(out, "--out")
    endpoint = {
        "--model": model,
        "--base-url": base_url,
        "--api-key-env": api_key_env,
        "--concurrency": concurrency,
        "--max-retries": max_retries,
        "--timeout": timeout,
        "--backoff": backoff,
        "--cache-dir": cache_dir,
    }
    if backend == "offline":
        from data_synthesis.offline import synthesize as run_offline

        given = [flag for flag, value in endpoint.items() if value is not None] + (["--no-cache"] if no_cache else [])
        if given:
            raise ProbeError(f"{', '.join(given)}: only for --backend llm (the offline backend calls no endpoint)")
        summary: Any = run_offline(out, n_roles=roles, seed=seed)
    else:
        from data_synthesis.llm.synthesis import synthesize_llm

        if cache_dir is not None and not no_cache:
            check_output_dir(cache_dir, "--cache-dir")
        config = ClientConfig.from_env(
            base_url,
            model,
            api_key_env=api_key_env,
            concurrency=concurrency,
            max_retries=max_retries,
            timeout=timeout,
            backoff_base=backoff,
            cache_dir=cache_dir,
        )
        summary = synthesize_llm(out, roles, seed, replace(config, cache_dir=None) if no_cache else config)
    data = summary.as_dict() if hasattr(summary, "as_dict") else dict(vars(summary))
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
        typer.echo(json.dumps(report.as_dict(), indent=2))
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

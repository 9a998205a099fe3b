"""``probe judge``: score a responses file with the rule judge, an LLM judge, or both.

Thin wrapper over :func:`core.judges.files.judge_files`; prints one table of
per-capability compliance, undecided (unparseable) counts and, for ``--judge both``,
agreement and Cohen's kappa between the two judges.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from core.errors import ProbeError
from core.judges.factory import JUDGE_MODES
from core.llm.config import ClientConfig
from core.paths import check_output_dir, check_output_file
from probe_cli.config_option import config_option
from probe_cli.console import console

if TYPE_CHECKING:
    from core.judges.files import JudgeReport

JUDGE_HELP = "rules (offline, needs the test rows' expect blocks), llm (an OpenAI-compatible endpoint), or both (adds agreement)."


def register(app: typer.Typer) -> None:
    app.command("judge")(judge)


def judge(
    data: Path = typer.Option(..., "--data", help="Test rows (JSONL: question, reference, task[, expect])."),
    responses: Path = typer.Option(
        ..., "--responses", help="One response per test row (JSONL strings or {response[, index]})."
    ),
    judge_name: str = typer.Option(JUDGE_MODES[0], "--judge", help=JUDGE_HELP),
    model: Optional[str] = typer.Option(
        None, "--model", help="Judge model (for `transformers serve`: the exact served path). Env: OPENAI_MODEL."
    ),
    base_url: Optional[str] = typer.Option(
        None, "--base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1. Env: OPENAI_BASE_URL."
    ),
    api_key_env: Optional[str] = typer.Option(
        None, "--api-key-env", help=f"NAME of the variable holding the key (default: {ClientConfig.api_key_env})."
    ),
    temperature: Optional[float] = typer.Option(
        None, "--temperature", min=0.0, max=2.0, help=f"Judge temperature (default: {ClientConfig.temperature:g})."
    ),
    concurrency: Optional[int] = typer.Option(
        None, "--concurrency", min=1, max=256, help=f"Requests in flight (default: {ClientConfig.concurrency})."
    ),
    max_retries: Optional[int] = typer.Option(
        None,
        "--max-retries",
        "--retries",
        min=0,
        max=100,
        help=f"Retries per request on 429/5xx/timeouts/broken replies (default: {ClientConfig.max_retries}).",
    ),
    timeout: Optional[float] = typer.Option(
        None,
        "--timeout",
        min=0.001,
        max=3600.0,
        help=f"Seconds to wait for a reply (default: {ClientConfig.timeout:g}).",
    ),
    backoff: Optional[float] = typer.Option(
        None,
        "--backoff",
        min=0.0,
        max=600.0,
        help=f"Seconds before the first retry, doubled per retry, at least the server's Retry-After (default: {ClientConfig.backoff_base:g}).",
    ),
    cache_dir: Optional[Path] = typer.Option(
        None, "--cache-dir", help=f"Reply cache (default: {ClientConfig.cache_dir})."
    ),
    no_cache: bool = typer.Option(
        False, "--no-cache", help="Neither read nor write the reply cache (every call is paid)."
    ),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Judge only the first N rows."),
    verdicts_out: Optional[Path] = typer.Option(None, "--verdicts-out", help="Write per-row verdicts (JSONL) here."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of a table."),
    config_file: Optional[Path] = config_option(),
) -> None:
    """Score responses per capability; with --judge both, report rules-vs-LLM agreement and kappa."""
    from core.judges.files import judge_files

    if judge_name not in JUDGE_MODES:
        raise ProbeError(f"--judge: expected one of {', '.join(JUDGE_MODES)}, got {judge_name!r}")
    if verdicts_out is not None:
        check_output_file(verdicts_out, "--verdicts-out", {"--responses": responses, "--data": data})
    if cache_dir is not None and not no_cache and judge_name in ("llm", "both"):
        check_output_dir(cache_dir, "--cache-dir")
    config = None
    if judge_name in ("llm", "both"):
        config = ClientConfig.from_env(
            base_url,
            model,
            api_key_env=api_key_env,
            temperature=temperature,
            concurrency=concurrency,
            max_retries=max_retries,
            timeout=timeout,
            backoff_base=backoff,
            cache_dir=cache_dir,
        )
        if no_cache:
            config = replace(config, cache_dir=None)
    report = judge_files(data, responses, judge_name, config, limit=limit, verdicts_out=verdicts_out)
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
        return
    _print(report)


def _print(report: JudgeReport) -> None:
    from rich.table import Table

    from core.capabilities import ALL_CAPABILITIES

    judges = list(report.scores)
    table = Table(title=f"Judged {report.rows} rows")
    table.add_column("capability")
    for name in judges:
        table.add_column(f"{name}: compliant", justify="right")
        table.add_column(f"{name}: undecided", justify="right")
    if report.agreement:
        table.add_column("agreement", justify="right")
        table.add_column("kappa", justify="right")
    for cap in ALL_CAPABILITIES:
        cells = [report.scores[j][cap] for j in judges]
        if not any(c.total for c in cells):
            continue
        row = [cap.value]
        for c in cells:
            row += [f"{c.rate:.1%} ({c.compliant}/{c.scored})" if c.rate is not None else "-", str(c.undecided)]
        if report.agreement:
            a = report.agreement.get(cap)
            row += [
                f"{a.rate:.1%} (n={a.n})" if a and a.rate is not None else "-",
                f"{a.kappa:.2f}" if a and a.kappa is not None else "-",
            ]
        table.add_row(*row)
    out = console()
    out.print(table)
    if report.client_stats:
        s = report.client_stats
        out.print(f"LLM requests: {s['requests']} sent, {s['cache_hits']} from cache, {s['retries']} retried")

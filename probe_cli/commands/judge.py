"""``probe judge``: score a responses file with the rule judge, an LLM judge, or both.

Thin wrapper over :func:`judging.files.judge_files`; prints one table of
per-capability compliance, undecided (unparseable) counts and, for ``--judge both``,
agreement and Cohen's kappa between the two judges.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from core.config_file import POSITIVE, choice
from core.paths import check_output_dir, check_output_file
from core.records import to_json
from core.run_dir import Writer
from judging.client.config import ClientOptions
from judging.factory import JUDGE_MODES
from probe_cli.console import console
from probe_cli.options import FROM_CONFIG, ConfigFlags, config_options, count_option

if TYPE_CHECKING:
    from judging.files import JudgeReport

JUDGE_HELP = (
    "rules (offline, needs the test rows' expect blocks), llm (an OpenAI-compatible endpoint), "
    "or both (adds agreement)."
)


def register(app: typer.Typer) -> None:
    app.command("judge")(judge)


@config_options(ClientOptions)
def judge(
    data: Path = typer.Option(..., "--data", help="Test rows (JSONL: question, reference, task[, expect])."),
    responses: Path = typer.Option(
        ..., "--responses", help="One response per test row (JSONL strings or {response[, index]})."
    ),
    judge_name: str = typer.Option(JUDGE_MODES[0], "--judge", help=JUDGE_HELP),
    endpoint: ConfigFlags = FROM_CONFIG,
    limit: int | None = count_option(None, "--limit", "Judge only the first N rows.", POSITIVE),
    verdicts_out: Path | None = typer.Option(None, "--verdicts-out", help="Write per-row verdicts (JSONL) here."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON instead of a table."),
) -> None:
    """Score responses per capability; with --judge both, report rules-vs-LLM agreement and kappa."""
    from judging.files import judge_files

    choice("judge", judge_name, JUDGE_MODES)
    if verdicts_out is not None:
        check_output_file(
            verdicts_out, "--verdicts-out", {"--responses": responses, "--data": data}, writer=Writer.JUDGE
        )
    options: ClientOptions = endpoint.build()
    if options.cache_dir is not None and not options.no_cache and judge_name in ("llm", "both"):
        check_output_dir(options.cache_dir, "--cache-dir", writer=Writer.JUDGE)
    config = options.client() if judge_name in ("llm", "both") else None
    report = judge_files(data, responses, judge_name, config, limit=limit, verdicts_out=verdicts_out)
    if as_json:
        typer.echo(json.dumps(to_json(report), indent=2))
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

"""Judge a responses file against a test file with the rule judge, the LLM judge, or both.

This is the library side of ``probe judge``: read and align the two files (with
line-precise errors), run the chosen judges, and return per-capability scores, the
count of undecided (unparseable) verdicts, and rules-vs-LLM agreement with Cohen's
kappa. The per-row verdicts can be written as JSON lines for auditing a judge.

Nothing is written until every verdict exists: a Ctrl-C (:class:`~core.errors.Interrupted`)
or an endpoint that gives up leaves ``verdicts_out`` as it was, and says how many judge
replies the reply cache kept, so that rerunning the same command resumes without paying
for them again. The verdicts file is replaced atomically (:func:`core.atomic.write_atomic`).

Responses file: one JSON value per line, aligned with the test rows, either a string or
an object with a ``response`` field (``generation``/``output``/``completion`` are
accepted too) and optionally an ``index`` giving the test row it answers.

Example:
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp(), "responses.jsonl")
    >>> _ = path.write_text('{"index": 1, "response": "Indeed."}\\n{"index": 0, "response": "Ahoy!"}\\n')
    >>> read_responses(path, 2)   # aligned with the test rows by index
    ['Ahoy!', 'Indeed.']
    >>> client = ClientConfig.from_env(model="gpt-4o")  # doctest: +SKIP
    >>> report = judge_files("test.jsonl", "responses.jsonl", "both", client)  # doctest: +SKIP
    >>> report.agreement[Capability.MULTI_TURN].kappa  # doctest: +SKIP
    0.81
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, cast

from core.atomic import write_atomic
from core.capabilities import Capability
from core.errors import DataError, ProbeError
from core.inputs import iter_jsonl
from core.paths import check_not_an_input
from core.records import SKIP, to_json
from core.rows import read_test_rows
from core.schema import TestRow
from judging.agreement import Agreement, CapabilityScore, agreement, score_table
from judging.base import Verdict
from judging.client.config import ClientConfig
from judging.factory import JUDGE_MODES, make_judge

if TYPE_CHECKING:
    from judging.llm import LLMJudge

_RESPONSE_FIELDS = ("response", "generation", "output", "completion")


@dataclass
class JudgeReport:
    """Scores per judge and capability, and agreement; ``to_json`` of it is what ``probe judge --json`` prints."""

    rows: int
    scores: dict[str, dict[Capability, CapabilityScore]]
    agreement: dict[Capability, Agreement] = field(default_factory=dict)
    verdicts: dict[str, list[Verdict]] = field(default_factory=dict, metadata=SKIP)  # per row; --verdicts-out
    client_stats: dict[str, int] | None = None


def read_responses(path: str | os.PathLike[str], n_rows: int) -> list[str]:
    """Responses aligned with ``n_rows`` test rows (by ``index`` when given, else by line order)."""
    items: list[tuple[int | None, str]] = []
    for number, obj in iter_jsonl(path):
        items.append(_response_item(str(path), number, obj))
    indexed = [i for i, _ in items if i is not None]
    if indexed and len(indexed) != len(items):
        raise DataError(str(path), None, "either every line or no line may carry an 'index'")
    if len(items) != n_rows:
        raise DataError(
            str(path), None, f"has {len(items)} responses for {n_rows} test rows; expected exactly one per row"
        )
    if not indexed:
        return [text for _, text in items]
    out: dict[int, str] = {}
    for index, text in items:
        assert index is not None
        if not 0 <= index < n_rows or index in out:
            raise DataError(
                str(path), None, f"index {index} is out of range or repeated; expected each of 0..{n_rows - 1} once"
            )
        out[index] = text
    return [out[i] for i in range(n_rows)]


def _response_item(path: str, number: int, obj: Any) -> tuple[int | None, str]:
    if isinstance(obj, str):
        return None, obj
    if isinstance(obj, dict):
        for name in _RESPONSE_FIELDS:
            if isinstance(obj.get(name), str):
                index = obj.get("index")
                if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
                    raise DataError(path, number, f"'index' must be an integer, got {index!r}")
                return index, obj[name]
    raise DataError(path, number, "expected a JSON string or an object with a string 'response' field")


def run_judges(
    rows: list[TestRow], responses: list[str], judge: str, client_config: ClientConfig | None = None
) -> JudgeReport:
    """Score ``responses`` with 'rules', 'llm' or 'both' (then with agreement)."""
    if judge not in JUDGE_MODES:
        raise ProbeError(f"--judge must be one of {', '.join(JUDGE_MODES)}, got {judge!r}")
    report = JudgeReport(rows=len(rows), scores={})
    if judge in ("rules", "both"):
        report.verdicts["rules"] = make_judge("rules").judge(rows, responses)
    if judge in ("llm", "both"):
        llm = cast("LLMJudge", make_judge("llm", client_config, model_flag="--model"))
        with llm.client.stops_explained(
            "LLM judging stopped before any verdict was written", "no verdict was written", "judge replies"
        ):
            report.verdicts["llm"] = llm.judge(rows, responses)
        report.client_stats = to_json(llm.client.stats)
    report.scores = {name: score_table(v) for name, v in report.verdicts.items()}
    if judge == "both":
        report.agreement = agreement(report.verdicts["rules"], report.verdicts["llm"])
    return report


def judge_files(
    data: str | os.PathLike[str],
    responses: str | os.PathLike[str],
    judge: str = "rules",
    client_config: ClientConfig | None = None,
    *,
    limit: int | None = None,
    verdicts_out: str | os.PathLike[str] | None = None,
) -> JudgeReport:
    """Read both files, judge (the first ``limit`` rows if given), optionally write per-row verdicts."""
    if verdicts_out is not None:
        check_not_an_input(verdicts_out, "--verdicts-out", {"--responses": responses, "--data": data})
    rows = read_test_rows(data)
    texts = read_responses(responses, len(rows))
    if limit is not None:
        if limit < 1:
            raise ProbeError(f"--limit must be at least 1, got {limit}")
        rows, texts = rows[:limit], texts[:limit]
    report = run_judges(rows, texts, judge, client_config)
    if verdicts_out is not None:
        cache = client_config.cache_dir if client_config is not None and report.client_stats is not None else None
        _write_verdicts(verdicts_out, _verdict_rows(rows, report.verdicts), cache)
    return report


def _write_verdicts(path: str | os.PathLike[str], rows: list[dict[str, Any]], cache: os.PathLike[str] | None) -> None:
    def lines(handle: IO[bytes]) -> None:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n")

    try:
        write_atomic(path, lines)
    except OSError as exc:
        kept = (
            f"; the judge replies are kept in the reply cache {cache}, so a rerun asks nothing again"
            if cache is not None
            else ""
        )
        raise ProbeError(
            f"--verdicts-out {path}: cannot write ({exc.strerror or exc}); any old file there is as it was{kept}"
        ) from None


def _verdict_rows(rows: list[TestRow], verdicts: dict[str, list[Verdict]]) -> list[dict[str, Any]]:
    out = []
    for i, row in enumerate(rows):
        entry: dict[str, Any] = {"index": i, "task": row.task}
        for name, items in verdicts.items():
            entry[name] = {c.value: s for c, s in items[i].scores.items()}
            entry[f"{name}_reasons"] = {c.value: r for c, r in items[i].reasons.items()}
        out.append(entry)
    return out

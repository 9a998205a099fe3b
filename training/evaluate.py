"""Per-capability compliance of an SFT/DPO pair: greedy generation + a judge.

This is how the toolkit checks that a pair is worth probing: both models answer the
test split with :func:`core.generation.generate_responses` (the same rendering the
probes and interventions use), the rule judge scores each answer on the row's
capabilities, and the two models are compared per capability with paired counts.
Uncertainty is reported rather than hidden: each rate carries a Wilson 95% interval,
and the SFT-vs-DPO difference an exact McNemar test on the rows where they disagree.

A row *complies* when every capability it is judged on scores 1 (undecided scores are
counted separately and excluded).

Example:
    >>> result = evaluate_pair("runs/sft", "runs/dpo", "data/test.jsonl", max_rows=200)   # doctest: +SKIP
    >>> result.rates("sft")["multi_turn"]                                                  # doctest: +SKIP
    0.93
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from data_synthesis.capabilities import ALL_CAPABILITIES, capabilities_of
from core.errors import ProbeError
from data_synthesis.io import read_test_rows
from data_synthesis.judge.base import Judge, Verdict
from data_synthesis.schema import TestRow
from core.generation import GenerationConfig, generate_responses

EVAL_GENERATION = GenerationConfig(max_new_tokens=64, batch_size=32)


@dataclass
class ModelEvaluation:
    """One model's scores: ``scores[i][cap]`` for row i (0/1/None) and its responses."""

    model_dir: str
    responses: list[str]
    scores: list[dict[str, int | None]]

    def rate(self, capability: str) -> tuple[int, int]:
        """(passed, judged) for one capability."""
        values = [s[capability] for s in self.scores if s.get(capability) is not None]
        return sum(values), len(values)

    def overall(self) -> tuple[int, int]:
        """(rows complying on all their judged capabilities, rows with at least one judged capability)."""
        judged = [[v for v in s.values() if v is not None] for s in self.scores]
        judged = [j for j in judged if j]
        return sum(all(v == 1 for v in j) for j in judged), len(judged)

    def undecided(self) -> int:
        return sum(v is None for s in self.scores for v in s.values())


@dataclass
class PairEvaluation:
    test_file: str
    task_counts: dict[str, int]
    judge: str
    generation: dict[str, Any]
    sft: ModelEvaluation
    dpo: ModelEvaluation
    table: list[dict[str, Any]] = field(default_factory=list)

    def rates(self, which: str) -> dict[str, float]:
        return {row["capability"]: row[f"{which}_rate"] for row in self.table}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(json.dumps(self.to_dict(), indent=1), encoding="utf-8")
        return p


def wilson(passed: int, n: int) -> tuple[float, float]:
    """Wilson 95% interval of a proportion (scipy); (nan, nan) when n == 0."""
    if n == 0:
        return float("nan"), float("nan")
    from scipy.stats import binomtest

    ci = binomtest(passed, n).proportion_ci(confidence_level=0.95, method="wilson")
    return float(ci.low), float(ci.high)


def mcnemar_p(a: Sequence[int | None], b: Sequence[int | None]) -> float:
    """Exact two-sided McNemar p-value for paired 0/1 outcomes (pairs with a None skipped)."""
    from scipy.stats import binomtest

    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    only_a = sum(1 for x, y in pairs if x == 1 and y == 0)
    only_b = sum(1 for x, y in pairs if x == 0 and y == 1)
    if only_a + only_b == 0:
        return 1.0
    return float(binomtest(only_a, only_a + only_b, 0.5).pvalue)


def _row(name: str, sft: ModelEvaluation, dpo: ModelEvaluation, s: tuple[int, int], d: tuple[int, int], p: float) -> dict[str, Any]:
    sr = s[0] / s[1] if s[1] else float("nan")
    dr = d[0] / d[1] if d[1] else float("nan")
    return {"capability": name, "n": s[1], "sft_pass": s[0], "sft_rate": sr, "sft_ci": wilson(*s),
            "dpo_pass": d[0], "dpo_rate": dr, "dpo_ci": wilson(*d), "delta": dr - sr, "mcnemar_p": p}


def comparison_table(sft: ModelEvaluation, dpo: ModelEvaluation) -> list[dict[str, Any]]:
    """One row per capability present in the scores, plus ``overall``."""
    table = []
    for cap in ALL_CAPABILITIES:
        key = cap.value
        if not any(key in s for s in sft.scores):
            continue
        a = [s.get(key) for s in sft.scores]
        b = [s.get(key) for s in dpo.scores]
        table.append(_row(key, sft, dpo, sft.rate(key), dpo.rate(key), mcnemar_p(a, b)))
    comply = [_complies(s) for s in sft.scores], [_complies(s) for s in dpo.scores]
    table.append(_row("overall", sft, dpo, sft.overall(), dpo.overall(), mcnemar_p(*comply)))
    return table


def _complies(scores: dict[str, int | None]) -> int | None:
    judged = [v for v in scores.values() if v is not None]
    return int(all(v == 1 for v in judged)) if judged else None


def select_rows(rows: Sequence[TestRow], max_rows: int | None) -> list[TestRow]:
    """At most ``max_rows`` rows, taken round-robin over tasks in file order so every task is represented."""
    if max_rows is None or max_rows >= len(rows):
        return list(rows)
    by_task: dict[str, list[TestRow]] = {}
    for row in rows:
        by_task.setdefault(row.task, []).append(row)
    picked: list[TestRow] = []
    depth = 0
    while len(picked) < max_rows:
        for task_rows in by_task.values():
            if depth < len(task_rows) and len(picked) < max_rows:
                picked.append(task_rows[depth])
        depth += 1
    return picked


def _verdict_scores(verdict: Verdict, row: TestRow) -> dict[str, int | None]:
    return {cap.value: verdict.scores.get(cap) for cap in capabilities_of(row.task)}


def evaluate_model(model_dir: str | Path, rows: Sequence[TestRow], judge: Judge,
                   generation: GenerationConfig = EVAL_GENERATION) -> ModelEvaluation:
    """Greedy responses of one model directory to ``rows``, judged."""
    from core.models import load_causal_lm

    model, tokenizer = load_causal_lm(Path(model_dir), "--model", eval_mode=True)
    responses = generate_responses(model, tokenizer, [row.question for row in rows], generation)
    verdicts = judge.judge(rows, responses)
    return ModelEvaluation(str(model_dir), responses, [_verdict_scores(v, r) for v, r in zip(verdicts, rows)])


def default_judge() -> Judge:
    from data_synthesis.judge.rules import RuleJudge

    return RuleJudge()


def evaluate_pair(sft_dir: str | Path, dpo_dir: str | Path, test_file: str | Path, *, max_rows: int | None = None,
                  judge: Judge | None = None, generation: GenerationConfig = EVAL_GENERATION,
                  progress: Callable[[str], None] | None = None) -> PairEvaluation:
    """Judge both models on the (optionally subsampled) test split; returns the per-capability table."""
    rows = select_rows(read_test_rows(test_file), max_rows)
    if not rows:
        raise ProbeError(f"--test {test_file}: the file has no rows")
    judge = judge or default_judge()
    results = {}
    for name, path in (("sft", sft_dir), ("dpo", dpo_dir)):
        if progress:
            progress(name)
        results[name] = evaluate_model(path, rows, judge, generation)
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.task] = counts.get(row.task, 0) + 1
    return PairEvaluation(str(test_file), counts, getattr(judge, "name", type(judge).__name__), asdict(generation),
                          results["sft"], results["dpo"], comparison_table(results["sft"], results["dpo"]))

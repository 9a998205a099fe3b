"""Score one arm of an A/B run: judge verdicts, ROUGE-L and BLEU against the references.

The judge decides compliance (0/1 per capability of a row's task; ``None`` = could not
decide, which is excluded from the paired statistics and counted). Reference overlap is
measured with the established packages, the way the paper's ``evaluation.py`` does:
ROUGE-L F with stemming from ``rouge-score`` per response, and BLEU from ``sacrebleu``
(corpus BLEU over a capability's rows, plus per-response sentence BLEU so a paired
difference exists). Judges are built by name so the CLI, the library and the example
script share one path; the LLM judge is imported only when asked for.

Example:
    >>> rouge_l(["the cat sat"], ["the cat sat down"])[0] > 0.8
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import ProbeError
from data_synthesis.judge.base import Judge, Verdict
from data_synthesis.schema import TestRow

JUDGES: tuple[str, ...] = ("rules", "llm")


def make_judge(name: str, *, base_url: str | None = None, model: str | None = None, **client: Any) -> Judge:
    """``rules`` (offline, needs the synthetic ``expect`` block) or ``llm`` (OpenAI-compatible endpoint)."""
    if name == "rules":
        from data_synthesis.judge.rules import RuleJudge

        return RuleJudge()
    if name == "llm":
        from data_synthesis.judge.llm import LLMJudge
        from data_synthesis.llm.client import ClientConfig

        config = ClientConfig.from_env(base_url=base_url, model=model, **client)
        if not config.model:
            raise ProbeError("--judge llm needs a model: pass --judge-model or set OPENAI_MODEL (and OPENAI_BASE_URL for a local server)")
        return LLMJudge(config)
    raise ProbeError(f"unknown judge {name!r}; expected one of {', '.join(JUDGES)}")


def rouge_l(responses: Sequence[str], references: Sequence[str]) -> list[float]:
    """ROUGE-L F-measure (stemmed) of each response against its reference."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return [scorer.score(ref, hyp)["rougeL"].fmeasure for hyp, ref in zip(responses, references)]


def sentence_bleu(responses: Sequence[str], references: Sequence[str]) -> list[float]:
    """sacrebleu sentence BLEU (0-100, exponential smoothing) of each response."""
    import sacrebleu

    return [sacrebleu.sentence_bleu(hyp, [ref]).score for hyp, ref in zip(responses, references)]


def corpus_bleu(responses: Sequence[str], references: Sequence[str]) -> float:
    """sacrebleu corpus BLEU (0-100) of a set of responses."""
    import sacrebleu

    if not responses:
        return float("nan")
    return float(sacrebleu.corpus_bleu(list(responses), [list(references)]).score)


@dataclass
class ArmScores:
    """Per-row scores of one arm, aligned with the rows."""

    verdicts: list[Verdict]
    rouge_l: list[float]
    bleu: list[float]


def score_arm(judge: Judge, rows: Sequence[TestRow], responses: Sequence[str]) -> ArmScores:
    verdicts = judge.judge(rows, responses)
    if len(verdicts) != len(rows):
        raise ProbeError(f"judge {judge.name!r} returned {len(verdicts)} verdicts for {len(rows)} rows")
    references = [r.reference for r in rows]
    return ArmScores(verdicts, rouge_l(responses, references), sentence_bleu(responses, references))

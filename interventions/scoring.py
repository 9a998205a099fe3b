"""Score one arm of an A/B run: judge verdicts, ROUGE-L and BLEU against the references.

The judge decides compliance (0/1 per capability of a row's task; ``None`` = could not
decide, which is excluded from the paired statistics and counted). Reference overlap is
measured with the established packages, the way the paper's ``evaluation.py`` does:
ROUGE-L F with stemming from ``rouge-score`` per response, and BLEU from ``sacrebleu``
(corpus BLEU over a capability's rows, plus per-response sentence BLEU so a paired
difference exists). Judges are built by :func:`core.judges.make_judge`.

Example:
    >>> rouge_l(["the cat sat"], ["the cat sat down"])[0] > 0.8
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.errors import ProbeError
from core.judges.base import Judge, Verdict
from core.schema import TestRow


def rouge_l(responses: Sequence[str], references: Sequence[str]) -> list[float]:
    """ROUGE-L F-measure (stemmed) of each response against its reference."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return [scorer.score(ref, hyp)["rougeL"].fmeasure for hyp, ref in zip(responses, references, strict=True)]


def sentence_bleu(responses: Sequence[str], references: Sequence[str]) -> list[float]:
    """sacrebleu sentence BLEU (0-100, exponential smoothing) of each response."""
    import sacrebleu

    return [sacrebleu.sentence_bleu(hyp, [ref]).score for hyp, ref in zip(responses, references, strict=True)]


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

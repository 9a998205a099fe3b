"""Score one arm of an A/B run: judge verdicts, ROUGE-L and BLEU against the references, and per capability the
paired statistics against its model's baseline (:func:`capability_results`).

The judge decides compliance (0/1 per capability of a row's task; ``None`` = could not
decide, which is excluded from the paired statistics and counted). Reference overlap is
measured with the established packages, the way the paper's ``evaluation.py`` does:
ROUGE-L F with stemming from ``rouge-score`` per response, and BLEU from ``sacrebleu``
(corpus BLEU over a capability's rows, plus per-response sentence BLEU so a paired
difference exists). Judges are built by :func:`judging.make_judge`.

Example:
    >>> rouge_l(["the cat sat"], ["the cat sat down"])[0] > 0.8
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from core.errors import ProbeError
from core.schema import TestRow
from interventions.results import CapabilityResult
from interventions.stats import paired_delta
from judging.base import Judge, Verdict

if TYPE_CHECKING:
    from access.generation import Generations
    from core.capabilities import Capability


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


Scored = tuple["Generations", ArmScores]  # a pass's generations and their scores


def capability_result(
    cap: Capability,
    target: bool,
    idx: list[int],
    base: Scored,
    arm: Scored,
    n_bootstrap: int,
    seed: int,
    with_ci: bool = True,
) -> CapabilityResult:
    """Paired statistics of one capability for one arm against the baseline (``with_ci=False``: no bootstrap)."""
    before_all = [base[1].verdicts[i].scores.get(cap) for i in idx]
    after_all = [arm[1].verdicts[i].scores.get(cap) for i in idx]
    pairs = [(b, a) for b, a in zip(before_all, after_all, strict=True) if b is not None and a is not None]
    effect = paired_delta(
        [b for b, _ in pairs], [a for _, a in pairs], n_resamples=n_bootstrap, seed=seed, with_ci=with_ci
    )
    return CapabilityResult(
        capability=cap.value,
        target=target,
        n_rows=len(idx),
        undecided=len(idx) - len(pairs),
        effect=effect,
        rows_changed=sum(base[0].ids[i] != arm[0].ids[i] for i in idx),
        rouge_l_before=float(np.mean([base[1].rouge_l[i] for i in idx])),
        rouge_l_after=float(np.mean([arm[1].rouge_l[i] for i in idx])),
        bleu_before=float("nan"),
        bleu_after=float("nan"),
    )


def capability_results(
    rows: Sequence[TestRow],
    groups: dict[Capability, list[int]],
    target: Capability,
    base: Scored,
    arm: Scored,
    n_bootstrap: int,
    seed: int,
    full: bool = True,
) -> list[CapabilityResult]:
    """Per capability (``groups``: the rows it is scored on), the arm against its model's baseline; ``full=False``
    (placebo arms) skips the bootstrap CI and BLEU."""
    out = []
    for cap, idx in groups.items():
        result = capability_result(cap, cap == target, idx, base, arm, n_bootstrap, seed, full)
        if full:
            refs = [rows[i].reference for i in idx]
            result.bleu_before = corpus_bleu([base[0].texts[i] for i in idx], refs)
            result.bleu_after = corpus_bleu([arm[0].texts[i] for i in idx], refs)
        out.append(result)
    return out

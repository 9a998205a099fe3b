"""The two verdict rules of ``probe localize`` (localize/verdicts.py), fixed before any default-pair result: each
branch on evidence made to sit on it, so that a rule changed without the docs fails here."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.rankings import MEAN_DIFF
from localize.verdicts import (
    MIN_PLACEBO,
    RankingEvidence,
    WindowResult,
    ranking_verdict,
    window_carries_change,
)

RNG = np.random.default_rng(0)


def _evidence(ranking: str, score: float, f_at: dict[str, float], placebo: list[float]) -> list[RankingEvidence]:
    samples = score + RNG.normal(0, 0.01, 500)
    return [
        RankingEvidence(ranking, direction, score, samples, dict(f_at), {k: list(placebo) for k in f_at})
        for direction in ("necessity", "sufficiency")
    ]


QUIET = [0.0] * MIN_PLACEBO


def test_the_best_ranking_is_named_and_beats_mean_diff_and_the_placebo() -> None:
    evidence = _evidence(MEAN_DIFF, 0.3, {"0.2%": 0.1, "2%": 0.2}, QUIET) + _evidence(
        "relp", 0.6, {"0.2%": 0.5, "2%": 0.8}, QUIET
    )
    verdict = ranking_verdict(evidence)
    assert verdict.verdict == "relp"
    assert "clearly ahead of mean_diff" in verdict.reason and "relp beat(s) both" in verdict.reason


def test_a_ranking_within_the_placebo_band_does_not_beat_it() -> None:
    loud = [0.0] * (MIN_PLACEBO - 1) + [0.9]  # one random set closes 90% at both points
    evidence = _evidence(MEAN_DIFF, 0.3, {"0.2%": 0.1, "2%": 0.2}, loud) + _evidence(
        "relp", 0.6, {"0.2%": 0.5, "2%": 0.8}, loud
    )
    verdict = ranking_verdict(evidence)
    assert verdict.verdict == "relp (none beats mean_diff and the placebo)"
    assert "no ranking beats both" in verdict.reason


def test_too_few_placebo_sets_cannot_decide_and_a_tie_is_said() -> None:
    evidence = _evidence(MEAN_DIFF, 0.3, {"0.2%": 0.1, "2%": 0.2}, QUIET[:5]) + _evidence(
        "relp", 0.6, {"0.2%": 0.5, "2%": 0.8}, QUIET[:5]
    )
    assert "relp: cannot be decided" in ranking_verdict(evidence).reason
    tied = _evidence(MEAN_DIFF, 0.6, {"0.2%": 0.5, "2%": 0.8}, QUIET) + _evidence(
        "relp", 0.6001, {"0.2%": 0.5, "2%": 0.8}, QUIET
    )
    assert "tied with" in ranking_verdict(tied).reason


def test_without_mean_diff_the_comparison_cannot_be_decided() -> None:
    verdict = ranking_verdict(_evidence("relp", 0.6, {"0.2%": 0.5, "2%": 0.8}, QUIET))
    assert verdict.verdict.endswith("(none beats mean_diff and the placebo)")
    assert "mean_diff was not measured" in verdict.reason


@pytest.mark.parametrize(
    ("low", "high", "layers", "expected"),
    [
        (0.85, 0.95, 19, "supported"),
        (0.60, 0.79, 19, "not supported"),
        (0.70, 0.90, 19, "inconclusive"),
        (0.85, 0.95, 25, "n/a"),  # 25 of 30 layers: more than two thirds
    ],
)
def test_claim_1c_reads_x_80_percent_and_y_two_thirds(low: float, high: float, layers: int, expected: str) -> None:
    results = [WindowResult(d, (low + high) / 2, low, high) for d in ("necessity", "sufficiency")]
    assert window_carries_change(results, layers=layers, total=30).verdict == expected


def test_claim_1c_without_a_gap_is_not_judged() -> None:
    nan = float("nan")
    assert window_carries_change([WindowResult("necessity", nan, nan, nan)], layers=19, total=30).verdict == "n/a"
    assert window_carries_change([], layers=19, total=30).verdict == "n/a"

"""The sequential placebo band of ``probe localize`` (localize/sequential.py): the stopping rule is exact over every
completion of the undrawn sets (the ranking verdict's own code on each), and the wave schedule it drives gives the
full design's verdict whatever the sets show. The end-to-end check on the planted-tiny pair is in
tests/test_localize.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.rankings import MEAN_DIFF
from localize.sequential import WAVE, next_wave, pending, read_cells, settled_verdict, verdict_with
from localize.verdicts import MIN_PLACEBO, RankingEvidence, Verdict, ranking_verdict
from tests.support import completions

N_SETS = MIN_PLACEBO  # the fewest sets the verdict reads: the sequential rule applies
F = 0.3  # the candidate ranking's f at both verdict points


def _evidence(directions: tuple[str, ...], rankings: dict[str, tuple[float, float]]) -> list[RankingEvidence]:
    """``rankings``: name -> (log-k CPR, f at both verdict points), the CPR's resamples a constant (CI = value)."""
    return [
        RankingEvidence(name, d, cpr, np.full(40, cpr), {"0.2%": f, "2%": f}, {})
        for d in directions
        for name, (cpr, f) in rankings.items()
    ]


@pytest.mark.parametrize("nan_seen", [False, True])
def test_the_stopping_rule_is_exact_over_every_completion(monkeypatch: pytest.MonkeyPatch, nan_seen: bool) -> None:
    """One cell (DPO <- SFT at 0.2%; its 2% band full and quiet), a candidate that beats mean_diff's CPR, the verdict
    reading 8 sets (MIN_PLACEBO lowered so that every split can be enumerated): for every split of the drawn sets
    among the extremes the rule completes with, and f values just above the candidate's and well below it (where the
    percentile's interpolation decides: one set above and one 0.5 below reads as beaten), the cell is pending exactly
    when some completion of the undrawn sets changes the verdict, and once it is not, the verdict it reports is every
    completion's. A set drawn with an f that is not finite settles its cell at once (too few finite sets: cannot be
    decided, whatever the rest show)."""
    import localize.sequential as sequential
    import localize.verdicts as verdicts

    n_sets = 8
    monkeypatch.setattr(verdicts, "MIN_PLACEBO", n_sets)
    monkeypatch.setattr(sequential, "MIN_PLACEBO", n_sets)
    evidence = _evidence(("necessity",), {MEAN_DIFF: (0.1, 0.1), "relp": (0.5, F)})
    quiet = [0.0] * n_sets
    kinds = (
        [sequential.HIGH, F + 0.1, F - 0.5, sequential.LOW] if not nan_seen else [sequential.HIGH, F + 0.1, math.nan]
    )
    final: dict[tuple[int, ...], Verdict] = {
        counts: ranking_verdict(_with(evidence, completions.values(kinds, counts), quiet))
        for counts in completions.counts(n_sets, len(kinds))
    }
    assert len(set(final.values())) > 1  # the band decides the verdict here
    for k in range(n_sets):
        for drawn in completions.counts(k, len(kinds)):
            if nan_seen and not drawn[-1]:
                continue  # no set drawn is non-finite: the case without
            rests = completions.counts(n_sets - k, len(kinds))
            outcomes = {final[tuple(a + b for a, b in zip(drawn, rest, strict=True))] for rest in rests}
            bands = {("necessity", "0.2%"): completions.values(kinds, drawn), ("necessity", "2%"): quiet}
            still = pending(evidence, bands, n_sets)
            assert (("necessity", "0.2%") in still) == (len(outcomes) > 1), drawn
            if not still:
                assert settled_verdict(evidence, bands, n_sets) == outcomes.pop(), drawn


def _with(evidence: list[RankingEvidence], low: list[float], high: list[float]) -> list[RankingEvidence]:
    from dataclasses import replace

    return [replace(e, placebo_at={"0.2%": low, "2%": high}) for e in evidence]


def test_waves_give_the_full_designs_verdict_whatever_the_sets_show() -> None:
    """Both directions and both verdict points, three rankings against mean_diff (beating its CPR or not, f near or
    far from the band): drawing :data:`WAVE` sets at a time until nothing is pending gives the verdict of all the
    sets, in each of many drawn worlds, and draws fewer sets wherever no ranking can beat the band."""
    rng = np.random.default_rng(0)
    directions = ("necessity", "sufficiency")
    cells = read_cells(directions, ["0.2%", "2%"], N_SETS)
    assert len(cells) == 4
    saved = 0
    for world in range(14):
        rankings = {MEAN_DIFF: (0.1, 0.05)}
        for name in ("count", "relp", "weight"):
            rankings[name] = (float(rng.choice([0.0, 0.5])), float(rng.choice([0.02, 0.1, 0.3, 0.9])))
        evidence = _evidence(directions, rankings)
        spread = float(rng.choice([0.02, 0.1, 0.3]))
        full = {cell: list(np.round(rng.normal(0.0, spread, N_SETS), 2)) for cell in cells}
        if world % 5 == 0:
            full[cells[1]][3] = math.nan  # a set whose f is not finite
        drawn = dict.fromkeys(cells, 0)
        while upto := next_wave(evidence, {c: full[c][:n] for c, n in drawn.items()}, N_SETS, cells):
            assert all(n - drawn[c] <= WAVE for c, n in upto.items())
            drawn.update(upto)
        expected = verdict_with(evidence, full)
        assert settled_verdict(evidence, {c: full[c][: drawn[c]] for c in cells}, N_SETS) == expected, world
        saved += sum(N_SETS - n for n in drawn.values())
    assert saved > 0


def test_fewer_sets_than_the_verdict_reads_are_all_drawn() -> None:
    """With fewer than MIN_PLACEBO sets configured (no verdict reads them) or at a point the verdict does not read,
    every set is drawn: nothing is read sequentially."""
    assert read_cells(["necessity"], ["0.2%", "2%"], N_SETS - 1) == []
    assert read_cells(["necessity"], ["0.2%", "16"], N_SETS) == [("necessity", "0.2%")]
    evidence = _evidence(("necessity",), {MEAN_DIFF: (0.1, 0.1)})
    assert next_wave(evidence, {("necessity", "16"): []}, N_SETS, []) == {("necessity", "16"): N_SETS}

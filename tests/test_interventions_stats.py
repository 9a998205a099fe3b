"""Paired statistics and placebo sampling agree with scipy and with their definitions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from access.placebo import placebo_sets
from access.units import Neuron, NeuronSet
from core.errors import ProbeError
from core.stats import paired_bootstrap_ci
from interventions.stats import mcnemar_exact, paired_delta, placebo_compare


def _pairs(b: int, c: int, both: int, neither: int) -> tuple[list[int], list[int]]:
    before = [1] * b + [0] * c + [1] * both + [0] * neither
    after = [0] * b + [1] * c + [1] * both + [0] * neither
    return before, after


def test_mcnemar_exact_matches_binomtest_and_hand_value():
    before, after = _pairs(b=10, c=2, both=30, neither=8)
    result = mcnemar_exact(before, after)
    assert (result.b, result.c) == (10, 2)
    assert result.p_value == pytest.approx(stats.binomtest(10, 12, 0.5).pvalue, abs=1e-15)
    assert result.p_value == pytest.approx(2 * (1 + 12 + 66) / 4096, rel=1e-12)  # 2 * P(X <= 2 | n=12)


def test_mcnemar_is_symmetric_and_one_without_discordant_pairs():
    before, after = _pairs(b=7, c=3, both=5, neither=5)
    assert mcnemar_exact(before, after).p_value == pytest.approx(mcnemar_exact(after, before).p_value)
    assert mcnemar_exact([1, 0, 1], [1, 0, 1]).p_value == 1.0


def test_paired_delta_point_estimate():
    before, after = _pairs(b=2, c=6, both=10, neither=2)
    result = paired_delta(before, after, n_resamples=2000)
    assert result.n == 20
    assert result.before == pytest.approx(12 / 20) and result.after == pytest.approx(16 / 20)
    assert result.delta == pytest.approx(0.2)
    assert result.ci_low <= 0.2 <= result.ci_high


def test_bootstrap_ci_covers_the_true_difference():
    """Synthetic paired data with a known Δ of +0.10: the 95% CI covers it in most replications."""
    rng = np.random.default_rng(0)
    covered = 0
    reps = 40
    for rep in range(reps):
        before = (rng.random(300) < 0.6).astype(int)
        flip_up = (before == 0) & (rng.random(300) < 0.25)  # 0.4 * 0.25 = +0.10 expected
        after = np.where(flip_up, 1, before)
        low, high = paired_bootstrap_ci(before, after, n_resamples=1000, seed=rep)
        covered += low <= 0.10 <= high
    assert covered >= 0.85 * reps


def test_bootstrap_degenerate_and_empty():
    assert paired_bootstrap_ci([1, 1, 0], [1, 1, 0]) == (0.0, 0.0)
    assert np.isnan(paired_delta([], []).delta)
    with pytest.raises(ValueError):
        paired_bootstrap_ci([1, 0], [1])


def test_placebo_compare_percentile_and_corrected_p():
    cmp = placebo_compare(0.3, [0.0, 0.1, -0.1, 0.2, 0.3])
    assert cmp.percentile == pytest.approx(100 * (4 + 0.5) / 5)
    assert cmp.p_empirical == pytest.approx((1 + 1) / 6)  # only 0.3 itself is as extreme
    extreme = placebo_compare(-0.5, [0.0] * 19)
    assert extreme.p_empirical == pytest.approx(1 / 20) and extreme.percentile == 0.0


def _real() -> NeuronSet:
    return NeuronSet(
        [Neuron(12, 3), Neuron(12, 9), Neuron(19, 0), Neuron(19, 1), Neuron(19, 2), Neuron(30, 63)], "mlp_out"
    )


def test_placebo_sets_match_size_and_layer_distribution_and_exclude_real_units():
    real = _real()
    sets = placebo_sets(real, width=64, n_sets=25, seed=3)
    assert len(sets) == 25
    real_units = {(n.layer, n.unit) for n in real.neurons}
    for placebo in sets:
        assert len(placebo) == len(real)
        assert {layer: len(u) for layer, u in placebo.by_layer().items()} == {
            layer: len(u) for layer, u in real.by_layer().items()
        }
        assert not real_units & {(n.layer, n.unit) for n in placebo.neurons}
        assert all(0 <= n.unit < 64 for n in placebo.neurons)
        assert placebo.hook == real.hook
    assert len({tuple((n.layer, n.unit) for n in s.neurons) for s in sets}) > 20  # genuinely random draws


def test_placebo_sets_are_seeded():
    a = placebo_sets(_real(), 64, 5, seed=1)
    b = placebo_sets(_real(), 64, 5, seed=1)
    c = placebo_sets(_real(), 64, 5, seed=2)
    assert [s.neurons for s in a] == [s.neurons for s in b]
    assert [s.neurons for s in a] != [s.neurons for s in c]


def test_placebo_refuses_layers_without_room():
    real = NeuronSet([Neuron(0, u) for u in range(5)], "mlp_out")
    with pytest.raises(ProbeError, match="too few others"):
        placebo_sets(real, width=8, n_sets=2)
    assert placebo_sets(real, width=8, n_sets=0) == []  # --placebo 0, the advice of that message, must work
    with pytest.raises(ProbeError, match="--placebo"):
        placebo_sets(_real(), 64, -1)

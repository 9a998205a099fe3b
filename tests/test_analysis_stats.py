"""Paired tests and BH: agree with scipy's scalar versions; FDR recovers planted units."""

from __future__ import annotations

import numpy as np
from scipy import stats

from analysis.stats import bh_qvalues, effect_size_dz, paired_pvalues
from core.stats import mcnemar_p as mcnemar_exact


def test_mcnemar_equals_binomtest() -> None:
    n01 = np.array([0, 3, 10, 7, 25, 0])
    n10 = np.array([0, 1, 0, 7, 11, 4])
    expected = [
        1.0 if a + b == 0 else stats.binomtest(int(a), int(a + b), 0.5).pvalue for a, b in zip(n01, n10, strict=True)
    ]
    assert np.allclose(mcnemar_exact(n01, n10), expected)


def test_paired_t_and_effect_size_match_columnwise_scipy() -> None:
    rng = np.random.default_rng(0)
    sft = rng.standard_normal((30, 6))
    dpo = sft + rng.standard_normal((30, 6)) * 0.5 + np.array([0, 0, 1, 0, -1, 0])
    p = paired_pvalues(sft, dpo, "t")
    for j in range(6):
        assert np.isclose(p[j], stats.ttest_rel(dpo[:, j], sft[:, j]).pvalue)
        d = dpo[:, j] - sft[:, j]
        assert np.isclose(effect_size_dz(sft, dpo)[j], d.mean() / d.std(ddof=1))
    assert p[2] < 1e-4 and p[4] < 1e-4


def test_untestable_units_get_p_one_not_nan() -> None:
    sft = np.ones((10, 3))
    dpo = sft.copy()
    dpo[:, 1] += 1.0  # constant shift: zero variance of the difference
    for test in ("t", "wilcoxon"):
        p = paired_pvalues(sft, dpo, test)
        assert np.all(np.isfinite(p)) and p[0] == 1.0
    assert effect_size_dz(sft, dpo).tolist() == [0.0, 0.0, 0.0]
    assert paired_pvalues(sft[:1], dpo[:1]).tolist() == [1.0, 1.0, 1.0]


def test_bh_over_layers_and_units_recovers_planted_signal() -> None:
    rng = np.random.default_rng(7)
    n, layers, width = 80, 6, 50
    sft = rng.standard_normal((n, layers, width))
    dpo = sft + 0.5 * rng.standard_normal((n, layers, width))
    planted = [(1, 3), (4, 10), (5, 49)]
    for layer, unit in planted:
        dpo[:, layer, unit] += 0.6
    p = np.stack([paired_pvalues(sft[:, i], dpo[:, i]) for i in range(layers)])
    q = bh_qvalues(p)
    found = set(zip(*np.nonzero(q <= 0.05), strict=True))
    assert set(planted) <= found
    assert len(found - set(planted)) <= 2  # 297 null units at FDR 5%
    assert q.shape == p.shape and np.all(q >= p)

"""The fast top-k% counts must equal the plain per-sample reference, ties and zeros included."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.topk import float16_order_keys, k_for, topk_counts, topk_mask
from core.errors import ProbeError
from tests.support.topk_reference import authors_topk_counts, reference_topk_counts


@pytest.mark.parametrize("top_percent", [20.0, 1.0, 50.0, 99.0, 100.0])
def test_counts_equal_reference_on_continuous_data(top_percent: float) -> None:
    acts = np.random.default_rng(1).standard_normal((37, 5, 53)).astype(np.float32)
    assert np.array_equal(topk_counts(acts, top_percent), reference_topk_counts(acts, top_percent))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_counts_equal_reference_with_heavy_ties(dtype: type) -> None:
    # three distinct values per row: almost every row has ties at the k-th value
    acts = np.random.default_rng(2).integers(-1, 2, size=(41, 4, 64)).astype(dtype)
    fast = topk_counts(acts, 20.0)
    assert np.array_equal(fast, reference_topk_counts(acts, 20.0))
    assert fast.sum() == 41 * 4 * k_for(64, 20.0)  # exactly k units per sample and layer


def test_tie_rule_is_value_then_lowest_unit_index() -> None:
    row = np.array([[1.0, 5.0, 3.0, 5.0, 3.0, 3.0]])
    assert topk_mask(row, 3).tolist() == [[False, True, True, True, False, False]]
    assert topk_mask(row, 1).tolist() == [[False, True, False, False, False, False]]


def test_zero_values_are_counted_unlike_count_nonzero() -> None:
    acts = np.zeros((3, 1, 10), dtype=np.float16)
    counts = topk_counts(acts, 20.0)
    assert counts.tolist() == [[3, 3, 0, 0, 0, 0, 0, 0, 0, 0]]
    assert np.array_equal(counts, reference_topk_counts(acts, 20.0))


def test_float16_path_matches_float32_and_authors_method() -> None:
    acts = np.random.default_rng(3).standard_normal((64, 3, 256)).astype(np.float16)
    fast = topk_counts(acts, 20.0)
    assert np.array_equal(fast, topk_counts(acts.astype(np.float32), 20.0))
    # the authors' argsort method agrees wherever ties cannot occur (distinct values per row)
    distinct = np.argsort(np.random.default_rng(4).random((20, 2, 100)), axis=2).astype(np.float32) + 1
    assert np.array_equal(topk_counts(distinct, 20.0), authors_topk_counts(distinct, 20.0))


def test_k_matches_reference_formula_and_rejects_bad_percent() -> None:
    assert k_for(4096, 20.0) == 819
    assert k_for(3584, 20.0) == 716
    assert k_for(3, 1.0) == 1
    for bad in (0.0, -5.0, 100.5):
        with pytest.raises(ProbeError, match="top-percent"):
            k_for(10, bad)


def test_nan_is_a_clear_error() -> None:
    acts = np.random.default_rng(5).standard_normal((4, 1, 10)).astype(np.float32)
    acts[2, 0, :] = np.nan
    with pytest.raises(ProbeError, match="NaN"):
        topk_counts(acts, 20.0)


def test_float16_keys_order_every_half_exactly_like_its_value() -> None:
    halves = np.arange(-(2**15), 2**15, dtype=np.int32).astype(np.int16).view(np.float16)
    finite = halves[np.isfinite(halves)]
    keys = float16_order_keys(finite[None, :])[0].astype(np.int64)
    a, b = np.random.default_rng(6).integers(0, finite.size, size=(2, 200_000))
    values = finite.astype(np.float64)
    assert np.array_equal(np.sign(keys[a] - keys[b]), np.sign(values[a] - values[b]))  # <, == (-0 == +0), >


def test_signed_zeros_tie_and_nan_is_an_error_in_float16() -> None:
    row = np.array([[-0.0, 0.0, -1.0, 0.0]], dtype=np.float16)
    assert topk_mask(row, 2).tolist() == [[True, True, False, False]]  # -0 == +0: the lower index wins
    acts = np.zeros((2, 1, 8), dtype=np.float16)
    acts[1, 0, 3] = np.nan
    with pytest.raises(ProbeError, match="NaN"):
        topk_counts(acts, 50.0)


def test_docstring_examples_hold() -> None:
    import doctest

    import analysis.topk

    result = doctest.testmod(analysis.topk)
    assert result.attempted >= 4 and result.failed == 0

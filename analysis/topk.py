"""The paper's top-k% membership counts, exact and fast.

The authors (``interpretation/visualize.py``) keep, for every sample and layer, the
``k = max(1, int(width * top_percent / 100))`` units with the largest *signed*
activation and count, per unit, in how many samples it was kept. They do it with a
full ``np.argsort`` per layer, which is O(W log W) per row and dominates the analysis
at 1,400 × 32 × 4,096. Here one ``np.partition`` per row finds the k-th largest value
``t``; every unit above ``t`` is in, and only rows where several units *equal* ``t``
need a tie break.

Tie rule (explicit, and what the tests' plain reference implements): units are
ranked by value, descending, and equal values by unit index, ascending; the first k
are kept. That is ``np.argsort(-row, kind="stable")[:k]``. (The authors' unstable
quicksort leaves ties unspecified, and their ``count_nonzero`` would miss a kept unit
whose value is exactly 0; membership is counted here, so zeros count.)

float16 rows are never widened: their bit patterns map to int16 keys that order exactly
as the values do (-0 and +0 share a key), and numpy's partition of int16 runs on
AVX-512 sorting networks, twice as fast as float32 and without the conversion. Other
dtypes are ranked as float32. Layers run on a small thread pool (numpy's partition
releases the GIL).

Example:
    >>> x = np.array([[[3.0, 1.0, 2.0, 2.0]]])      # one sample, one layer, 4 units
    >>> topk_counts(x, top_percent=50.0).tolist()   # k=2: unit 0, then the tie 2/3 -> unit 2
    [[1, 0, 1, 0]]
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np
from einops import rearrange, reduce

from core.errors import ProbeError

T = TypeVar("T")


def k_for(width: int, top_percent: float) -> int:
    """Units kept per sample: ``max(1, int(width * top_percent / 100))`` as in the reference.

    >>> k_for(4096, 20.0)
    819
    """
    if not 0.0 < top_percent <= 100.0:
        raise ProbeError(f"--top-percent {top_percent}: expected a number in (0, 100]")
    return max(1, int(width * top_percent / 100.0))


def _as_float32(x: np.ndarray) -> np.ndarray:
    """(N, W) any float -> contiguous float32."""
    if x.dtype == np.float32 and x.flags.c_contiguous:
        return x
    return np.ascontiguousarray(x, dtype=np.float32)


def float16_order_keys(x: np.ndarray) -> np.ndarray:
    """(N, W) float16 -> (N, W) int16 keys with ``key(a) < key(b)`` iff ``a < b`` (and equal iff equal).

    IEEE half is sign-magnitude: non-negative values already order as int16; a negative
    one becomes minus its magnitude bits, so -0 maps to 0 like +0. NaNs land outside
    ``[-0x7C00, 0x7C00]`` (the keys of -inf and +inf).

    >>> float16_order_keys(np.array([[-2.0, -0.0, 0.0, 1.0, np.inf]], dtype=np.float16)).tolist()
    [[-16384, 0, 0, 15360, 31744]]
    """
    bits = np.ascontiguousarray(x, dtype=np.float16).view(np.int16)
    sign = bits >> 15  # 0 or -1
    keys = sign & 0x7FFF
    np.bitwise_xor(keys, bits, out=keys)  # negatives: -1 - magnitude
    np.subtract(keys, sign, out=keys)  # negatives: -magnitude
    return keys


def _rank_values(x: np.ndarray) -> np.ndarray:
    """Values whose order and equalities are those of ``x``: int16 keys for float16, float32 otherwise."""
    if x.dtype == np.float16:
        keys = float16_order_keys(x)
        if keys.size and (keys.max() > 0x7C00 or keys.min() < -0x7C00):
            raise ProbeError(_NAN_MESSAGE)
        return keys
    return _as_float32(x)


_NAN_MESSAGE = "activations contain NaN; re-record them (NaN cannot be ranked)"


def topk_mask(x: np.ndarray, k: int) -> np.ndarray:
    """(N, W) values -> (N, W) bool, True for each row's top-k units (tie rule in the module doc).

    >>> topk_mask(np.array([[1.0, 5.0, 5.0, 0.0]]), 1).tolist()
    [[False, True, False, False]]
    """
    n, w = x.shape
    if not 1 <= k <= w:
        raise ProbeError(f"top-k: k={k} must be between 1 and the width {w}")
    values = _rank_values(x)
    if k == w:
        if values.dtype.kind == "f" and np.isnan(values).any():
            raise ProbeError(_NAN_MESSAGE)
        return np.ones((n, w), dtype=bool)
    # After one partition, t = the k-th largest value and everything left of it is <= t. Where the largest
    # of those equals t, ``x >= t`` keeps more than k units (ties at t) and the row needs the tie rule.
    # (Partitioning at two kth positions would give the same, but numpy's SIMD path takes only one: 8x slower.)
    parted = np.partition(values, w - k, axis=1)
    threshold = parted[:, w - k]
    below = reduce(parted[:, : w - k], "n rest -> n", "max")
    del parted
    mask = values >= rearrange(threshold, "n -> n 1")
    tied = np.flatnonzero(below == threshold)
    if tied.size:
        excess = reduce(mask[tied], "row unit -> row", "sum") - k
        _drop_extra_ties(mask, values, threshold, tied, excess)
    if np.count_nonzero(mask) != n * k:  # NaN sorts last in partition and never compares >=
        raise ProbeError(_NAN_MESSAGE)
    return mask


def _drop_extra_ties(
    mask: np.ndarray, values: np.ndarray, threshold: np.ndarray, tied: np.ndarray, extra: np.ndarray
) -> None:
    """In rows ``tied``, un-keep the ``extra`` highest-index units equal to the k-th value (in place).

    ``x >= t`` kept every unit equal to ``t``; the tie rule keeps the lowest-index ones,
    so the last ``extra`` equal units of each row go. Only the equal entries are
    touched (a few per row), never whole rows.
    """
    rows, cols = np.nonzero(values[tied] == rearrange(threshold[tied], "row -> row 1"))  # cols ascend within a row
    per_row = np.bincount(rows, minlength=tied.size)
    rank_from_end = np.repeat(np.cumsum(per_row), per_row) - np.arange(rows.size)  # last equal unit -> 1
    drop = rank_from_end <= extra[rows]
    mask[tied[rows[drop]], cols[drop]] = False


def _workers(n_tasks: int) -> int:
    return max(1, min(n_tasks, os.cpu_count() or 1, 8))


def map_layers(fn: Callable[[int], T], n_layers: int) -> list[T]:
    """Run ``fn(layer_position)`` over layers on a thread pool, results in layer order.

    The pool already uses every core, so torch's own intra-op threads and the BLAS
    threads (the bootstrap's matrix products; oversubscribed OpenBLAS threads make a
    float64 product 50x slower on a busy 2-core machine) are set to 1 meanwhile and
    restored after.
    """
    workers = _workers(n_layers)
    if workers == 1:
        return [fn(i) for i in range(n_layers)]
    import torch
    from threadpoolctl import threadpool_limits  # installed with scikit-learn

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
            return list(pool.map(fn, range(n_layers)))
    finally:
        torch.set_num_threads(previous)


def topk_counts(acts: np.ndarray, top_percent: float) -> np.ndarray:
    """(N, L, W) activations -> (L, W) int64: samples in which each unit was in the top k%.

    Equals the plain reference in ``tests/support/topk_reference.py`` exactly, ties included.
    """
    if acts.ndim != 3:
        raise ProbeError(f"activations must be (samples, layers, width), got shape {acts.shape}")
    k = k_for(acts.shape[2], top_percent)
    rows = map_layers(lambda i: column_counts(topk_mask(acts[:, i, :], k)), acts.shape[1])
    return np.stack(rows) if rows else np.zeros((0, acts.shape[2]), dtype=np.int64)


def column_counts(mask: np.ndarray) -> np.ndarray:
    """(N, W) bool -> (W,) int64 column counts (summing the bytes as uint8 -> int32 is 2x faster than bool -> int64)."""
    return np.asarray(mask.view(np.uint8).sum(axis=0, dtype=np.int32), dtype=np.int64)

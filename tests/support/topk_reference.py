"""Plain reference implementations of the top-k% counts: the yardstick of the tests and the benchmark.

Example:
    >>> x = np.array([[[3.0, 1.0, 2.0, 2.0]]])
    >>> reference_topk_counts(x, top_percent=50.0).tolist()
    [[1, 0, 1, 0]]
"""

from __future__ import annotations

import numpy as np

from analysis.topk import k_for


def reference_topk_counts(acts: np.ndarray, top_percent: float = 20.0) -> np.ndarray:
    """The plain per-sample, per-layer implementation (slow; the yardstick for tests).

    Same loop structure as the authors' ``keep_top_percentage`` + count, with the
    explicit tie rule (value descending, then unit index ascending).
    """
    n, n_layers, width = acts.shape
    k = k_for(width, top_percent)
    counts = np.zeros((n_layers, width), dtype=np.int64)
    for layer in range(n_layers):
        for sample in range(n):
            row = np.asarray(acts[sample, layer], dtype=np.float64)
            counts[layer, np.argsort(-row, kind="stable")[:k]] += 1
    return counts


def authors_topk_counts(acts: np.ndarray, top_percent: float = 20.0) -> np.ndarray:
    """The authors' vectorised-per-layer method (argsort of each layer), for the speed benchmark."""
    _n, n_layers, width = acts.shape
    k = k_for(width, top_percent)
    out = np.zeros((n_layers, width), dtype=np.int64)
    for layer in range(n_layers):
        each_layer = acts[:, layer, :]
        order = np.argsort(each_layer, axis=1)[:, ::-1][:, :k]
        kept = np.zeros_like(each_layer)
        np.put_along_axis(kept, order, np.take_along_axis(each_layer, order, axis=1), axis=1)
        out[layer] = np.count_nonzero(kept, axis=0)
    return out

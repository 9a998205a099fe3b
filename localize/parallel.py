"""Data-parallel ``probe localize``: the rows dealt to the processes of one launch, their measurements joined on rank 0.

``torchrun --nproc-per-node N -m probe_cli localize RUN ...`` starts N copies of the command in the world of
:mod:`probes.distributed` (the one ``probe run`` and ``probe intervene`` use). Every quantity of a localize run is a
sum or a mean over rows, so the rows are what is split: row *k* is rank ``k % N``'s (:func:`share`). Each rank
generates its rows' responses, runs the gradient pass on them, and then every arm on them; the gradient estimates are
gathered on every rank before the rankings are made (a ranking sums them over all rows, so every rank ranks alike),
and so are the per-row KLs; rank 0 assembles and writes the report as one process would. A row's
numbers depend only on its batch mates, so a split run gives the one-process figures up to float rounding.

Example:
    >>> share(World(1, 3), 7)
    [1, 4]
    >>> merged([[0, 2], [1]], [np.array([10.0, 12.0]), np.array([11.0])], 3).tolist()
    [10.0, 11.0, 12.0]
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from core.errors import ProbeError
from probes.distributed import World

if TYPE_CHECKING:
    from access.relevance import GapAttribution
    from localize.passes import RowGap


def share(world: World, n_rows: int) -> list[int]:
    """The rows this rank measures (row *k* is rank ``k % size``'s)."""
    if n_rows < world.size:
        raise ProbeError(f"{world.size} processes for {n_rows} rows: start at most one process per row")
    return [k for k in range(n_rows) if world.owns(k)]


def merged(indices: Sequence[Sequence[int]], parts: Sequence[np.ndarray], n_rows: int) -> np.ndarray:
    """Per-row arrays of each rank (first axis: its rows ``indices``) as one array in row order."""
    first = parts[0]
    out = np.zeros((n_rows, *first.shape[1:]), dtype=first.dtype)
    for rows, part in zip(indices, parts, strict=True):
        out[list(rows)] = part
    return out


def gathered_attribution(world: World, mine: list[int], n_rows: int, found: GapAttribution) -> GapAttribution:
    """Every rank's gradient estimates, on every rank (the rankings sum them over all rows)."""
    from access.relevance import GapAttribution

    if not world.distributed:
        return found
    everyone = world.gather((mine, found.estimates, found.kl))
    indices = [rows for rows, _, _ in everyone]
    estimates = {
        estimator: {hook: merged(indices, [e[estimator][hook] for _, e, _ in everyone], n_rows) for hook in per_hook}
        for estimator, per_hook in found.estimates.items()
    }
    return GapAttribution(estimates, merged(indices, [kl for _, _, kl in everyone], n_rows))


def gathered_gaps(world: World, mine: list[int], n_rows: int, gaps: dict[Hashable, RowGap]) -> dict[Hashable, RowGap]:
    """Every arm's per-row KLs over all rows, on every rank (rank 0 writes the report; all pick the same heads)."""
    from localize.passes import RowGap

    if not world.distributed:
        return gaps
    everyone = world.gather((mine, {key: (g.kl, g.kl_unedited) for key, g in gaps.items()}))
    indices = [rows for rows, _ in everyone]
    return {
        key: RowGap(
            merged(indices, [p[key][0] for _, p in everyone], n_rows),
            merged(indices, [p[key][1] for _, p in everyone], n_rows),
        )
        for key in gaps
    }

"""Placebo neuron sets: random units with the same size and per-layer layout as the real set.

An intervention that changes generations proves only that *some* units matter. The
question a user has is whether *these* units matter more than any others would. A
placebo set keeps everything but the choice of units: the same hook point, the same
number of units in each layer (so depth, which matters a lot, is matched), units drawn
uniformly within each layer from those not in the real set. R such sets, seeded, give
the null distribution the real effect is placed in (:func:`interventions.stats.placebo_compare`).

Example:
    >>> from access.units import Neuron, NeuronSet
    >>> real = NeuronSet([Neuron(2, 0), Neuron(2, 1), Neuron(3, 5)], hook="mlp_out")
    >>> sets = placebo_sets(real, width=8, n_sets=3, seed=0)
    >>> [sorted((l, len(u)) for l, u in s.by_layer().items()) for s in sets][0]
    [(2, 2), (3, 1)]
"""

from __future__ import annotations

import numpy as np

from access.units import Neuron, NeuronSet
from core.errors import ProbeError


def placebo_sets(real: NeuronSet, width: int, n_sets: int = 20, seed: int = 0) -> list[NeuronSet]:
    """``n_sets`` random sets matching ``real`` layer by layer, excluding its units."""
    if n_sets < 0:
        raise ProbeError(f"--placebo must be 0 or more, got {n_sets}")
    if n_sets == 0:
        return []
    by_layer = real.by_layer()
    for layer, units in by_layer.items():
        if width - len(units) < len(units):
            raise ProbeError(
                f"placebo: layer {layer} has {len(units)} of {width} units selected; "
                "too few others remain to draw a matched random set; select fewer units there (--top-k) "
                "or pass --placebo 0"
            )
    rng = np.random.default_rng(seed)
    out: list[NeuronSet] = []
    for draw in range(n_sets):
        neurons: list[Neuron] = []
        for layer in sorted(by_layer):
            pool = np.setdiff1d(np.arange(width), np.asarray(by_layer[layer]))
            chosen = np.sort(rng.choice(pool, size=len(by_layer[layer]), replace=False))
            neurons.extend(Neuron(layer, int(u)) for u in chosen)
        out.append(
            NeuronSet(
                neurons,
                real.hook,
                metric="placebo",
                capability=real.capability,
                selection={"rule": "placebo", "seed": seed, "draw": draw, "matched_to": len(real)},
            )
        )
    return out

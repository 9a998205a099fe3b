"""The placebo band's passes: random sets of each placebo point's size, patched like a ranking's top k, either every
one in its direction's engine call (``--placebo-design all``) or a wave at a time after the curves, until the ranking
verdict can no longer change (``sequential``, the default: the rule is :mod:`localize.sequential`'s).

Set ``s`` is the top k of the random ranking seeded ``[seed, s]`` (every unit equally likely), the same in both
directions, so a sequential run draws the first sets of the full design. A wave patches :data:`WAVE` more sets at
each cell that is still pending, one engine call per direction; the patch source's values at the hook point are kept
from the directions' first calls when they fit :data:`KEPT_SOURCE_BYTES` (so a wave runs its arms and nothing else),
else each wave runs the source once more. Points no verdict reads, and runs of fewer than
:data:`~localize.verdicts.MIN_PLACEBO` sets, draw every set in the first wave.

Example:
    >>> kept_bytes(2_300, 1_536, 30) / 2**20 < KEPT_SOURCE_BYTES / 2**20   # the default pair's six rows, mlp_post
    True
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

import numpy as np

from localize.sequential import SEQUENTIAL, WAVE, Cell, next_wave, read_cells

if TYPE_CHECKING:
    from localize.estimate import BandCost
    from localize.grid import Point
    from localize.measured import Measured
    from localize.passes import Arm, DirectionPasses, RowGap
    from localize.plan import LocalizePlan
    from localize.verdicts import RankingEvidence

KEPT_SOURCE_BYTES = 512 * 2**20  # per direction: the source's hook-point values kept between the waves, at most
Runner = Callable[["DirectionPasses", dict[Hashable, "Arm"], str, float | None], dict[Hashable, "RowGap"]]


def placebo_key(s: int, label: str) -> tuple[str, int, str]:
    return ("placebo", s, label)


def placebo_arms(plan: LocalizePlan, sets: dict[Point, range]) -> dict[Hashable, Arm]:
    """The random sets ``sets[point]`` at each point, as arms (module doc)."""
    from localize.passes import UnitSet

    shape = plan.shape
    arms: dict[Hashable, Arm] = {}
    for point, chosen in sets.items():
        for s in chosen:
            order = np.random.default_rng([plan.config.seed, s]).permutation(shape.total)[: plan.units(point)]
            arms[placebo_key(s, point.label)] = (
                UnitSet.from_flat(plan.config.hook, order, shape.units_per_layer, shape.group),
            )
    return arms


def kept_bytes(padded_tokens: int, width: int, n_layers: int) -> int:
    """Bytes of one source's float32 values at a hook point of ``width`` at every layer, over ``padded_tokens``."""
    return 4 * padded_tokens * width * n_layers


def keep_source(plan: LocalizePlan, passes: DirectionPasses) -> bool:
    """Keep the patch source's values at the hook point for the waves (from the first call on), where they fit."""
    shape = plan.shape
    width = shape.units_per_layer * shape.group
    if kept_bytes(passes.outcomes.padded_tokens, width, shape.n_layers) > KEPT_SOURCE_BYTES:
        return False
    passes.outcomes.keep_source_values({(plan.config.hook, layer) for layer in range(shape.n_layers)})
    return True


def band_cost(plan: LocalizePlan, tokens: float) -> BandCost:
    """One direction's band for the estimate (:class:`localize.estimate.BandCost`): the sets always drawn, those drawn
    only while the verdict may change, and the source passes its waves add where its values are not kept."""
    from localize.estimate import BandCost

    n_sets, labels = plan.config.placebo, [p.label for p in plan.placebo_points]
    if plan.config.placebo_design != SEQUENTIAL:
        return BandCost(fixed=n_sets * len(labels))
    read = len(read_cells(["any"], labels, n_sets))
    shape = plan.shape
    kept = kept_bytes(int(tokens), shape.units_per_layer * shape.group, shape.n_layers) <= KEPT_SOURCE_BYTES
    waves = 0 if kept or not read else -(-n_sets // WAVE)
    return BandCost(fixed=n_sets * (len(labels) - read), sequential=n_sets * read, reruns=waves)


def values_at(m: Measured, direction: str, label: str, n: int) -> list[float]:
    """The first ``n`` random sets' f at a point of one direction."""
    from access.outcomes import gap_closed

    gaps = m.gaps[direction]
    return [gap_closed(gaps[placebo_key(s, label)].kl, gaps[placebo_key(s, label)].kl_unedited) for s in range(n)]


def draw_waves(
    plan: LocalizePlan,
    passes: dict[str, DirectionPasses],
    run: Runner,
    m: Measured,
    ranking_evidence: Callable[[Measured], list[RankingEvidence]],
) -> None:
    """The sequential band (module doc): waves until no cell is pending; ``m.placebo_drawn`` says how many sets each
    cell drew. Needs every direction's curves measured: the verdict reads their f and CPR (``ranking_evidence``,
    :func:`localize.assemble.ranking_evidence`)."""
    n_sets = plan.config.placebo
    points = {p.label: p for p in plan.placebo_points}
    drawn: dict[Cell, int] = {(d.name, label): 0 for d in m.directions for label in points}
    read = read_cells([d.name for d in m.directions], list(points), n_sets)
    evidence = ranking_evidence(m) if read else []
    wave = 0
    while upto := next_wave(evidence, {cell: values_at(m, *cell, n) for cell, n in drawn.items()}, n_sets, read):
        wave += 1
        for direction in m.directions:
            sets = {points[label]: range(drawn[(d, label)], n) for (d, label), n in upto.items() if d == direction.name}
            if sets:
                arms = placebo_arms(plan, sets)
                share = len(arms) / (n_sets * len(points))  # of the whole band's estimate
                estimate = m.phases.get(f"{direction.name} placebo", 0.0) * share or None
                name = f"placebo wave {wave} {direction.label}"
                m.gaps[direction.name].update(run(passes[direction.name], arms, name, estimate))
        drawn.update(upto)
    m.placebo_drawn = drawn

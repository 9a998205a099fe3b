"""The local basis read side by side with the global one: layer profiles, unit rankings and their overlap.

What later stages (the study's claim 1, the interventions' ``--select local_*`` rules) need from a run recorded with
the local groups (:mod:`analysis.basis` says what each basis means):

:func:`basis_maps`
    the maps of one metric in either basis over the default window (or given layers), computed from the recording;
:func:`basis_profiles`
    the per-layer profile in both bases side by side, with the overlap of their top layers and top units;
:func:`local_ranking`
    the units of the local basis ranked by |Δ| (the rule of ``probe analyze``'s neuron sets), as ``(layer, unit)``.

A run recorded before the local groups (or with ``--local none``) is one :class:`~core.errors.ProbeError` line.

Example:
    >>> unit_overlap([(3, 1), (4, 2), (5, 0)], [(4, 2), (9, 9)])
    1
    >>> profiles = basis_profiles("runs/latest", "multi_turn", "mlp_post")       # doctest: +SKIP
    >>> [r.layer for r in profiles.global_layers[:3]], [r.layer for r in profiles.local_layers[:3]]  # doctest: +SKIP
    ([29, 28, 20], [2, 18, 9])
    >>> local_ranking("runs/latest", "multi_turn", "mlp_post", k=3)              # doctest: +SKIP
    [(18, 402), (2, 77), (9, 1203)]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from analysis.basis import basis_models, basis_of_settings, describe_basis
from analysis.config import AnalysisConfig
from analysis.maps import compute_maps
from analysis.metric_maps import MetricMaps
from analysis.profile import RankedLayer, layer_profile, ranked_units
from analysis.rankings import MEAN_DIFF
from analysis.window import Window, model_depth, resolve_window
from probes.store import RunReader


def basis_maps(
    run: RunReader,
    capability: str,
    hook: str,
    config: AnalysisConfig = AnalysisConfig(stability_resamples=0),
    basis: str | None = None,
) -> MetricMaps:
    """``config.metric``'s maps of ``capability`` × ``hook`` in ``basis`` (default ``config.basis``) over
    ``config.layers`` (default: the default window)."""
    basis = basis or config.basis
    window = _window(run, capability, hook, config.layers)
    models = basis_models(run, capability, hook, basis, config.direction if basis == "local" else None)
    return compute_maps(run, capability, hook, window, replace(config, basis=basis), models)


def _window(run: RunReader, capability: str, hook: str, layers: str | None) -> Window:
    stored = run.layers(capability, hook)
    return resolve_window(layers, model_depth(run, stored), stored)


@dataclass(frozen=True)
class BasisProfiles:
    """One capability × hook's per-layer profile in both bases (rows ranked by mean |Δ|, see
    :func:`analysis.profile.layer_profile`), what each basis means, and how much their tops agree."""

    capability: str
    hook: str
    metric: str
    direction: str  # the local direction used
    layers: list[int]  # the window both profiles cover
    global_layers: list[RankedLayer]
    local_layers: list[RankedLayer]
    meaning: dict[str, str]  # basis -> what it means, in words (analysis.basis.describe_basis)
    top_n: int  # how many top layers the layer overlap compares
    top_k: int  # how many top units the unit overlap compares
    top_layer_overlap: int  # layers among both bases' top ``top_n``
    top_unit_overlap: int  # units among both bases' top ``top_k``
    global_units: list[tuple[int, int]]  # the global basis's top ``top_k`` units, (layer, unit)
    local_units: list[tuple[int, int]]  # the local basis's


def basis_profiles(
    run_dir: str | Path,
    capability: str,
    hook: str,
    config: AnalysisConfig = AnalysisConfig(metric=MEAN_DIFF, stability_resamples=0),
    top_n: int = 5,
    top_k: int = 64,
) -> BasisProfiles:
    """The global and local layer profiles of one capability × hook, side by side (module doc)."""
    with RunReader(run_dir) as run:
        maps = {basis: basis_maps(run, capability, hook, config, basis) for basis in ("global", "local")}
    direction = basis_of_settings(maps["local"].settings)[1] or ""
    profiles = {basis: layer_profile(m, config.fdr_alpha) for basis, m in maps.items()}
    units = {basis: top_unit_pairs(m, top_k) for basis, m in maps.items()}
    return BasisProfiles(
        capability=capability,
        hook=hook,
        metric=config.metric,
        direction=direction,
        layers=list(maps["global"].layers),
        global_layers=profiles["global"],
        local_layers=profiles["local"],
        meaning={"global": describe_basis("global"), "local": describe_basis("local", direction)},
        top_n=top_n,
        top_k=top_k,
        top_layer_overlap=len(
            {r.layer for r in profiles["global"][:top_n]} & {r.layer for r in profiles["local"][:top_n]}
        ),
        top_unit_overlap=unit_overlap(units["global"], units["local"]),
        global_units=units["global"],
        local_units=units["local"],
    )


def top_unit_pairs(maps: MetricMaps, k: int | None = None) -> list[tuple[int, int]]:
    """``(layer, unit)`` ranked by |Δ| (ties by layer, then unit), nonzero Δ only; the first ``k`` (None: all)."""
    ranked = ranked_units(maps, maps.delta != 0)
    return [(maps.layers[int(row)], int(unit)) for row, unit in (ranked if k is None else ranked[:k])]


def local_ranking(
    run_dir: str | Path,
    capability: str,
    hook: str,
    metric: str = MEAN_DIFF,
    k: int | None = 64,
    *,
    layers: str | None = None,
    direction: str | None = None,
) -> list[tuple[int, int]]:
    """The top ``k`` units of ``metric`` in the local basis, as ``(layer, unit)`` (module doc)."""
    config = AnalysisConfig(metric=metric, basis="local", direction=direction, layers=layers, stability_resamples=0)
    with RunReader(run_dir) as run:
        return top_unit_pairs(basis_maps(run, capability, hook, config), k)


def unit_overlap(first: Iterable[tuple[int, int]], second: Iterable[tuple[int, int]]) -> int:
    """How many ``(layer, unit)`` pairs two rankings share."""
    return len(set(first) & set(second))

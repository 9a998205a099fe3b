"""The rankings' table carries their behaviour: names, help, bases, prior passes, and the functions each row names.

The table (``analysis/rankings.py``) is the one place a ranking is chosen: ``probe analyze --metric``, ``--select``,
the maps, ``probe explain``'s ranks and confidence intervals and the figures all read its rows, so a ranking added as
a row (here at run time, as a notebook would) is offered everywhere without another file knowing its name.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from analysis.config import AnalysisConfig
from analysis.rankings import (
    RANKINGS,
    Prior,
    Ranking,
    activation_metrics,
    metric_help,
    metrics,
    ranking,
    select_rules,
)
from core.errors import ProbeError
from tests.test_import_graph import ORDER

ENTRIES = [
    (row.name, kind, target)
    for row in RANKINGS.values()
    for kind, target in (
        ("maps", row.maps),
        ("scores", row.scores),
        ("unit_ci", row.unit_ci),
        ("prior.run", row.prior.run if row.prior else None),
    )
    if target
]


@pytest.mark.parametrize(("name", "kind", "target"), ENTRIES)
def test_every_function_a_row_names_exists_in_a_room_analysis_may_import(name: str, kind: str, target: str) -> None:
    module, attribute = target.split(":")
    assert ORDER.index(module.split(".")[0]) <= ORDER.index("analysis"), f"{name}.{kind}: {module} is above analysis"
    assert callable(getattr(importlib.import_module(module), attribute)), f"{name}.{kind}: {target} is not a function"


def test_the_choices_are_read_off_the_table() -> None:
    assert metrics() == ("topk_count", "mean_diff", "effect_size", "attribution")  # weight change makes no maps
    assert activation_metrics() == ("topk_count", "mean_diff", "effect_size")
    assert list(select_rules()) == [
        *("count", "mean_diff", "effect_size", "attribution", "weight"),
        *("local_count", "local_mean_diff", "local_effect_size"),
    ]
    assert all(f"{name} ({RANKINGS[name].label})" in metric_help() for name in metrics())  # --metric's help


def test_a_basis_or_a_normalisation_the_ranking_does_not_have_is_refused_in_one_line() -> None:
    with pytest.raises(ProbeError, match="attribution ranks in the global basis only"):
        AnalysisConfig(metric="attribution", basis="local")
    with pytest.raises(ProbeError, match="--normalize width only applies to --metric topk_count"):
        AnalysisConfig(metric="effect_size", normalize="width")
    with pytest.raises(ProbeError, match="unknown ranking 'votes'"):
        ranking("votes")


def test_a_row_names_maps_or_scores_not_both() -> None:
    with pytest.raises(ValueError, match="exactly one of maps and scores"):
        Ranking("both", "x", "x", maps="a:b", scores="a:c")
    assert Ranking("only", "x", "x", scores="a:c", prior=Prior("a read", "seconds", on_demand=True)).rule == "only"


@pytest.fixture
def toy_ranking() -> Iterator[str]:
    """``sign_count``: per unit, how many more prompts DPO is above SFT than below, over N (a row added at run time,
    computed by a per-layer kernel of the module's own; removed after the test)."""
    from functools import partial

    import analysis.maps as maps_module
    from analysis.stability import Resamples

    def sign_count(sft: np.ndarray, dpo: np.ndarray) -> np.ndarray:
        return np.asarray(np.sign(dpo - sft).mean(axis=0))

    def resampled(resamples: Resamples, diff: np.ndarray) -> np.ndarray:
        return np.stack([np.sign(diff[rows]).mean(axis=0) for rows in resamples.indices])

    kernel = partial(maps_module._paired_layer, delta=sign_count, resampled=resampled)
    maps_module.sign_maps = maps_module.FromActivations(kernel)
    RANKINGS["sign_count"] = Ranking(
        "sign_count", "DPO above SFT, share of prompts", "sign", maps="analysis.maps:sign_maps"
    )
    yield "sign_count"
    del RANKINGS["sign_count"], maps_module.sign_maps


def test_a_ranking_added_as_one_row_is_offered_everywhere(toy_ranking: str, tmp_path: Path) -> None:
    from analysis.run import analyze_run
    from interventions.select_rules import rule_names, rule_sets
    from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run

    planted = write_synthetic_run(tmp_path / "run", SyntheticSpec(n_samples=30, n_layers=4, width=16))
    result = analyze_run(tmp_path / "run", AnalysisConfig(metric=toy_ranking, stability_resamples=3), plots=False)
    maps = result.maps[("multi_turn", "mlp_out")]
    assert maps.metric == toy_ranking and result.stability  # the bootstrap came with it
    rows, units = np.unravel_index(np.argsort(-np.abs(maps.delta), axis=None)[:3], maps.delta.shape)
    top = {(maps.layers[r], int(u)) for r, u in zip(rows, units, strict=True)}
    assert top == set(planted["multi_turn"])  # the planted units: DPO above SFT on every prompt
    assert rule_names(f"{toy_ranking},local_{toy_ranking}") == [toy_ranking, f"local_{toy_ranking}"]
    chosen = rule_sets(tmp_path / "run", "multi_turn", "mlp_out", [toy_ranking], k=3)[toy_ranking]
    assert {(n.layer, n.unit) for n in chosen.units.neurons} == set(planted["multi_turn"])

"""Notebook helpers (drill-down to prompts, tables) and the less common selection/plot paths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import analysis.plots as plots
from analysis import AnalysisConfig, analyze_run, select_neurons
from analysis.explore import profile_frame, top_prompts, top_units_frame, unit_activations
from core.errors import ProbeError
from core.records import to_json
from probes.store import RunReader
from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("explore") / "run"
    write_synthetic_run(
        path,
        SyntheticSpec(
            n_samples=20, n_layers=16, width=12, capabilities=("multi_turn",), stored_layers=(12, 13, 14, 15)
        ),
    )
    return path


def test_top_prompts_ranks_by_the_chosen_model_with_both_values(run_dir: Path) -> None:
    with RunReader(run_dir) as run:
        table = top_prompts(run, "multi_turn", "mlp_out", layer=14, unit=3, model="sft", n=5)
        values = unit_activations(run, "multi_turn", "mlp_out", 14, 3, "sft")
        prompts = run.samples("multi_turn").prompts
    assert len(table) == 5 and list(table["sft"]) == sorted(table["sft"], reverse=True)
    assert np.allclose(table["sft"], np.sort(values)[::-1][:5])
    assert np.allclose(table["dpo_minus_sft"], table["dpo"] - table["sft"])
    first = int(table.loc[0, "row"])
    assert table.loc[0, "prompt_tail"] == prompts[first] and table.loc[0, "sample_id"] == first


@pytest.mark.parametrize(
    ("layer", "unit", "model", "message"),
    [
        (3, 0, "dpo", "layer 3 of mlp_out was not recorded"),
        (14, 12, "dpo", "unit 12 is outside mlp_out"),
        (14, 0, "base", "model 'base'"),
    ],
)
def test_drill_down_rejects_bad_targets(run_dir: Path, layer: int, unit: int, model: str, message: str) -> None:
    with RunReader(run_dir) as run, pytest.raises(ProbeError, match=message):
        top_prompts(run, "multi_turn", "mlp_out", layer=layer, unit=unit, model=model)


def test_tables_and_strict_fdr_selection(run_dir: Path, tmp_path: Path) -> None:
    result = analyze_run(run_dir, AnalysisConfig(metric="effect_size"), out_dir=tmp_path, plots=False)
    maps = result.maps[("multi_turn", "mlp_out")]
    assert list(profile_frame(maps).columns) == [
        "rank",
        "layer",
        "mean_abs_delta",
        "share_significant",
        "n_significant",
        "rms_sft",
        "rms_dpo",
    ]
    assert len(top_units_frame(maps, 7)) == 7
    everything = select_neurons(maps, rule="fdr", k=None, alpha=0.05)
    assert len(everything) == int(maps.significant(0.05).sum()) and everything.selection["k"] is None
    nothing = select_neurons(maps, rule="fdr", k=None, threshold=1e9)
    assert len(nothing) == 0


def test_fdr_rule_with_nothing_significant_writes_no_set_and_says_so(run_dir: Path, tmp_path: Path) -> None:
    result = analyze_run(
        run_dir, AnalysisConfig(metric="effect_size", rule="fdr", threshold=1e9), out_dir=tmp_path, plots=False
    )
    assert result.neuron_sets == {} and not list(tmp_path.glob("neurons_*.json"))
    assert any("no unit qualifies under --rule fdr" in w for w in to_json(result.summary)["warnings"])
    assert to_json(result.summary)["capabilities"]["multi_turn"]["mlp_out"]["neuron_set"] is None


def test_png_without_chromium(run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plots, "chromium_available", lambda: False)
    result = analyze_run(run_dir, out_dir=tmp_path / "auto")  # png=None: HTML only, with a warning
    assert result.plots and all(p.suffix == ".html" for p in result.plots)
    assert any("PNG export skipped" in w for w in result.warnings)
    with pytest.raises(ProbeError, match="PNG export needs Chromium"):
        analyze_run(run_dir, out_dir=tmp_path / "forced", png=True)
    assert not (tmp_path / "forced").exists()  # refused before any work

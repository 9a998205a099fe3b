"""analyze_run end to end on real HDF5 runs with planted signal: maps, windows, FDR, neuron sets, files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from access.units import NeuronSet
from analysis import AnalysisConfig, analyze_run, load_maps, select_neurons
from core.errors import ProbeError
from core.records import to_json
from probes.store import RunReader
from tests.support.synthetic_runs import SyntheticSpec, write_synthetic_run
from tests.support.topk_reference import reference_topk_counts

SPEC = SyntheticSpec(n_samples=60, n_layers=16, width=32, stored_layers=tuple(range(8, 16)), n_planted=3)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[tuple[int, int]]]]:
    run_dir = tmp_path_factory.mktemp("analysis") / "run"
    return run_dir, write_synthetic_run(run_dir, SPEC)


def _maps(result, cap="multi_turn", hook="mlp_out"):
    return result.maps[(cap, hook)]


@pytest.mark.parametrize(
    ("metric", "test"), [("topk_count", "t"), ("mean_diff", "t"), ("effect_size", "t"), ("mean_diff", "wilcoxon")]
)
def test_fdr_finds_the_planted_units_and_few_others(run, tmp_path: Path, metric: str, test: str) -> None:
    run_dir, planted = run
    result = analyze_run(
        run_dir, AnalysisConfig(metric=metric, test=test, layers="8-15"), out_dir=tmp_path, plots=False
    )
    for cap, units in planted.items():
        maps = _maps(result, cap)
        found = {(maps.layers[r], int(u)) for r, u in zip(*np.nonzero(maps.significant(0.05)), strict=True)}
        assert set(units) <= found, (metric, cap, units, found)
        assert len(found - set(units)) <= 3
        top = to_json(result.summary)["capabilities"][cap]["mlp_out"]["top_units"][: len(units)]
        assert {(t["layer"], t["unit"]) for t in top} == set(units)
        assert to_json(result.summary)["capabilities"][cap]["mlp_out"]["top_layers"][0]["layer"] in {
            layer for layer, _ in units
        }


def test_topk_count_maps_equal_reference_and_both_normalisations(run, tmp_path: Path) -> None:
    run_dir, _ = run
    by_samples = _maps(analyze_run(run_dir, AnalysisConfig(layers="10-15"), out_dir=tmp_path / "s", plots=False))
    by_width = _maps(
        analyze_run(run_dir, AnalysisConfig(layers="10-15", normalize="width"), out_dir=tmp_path / "w", plots=False)
    )
    with RunReader(run_dir) as reader:
        stored = reader.layers("multi_turn", "mlp_out")
        rows = [stored.index(i) for i in range(10, 16)]
        sft = reader.activations("sft", "multi_turn", "mlp_out")[:, rows]
        dpo = reader.activations("dpo", "multi_turn", "mlp_out")[:, rows]
    count_sft, count_dpo = reference_topk_counts(sft), reference_topk_counts(dpo)
    assert np.array_equal(by_samples.sft, count_sft) and np.array_equal(by_samples.dpo, count_dpo)
    assert np.allclose(by_samples.delta, (count_dpo - count_sft) / SPEC.n_samples)
    assert np.allclose(by_width.delta, (count_dpo - count_sft) / SPEC.width)  # the authors' /d_model
    assert by_width.settings["normalize"] == "width" and by_samples.settings["k"] == 6


def test_layer_window_must_lie_in_the_model_and_is_cut_to_the_recording_with_a_warning(run, tmp_path: Path) -> None:
    run_dir, _ = run
    with pytest.raises(ProbeError, match=r"--layers 12-31: the model has 16 layers \(0-15\); layer 16 is outside it"):
        analyze_run(run_dir, AnalysisConfig(layers="12-31"), out_dir=tmp_path, plots=False)
    result = analyze_run(run_dir, AnalysisConfig(layers="4-11"), out_dir=tmp_path, plots=False)
    assert _maps(result).layers == [8, 9, 10, 11]
    assert any("only layers 8-11" in w for w in result.warnings)
    window = to_json(result.summary)["capabilities"]["multi_turn"]["mlp_out"]["window"]
    assert window == {
        "layers": [8, 9, 10, 11],
        "spec": "4-11",
        "reason": "--layers 4-11 (given); cut to 8-11, the layers recorded",
        "n_model_layers": 16,
    }
    with pytest.raises(ProbeError, match=r"the model has 16 layers \(0-15\); layer 40 is outside it"):
        analyze_run(run_dir, AnalysisConfig(layers="40-50"), out_dir=tmp_path, plots=False)
    with pytest.raises(ProbeError, match="none of layers 0-3 was recorded"):
        analyze_run(run_dir, AnalysisConfig(layers="0-3"), out_dir=tmp_path, plots=False)


def test_default_window_scales_with_depth_and_says_so(tmp_path: Path) -> None:
    write_synthetic_run(tmp_path / "r", SyntheticSpec(n_samples=12, n_layers=4, width=8, capabilities=("nested",)))
    result = analyze_run(tmp_path / "r", plots=False)
    assert _maps(result, "nested").layers == [2, 3] and result.warnings == []  # 12*4/32 = 1.5 rounds up
    window = to_json(result.summary)["capabilities"]["nested"]["mlp_out"]["window"]
    assert window["spec"] is None and window["n_model_layers"] == 4
    assert (
        window["reason"]
        == "default window: the last 20/32 of depth, layers 2-3 of a 4-layer model (the paper's 12-31 scaled by depth)"
    )


def test_neuron_set_round_trip_and_provenance(run, tmp_path: Path) -> None:
    run_dir, _ = run
    result = analyze_run(run_dir, AnalysisConfig(layers="8-15", top_k=10), out_dir=tmp_path, plots=False)
    path = result.neuron_sets[("multi_turn", "mlp_out")]
    assert path == tmp_path / "neurons_multi_turn_mlp_out.json"
    loaded = NeuronSet.load(path)
    expected = select_neurons(_maps(result), "top_k_abs", 10, run_dir=str(run_dir), model_hashes=loaded.model_hashes)
    assert to_json(loaded) == to_json(expected)
    assert to_json(NeuronSet.read(json.loads(path.read_text()))) == to_json(loaded)
    assert len(loaded) == 10 and loaded.metric == "topk_count" and loaded.capability == "multi_turn"
    assert loaded.run_dir == str(run_dir) and loaded.model_hashes == {
        "sft": "synthetic-sft-0",
        "dpo": "synthetic-dpo-0",
    }
    deltas = [abs(n.delta) for n in loaded.neurons]
    assert deltas == sorted(deltas, reverse=True)
    assert loaded.selection["rule"] == "top_k_abs" and loaded.selection["layers"] == [8, 15]


def test_fdr_rule_keeps_only_significant_units_above_threshold(run, tmp_path: Path) -> None:
    run_dir, planted = run
    result = analyze_run(
        run_dir,
        AnalysisConfig(metric="effect_size", layers="8-15", rule="fdr", threshold=1.0, top_k=50),
        out_dir=tmp_path,
        plots=False,
    )
    loaded = NeuronSet.load(result.neuron_sets[("role_style", "mlp_out")])
    maps = _maps(result, "role_style")
    for n in loaded.neurons:
        row = maps.layers.index(n.layer)
        assert maps.qvalues[row, n.unit] <= 0.05 and abs(n.delta) >= 1.0
    assert {(n.layer, n.unit) for n in loaded.neurons} == set(planted["role_style"])


def test_outputs_are_deterministic_and_maps_round_trip(run, tmp_path: Path) -> None:
    run_dir, _ = run
    first = analyze_run(run_dir, AnalysisConfig(layers="8-15"), out_dir=tmp_path / "a", plots=False)
    second = analyze_run(run_dir, AnalysisConfig(layers="8-15"), out_dir=tmp_path / "b", plots=False)
    assert first.summary_path.read_bytes() == second.summary_path.read_bytes()
    assert json.loads(first.summary_path.read_text()) == json.loads(json.dumps(to_json(first.summary)))
    for loaded in load_maps(first.maps_path):
        original = first.maps[(loaded.capability, loaded.hook)]
        assert loaded.layers == original.layers and loaded.settings == original.settings
        for name in ("sft", "dpo", "delta", "pvalues", "qvalues"):
            assert np.array_equal(getattr(loaded, name), getattr(original, name))


def test_a_maps_write_that_fails_leaves_the_old_file_and_no_temporary(run, tmp_path: Path) -> None:
    from dataclasses import replace

    from analysis.maps import save_maps

    run_dir, _ = run
    result = analyze_run(run_dir, AnalysisConfig(layers="8-15"), out_dir=tmp_path, plots=False)
    before = result.maps_path.read_bytes()
    # fails after the others are written
    broken = replace(_maps(result), capability="priority", settings={"unserialisable": object()})
    with pytest.raises(TypeError):
        save_maps([*result.maps.values(), broken], result.maps_path)
    assert result.maps_path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")) == []


def test_default_output_dir_is_inside_the_run(tmp_path: Path) -> None:
    write_synthetic_run(tmp_path / "r", SyntheticSpec(n_samples=10, n_layers=16, width=8, capabilities=("priority",)))
    result = analyze_run(tmp_path / "r", plots=False)
    assert result.out_dir == tmp_path / "r" / "analysis" and (tmp_path / "r" / "analysis" / "summary.json").is_file()
    assert to_json(result.summary)["capabilities"]["priority"]["mlp_out"]["layers"] == "6-15"  # 12*16/32 = 6


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"capabilities": ["bogus"]}, "unknown capability 'bogus'"),
        ({"capabilities": ""}, "no capability given"),
        ({"capabilities": ["nested"]}, "capability 'nested' was not recorded"),
        ({"hooks": ["attn_out"]}, "--hook attn_out: not recorded"),
        ({"hooks": ["mlp_in"]}, "unknown hook point 'mlp_in'"),
        ({"metric": "mean_diff", "normalize": "width"}, "--normalize width only applies"),
        (
            {"metric": "median"},
            "--metric: expected one of topk_count, mean_diff, effect_size, attribution, got 'median'",
        ),
        ({"top_percent": 0}, "--top-percent"),
        ({"layers": "a-b"}, "expected a range like 12-31"),
    ],
)
def test_user_mistakes_are_clear_errors(run, tmp_path: Path, kwargs: dict, message: str) -> None:
    run_dir, _ = run
    scope = {k: v for k, v in kwargs.items() if k in ("capabilities", "hooks")}  # analyze_run's, not the config's
    with pytest.raises(ProbeError, match=message):
        config = AnalysisConfig(**{k: v for k, v in kwargs.items() if k not in scope})
        analyze_run(run_dir, config, out_dir=tmp_path, plots=False, **scope)
    assert not (tmp_path / "summary.json").exists()


@pytest.mark.parametrize("names", ["all", ["all"], ["multi_turn,ALL"]])
def test_all_means_every_recorded_capability(run, tmp_path: Path, names) -> None:
    run_dir, planted = run
    result = analyze_run(run_dir, AnalysisConfig(layers="14-15"), capabilities=names, out_dir=tmp_path, plots=False)
    assert sorted(to_json(result.summary)["capabilities"]) == sorted(planted)


def test_run_dir_without_activations_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ProbeError, match=r"no activations\.h5 here"):
        analyze_run(tmp_path, plots=False)


def _quiet_layer_run(run_dir: Path) -> None:
    """Layers 0-3: loud (RMS ~1), SFT and DPO alike. Layers 4-7: near-silent (RMS ~1e-4),
    every unit reshuffled by DPO."""
    from probes.store import RunWriter

    rng = np.random.default_rng(7)
    n, layers, width = 80, 8, 16
    scale = np.array([1.0] * 4 + [1e-4] * 4)[None, :, None]
    sft = rng.standard_normal((n, layers, width)) * scale
    dpo = sft + 0.05 * rng.standard_normal((n, layers, width)) * scale
    dpo[:, 4:] = rng.standard_normal((n, 4, width)) * 1e-4 + np.linspace(-3e-4, 3e-4, width)  # ranks move, sizes do not
    with RunWriter(run_dir, {"test": True}, chunk_rows=16) as writer:
        for model in ("sft", "dpo"):
            writer.set_model_info(model, {"weights_sha256": model, "n_layers": layers})
        writer.append_samples("multi_turn", np.arange(n), ["t"] * n, np.full(n, 10), [""] * n)
        for model, acts in (("sft", sft), ("dpo", dpo)):
            writer.append_activations(model, "multi_turn", "mlp_out", acts.astype(np.float32), list(range(layers)))


def test_layer_scale_is_kept_and_a_neuron_set_in_silent_layers_is_flagged(tmp_path: Path) -> None:
    _quiet_layer_run(tmp_path / "run")
    counts = analyze_run(
        tmp_path / "run", AnalysisConfig(layers="all", top_k=8), out_dir=tmp_path / "counts", plots=False
    )
    maps = _maps(counts)
    assert maps.layer_rms is not None and maps.layer_rms.shape == (2, 8)
    assert np.all(maps.layer_rms[:, :4] > 0.5) and np.all(maps.layer_rms[:, 4:] < 1e-3)
    assert maps.quiet_layers() == [4, 5, 6, 7]
    chosen = NeuronSet.load(counts.neuron_sets[("multi_turn", "mlp_out")])
    assert chosen.selection["k"] == 8 and chosen.selection["kept_per_sample"] == 3  # the set's k, not top-20% of 16
    profile = {
        row["layer"]: row for row in to_json(counts.summary)["capabilities"]["multi_turn"]["mlp_out"]["top_layers"]
    }
    assert profile[5]["rms_sft"] < 1e-3 < 0.5 < profile[1]["rms_dpo"]
    assert any("selected units sit in layers 4-7" in w and "mean_diff" in w for w in counts.warnings)
    assert np.array_equal(load_maps(counts.maps_path)[0].layer_rms, maps.layer_rms)
    by_size = analyze_run(
        tmp_path / "run",
        AnalysisConfig(metric="mean_diff", layers="all", top_k=8),
        out_dir=tmp_path / "means",
        plots=False,
    )
    assert not any("selected units" in w for w in by_size.warnings)


def test_summary_json_is_read_back_through_one_type_and_old_versions_are_refused(run, tmp_path: Path) -> None:
    import json

    from analysis.summary import AnalysisSummary

    result = analyze_run(run[0], out_dir=tmp_path, plots=False, capabilities=["multi_turn"])
    on_disk = json.loads(result.summary_path.read_text())
    loaded = AnalysisSummary.load(result.summary_path)
    assert json.loads(json.dumps(to_json(loaded))) == on_disk == json.loads(json.dumps(to_json(result.summary)))
    assert (
        loaded.hook("multi_turn", "mlp_out").top_layer_numbers()[0]
        == on_disk["capabilities"]["multi_turn"]["mlp_out"]["top_layers"][0]["layer"]
    )
    with pytest.raises(ProbeError, match=r"no analysis of nested/mlp_out \(analysed: multi_turn/mlp_out\)"):
        loaded.hook("nested", "mlp_out")
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**on_disk, "version": 1}))
    with pytest.raises(
        ProbeError, match=r"old.json: analysis summary version 1, this toolkit reads version 2; rerun `probe analyze"
    ):
        AnalysisSummary.load(old)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**on_disk, "capabilities": {"multi_turn": {"mlp_out": {"n_samples": 3}}}}))
    with pytest.raises(ProbeError, match=r"broken.json: a malformed analysis summary"):
        AnalysisSummary.load(broken)

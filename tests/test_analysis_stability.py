"""Bootstrap stability of the layer ranking: a clear signal is stable, noise is not, same seed same figure,
summary round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import analysis.maps as maps_module
from analysis import AnalysisConfig, analyze_run
from analysis.profile import layer_scores
from analysis.stability import LayerStability, Resamples
from core.errors import ProbeError
from core.records import from_json, to_json
from tests.support.synthetic_runs import write_arrays_run

N, LAYERS, WIDTH = 60, 24, 32
OVERWHELMING = 17
CLEAR = (3, 8, 12, 21)
KEY = ("multi_turn", "mlp_out")


def _pair(*, overwhelming: bool, clear: bool) -> tuple[np.ndarray, np.ndarray]:
    """DPO = SFT + small noise; optionally half the units of one layer shifted by 3, a quarter of four others by 1."""
    rng = np.random.default_rng(3)
    sft = rng.standard_normal((N, LAYERS, WIDTH))
    dpo = sft + 0.3 * rng.standard_normal((N, LAYERS, WIDTH))
    if overwhelming:
        dpo[:, OVERWHELMING, : WIDTH // 2] += 3.0
    for layer in CLEAR if clear else ():
        dpo[:, layer, : WIDTH // 4] += 1.0
    return sft.astype(np.float16), dpo.astype(np.float16)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("stability")
    rng = np.random.default_rng(5)
    noise_sft, noise_dpo = (rng.standard_normal((N, LAYERS, WIDTH)).astype(np.float16) for _ in range(2))
    return {
        "clear": write_arrays_run(root / "clear", *_pair(overwhelming=True, clear=True)),
        "one_layer": write_arrays_run(root / "one_layer", *_pair(overwhelming=True, clear=False)),
        "noise": write_arrays_run(root / "noise", noise_sft, noise_dpo),
    }


def _stability(run_dir: Path, out: Path, **kwargs) -> LayerStability:
    return analyze_run(run_dir, AnalysisConfig(layers="all", **kwargs), out_dir=out, plots=False).stability[KEY]


@pytest.mark.parametrize("metric", ["topk_count", "mean_diff", "effect_size"])
def test_a_clear_signal_is_stable_in_every_resample_with_the_overwhelming_layer_first(
    runs, tmp_path: Path, metric: str
) -> None:
    record = _stability(runs["clear"], tmp_path, metric=metric)
    assert record.top_layers[0] == OVERWHELMING and set(record.top_layers) == {OVERWHELMING, *CLEAR}
    assert (record.n_resamples, record.seed, record.k, record.kept_at_least) == (20, 0, 5, 4)
    assert record.resamples_meeting == 20 and record.mean_overlap == 5.0
    assert record.layer_frequency == dict.fromkeys(sorted(record.top_layers), 20)
    assert record.verdict() == "stable in 20/20 resamples (≥4 of 5 kept)"


def test_one_overwhelming_layer_is_always_in_the_top_but_the_rest_of_the_top_five_is_noise(
    runs, tmp_path: Path
) -> None:
    record = _stability(runs["one_layer"], tmp_path)
    assert record.top_layers[0] == OVERWHELMING and record.layer_frequency[OVERWHELMING] == 20
    # reported, never an error
    assert record.resamples_meeting < 18 and "unstable, below the 18/20 target" in record.verdict()


def test_pure_noise_gives_a_low_figure(runs, tmp_path: Path) -> None:
    record = _stability(runs["noise"], tmp_path)
    assert record.resamples_meeting <= 5 and record.mean_overlap < 3.5
    assert max(record.layer_frequency.values()) < 20 or len(record.layer_frequency) > 5


def test_same_seed_same_figure_and_the_seed_is_recorded(runs, tmp_path: Path) -> None:
    first = _stability(runs["noise"], tmp_path / "a")
    assert _stability(runs["noise"], tmp_path / "b") == first
    other = _stability(runs["noise"], tmp_path / "c", stability_seed=7)
    assert other.seed == 7 and other.top_layers == first.top_layers  # the real ranking does not depend on the seed


def test_summary_json_round_trips_the_record(runs, tmp_path: Path) -> None:
    result = analyze_run(runs["clear"], AnalysisConfig(layers="all"), out_dir=tmp_path, plots=False)
    body = json.loads(result.summary_path.read_text())["capabilities"]["multi_turn"]["mlp_out"]["stability"]
    assert list(body) == [
        "n_resamples",
        "seed",
        "k",
        "top_layers",
        "kept_at_least",
        "resamples_meeting",
        "mean_overlap",
        "layer_frequency",
    ]
    assert from_json(LayerStability, body) == result.stability[KEY]
    assert to_json(from_json(LayerStability, body)) == body


def test_zero_resamples_disables_it(runs, tmp_path: Path) -> None:
    result = analyze_run(
        runs["clear"], AnalysisConfig(layers="all", stability_resamples=0), out_dir=tmp_path, plots=False
    )
    assert result.stability == {} and result.maps[KEY].resampled_scores is None
    assert to_json(result.summary)["capabilities"]["multi_turn"]["mlp_out"]["stability"] is None


@pytest.mark.parametrize(
    ("metric", "normalize"),
    [("topk_count", "samples"), ("topk_count", "width"), ("mean_diff", "samples"), ("effect_size", "samples")],
)
def test_a_resample_of_every_prompt_once_reproduces_the_real_scores(
    runs, tmp_path: Path, monkeypatch, metric: str, normalize: str
) -> None:
    """The resampled path computes Δ the same way as the map: with weights all 1 it gives the real layer scores."""

    def identity(n_samples: int, n_resamples: int, seed: int) -> Resamples:  # noqa: ARG001 - Resamples.draw's signature
        indices = np.tile(np.arange(n_samples), (n_resamples, 1))
        return Resamples(indices, np.ones((n_resamples, n_samples), dtype=np.float32))

    monkeypatch.setattr(maps_module.Resamples, "draw", staticmethod(identity))
    result = analyze_run(
        runs["noise"],
        AnalysisConfig(metric=metric, normalize=normalize, layers="all", stability_resamples=3),
        out_dir=tmp_path,
        plots=False,
    )
    maps = result.maps[KEY]
    real = layer_scores(maps.delta)
    assert maps.resampled_scores is not None and maps.resampled_scores.shape == (LAYERS, 3)
    for column in maps.resampled_scores.T:
        if metric == "topk_count":
            assert np.array_equal(column, real)  # integer counts: exact
        else:
            assert np.allclose(column, real, rtol=1e-10, atol=1e-12)
    assert result.stability[KEY].resamples_meeting == 3 and result.stability[KEY].mean_overlap == 5.0


def test_resample_weights_count_the_drawn_prompts() -> None:
    draws = Resamples.draw(n_samples=7, n_resamples=4, seed=1)
    for rows, weights in zip(draws.indices, draws.weights, strict=True):
        assert np.array_equal(np.bincount(rows, minlength=7), weights)
    assert np.array_equal(Resamples.draw(7, 4, 1).indices, draws.indices)


@pytest.mark.parametrize("value", [-1, 2.5, True])
def test_bad_resample_counts_are_refused(value) -> None:
    with pytest.raises(ProbeError, match="--stability-resamples"):
        AnalysisConfig(stability_resamples=value)

"""Layers × units maps for one capability and hook point: per model, their difference, and its significance.

:func:`compute_maps` computes the maps of a ranking as its row in :mod:`analysis.rankings` names; the rankings
computed from the recorded activations alone live here (:func:`activation_maps` reads the window and runs a
per-layer kernel on it), all signed DPO − SFT:

``topk_count``
    The paper's method. ``sft``/``dpo`` are membership counts (0..N) of each unit in
    a sample's top k% (:mod:`analysis.topk`); ``delta = (count_dpo - count_sft) / N``
    (``normalize="samples"``, the share of prompts that moved) or ``/ width``
    (``normalize="width"``, the authors' script, to reproduce their figures);
    p-values from the exact McNemar test on membership flips.
``mean_diff``
    ``sft``/``dpo`` are mean activations; ``delta`` is the mean paired difference;
    p-values from the paired t-test (or Wilcoxon).
``effect_size``
    As ``mean_diff`` but ``delta`` is Cohen's d_z, comparable across units and layers
    of different scale.

Every map also keeps each layer's activation scale (root mean square over samples and
units, per model): the three rankings above are blind to it (counts are ranks, d_z is
standardised), and a unit can top a ranking in a layer whose output is a thousandth of
its neighbours', where scaling it can change nothing downstream.

With ``config.stability_resamples`` > 0 each layer also yields the ranking score
(mean |Δ|) of every bootstrap resample of the prompts, from the same per-prompt values
(:mod:`analysis.stability`), so the ranking's stability costs no second pass.

q-values are Benjamini–Hochberg over all layers × units of the map. Activations are
read layer window only, straight from HDF5, and processed one layer at a time on a
thread pool, so memory is two float16 copies of the window plus a few float32 rows.

Example:
    >>> import tempfile
    >>> d = np.array([[0.5, -2.0, 0.1], [0.0, 0.3, -0.4]])   # DPO − SFT at layers 12 and 13, 3 units each
    >>> sft, p = np.zeros_like(d), np.full_like(d, 0.5)
    >>> maps = MetricMaps("multi_turn", "mlp_out", "mean_diff", [12, 13], sft, d, d, p, p, n_samples=40)
    >>> [back] = load_maps(save_maps([maps], Path(tempfile.mkdtemp(), "maps.h5")))
    >>> back.layers, np.array_equal(back.delta, d)
    ([12, 13], True)
    >>> window = resolve_window(None, 32, list(range(32)))  # doctest: +SKIP
    >>> with RunReader(run_dir) as run:  # doctest: +SKIP
    ...     maps = compute_maps(run, "multi_turn", "mlp_out", window, AnalysisConfig())
    >>> maps.delta.shape  # doctest: +SKIP
    (2, 4096)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import h5py
import numpy as np
from einops import rearrange, reduce

from analysis.basis import GLOBAL_MODELS, basis_of_settings
from analysis.config import AnalysisConfig
from analysis.metric_maps import MetricMaps
from analysis.profile import layer_scores
from analysis.rankings import entry, ranking
from analysis.stability import Resamples
from analysis.stats import bh_qvalues, effect_size_dz, paired_pvalues
from analysis.topk import column_counts, k_for, map_layers, topk_mask
from analysis.window import Window
from core.errors import ProbeError
from core.hdf5 import array, json_attr, read_hdf5, text_attr, write_hdf5
from core.records import from_json, to_json
from core.stats import mcnemar_p
from probes.store import RunReader

_ARRAYS = ("sft", "dpo", "delta", "pvalues", "qvalues")


def read_window(run: RunReader, model: str, capability: str, hook: str, layers: list[int]) -> np.ndarray:
    """(N, len(layers), width) in the stored dtype, reading only the requested layers."""
    stored = run.layers(capability, hook, model)
    missing = [i for i in layers if i not in stored]
    if missing:
        raise ProbeError(f"{run.path}: layer {missing[0]} of {hook} was not recorded for {model}/{capability}")
    n = run.n_samples(capability)
    positions = [stored.index(i) for i in layers]
    if positions == list(range(positions[0], positions[-1] + 1)):
        return run.read(model, capability, hook, np.s_[:n, positions[0] : positions[-1] + 1, :])
    return run.read(model, capability, hook, np.s_[:n, positions, :])


def compute_maps(
    run: RunReader,
    capability: str,
    hook: str,
    layers: Window | list[int],
    config: AnalysisConfig,
    models: tuple[str, str] = GLOBAL_MODELS,
) -> MetricMaps:
    """The maps of ``config.metric`` for one capability and hook over ``layers`` (a :class:`Window` stays on them),
    computed as its row of :data:`analysis.rankings.RANKINGS` says.

    ``models``: (before, after); ``("base", "sft")`` gives the SFT − base maps of a run recorded with ``--base``
    (:mod:`analysis.base_compare`), whose ``sft``/``dpo`` arrays then hold base and SFT; ``("sft", "dpo_on_sft")``
    or ``("sft_on_dpo", "dpo")`` the local basis (:mod:`analysis.basis`; the settings then say ``basis`` and
    ``direction``).
    """
    row = ranking(config.metric)
    assert row.maps is not None  # AnalysisConfig accepts only the rankings that make maps
    maps: MetricMaps = entry(row.maps)(run, capability, hook, layers, config, models)
    return maps


class LayerMaps(NamedTuple):
    """One layer of a ranking's maps, from the two models' activations at it."""

    sft: np.ndarray  # (width,) each model's value per unit (a count, a mean)
    dpo: np.ndarray
    delta: np.ndarray  # (width,) the ranking's score, DPO − SFT
    pvalues: np.ndarray  # (width,)
    rms: np.ndarray  # (2,) root mean square activation of sft and dpo
    resampled: np.ndarray  # (n_resamples,) the layer's score (mean |Δ|) on each bootstrap resample; empty without


LayerKernel = Callable[[np.ndarray, np.ndarray, AnalysisConfig, Resamples], LayerMaps]


def activation_maps(
    run: RunReader,
    capability: str,
    hook: str,
    layers: Window | list[int],
    config: AnalysisConfig,
    models: tuple[str, str],
    per_layer: LayerKernel,
    settings: Callable[[AnalysisConfig, int], dict[str, Any]],
) -> MetricMaps:
    """The maps of a ranking computed from the recorded activations alone: both models' window read once, then
    ``per_layer`` on each layer's (N, width) blocks on a thread pool; ``settings(config, width)``: what the maps
    record of how they were computed, beside ``fdr_alpha`` (and the basis, for a local pair)."""
    window = layers if isinstance(layers, Window) else None
    layers = list(layers.layers) if isinstance(layers, Window) else list(layers)
    n = run.n_samples(capability)
    if n == 0:
        raise ProbeError(f"{run.path}: capability {capability!r} has no complete samples; nothing to analyse")
    sft = read_window(run, models[0], capability, hook, layers)
    dpo = read_window(run, models[1], capability, hook, layers)
    if sft.shape != dpo.shape:
        raise ProbeError(
            f"{run.path}: {models[0]} and {models[1]} activations of {capability}/{hook} differ in shape: "
            f"{sft.shape} vs {dpo.shape}"
        )
    resamples = Resamples.draw(n, config.stability_resamples, config.stability_seed)
    rows = map_layers(lambda i: per_layer(sft[:, i, :], dpo[:, i, :], config, resamples), len(layers))
    sft_map, dpo_map, delta, pvalues, rms, resampled = (np.stack([r[j] for r in rows]) for j in range(6))
    return MetricMaps(
        capability,
        hook,
        config.metric,
        layers,
        sft_map,
        dpo_map,
        delta,
        pvalues,
        bh_qvalues(pvalues),
        n,
        _with_basis({"fdr_alpha": config.fdr_alpha, **settings(config, sft.shape[2])}, models),
        layer_rms=rearrange(rms, "layer model -> model layer"),
        window=window,
        resampled_scores=resampled if resamples.n_resamples else None,
    )


def _with_basis(settings: dict[str, Any], models: tuple[str, str]) -> dict[str, Any]:
    """``settings`` plus the stored groups compared, and the basis and direction of a local pair."""
    if models != GLOBAL_MODELS:
        settings["models"] = list(models)
        basis, direction = basis_of_settings(settings)
        if direction is not None:
            settings.update(basis=basis, direction=direction)
    return settings


def _count_settings(config: AnalysisConfig, width: int) -> dict[str, Any]:
    return {
        "top_percent": config.top_percent,
        "k": k_for(width, config.top_percent),
        "normalize": config.normalize,
        "test": "mcnemar_exact",
    }


def _test_settings(config: AnalysisConfig, width: int) -> dict[str, Any]:  # noqa: ARG001 - a settings function
    return {"test": config.test}


def _count_divisor(config: AnalysisConfig, n_samples: int, width: int) -> int:
    """topk_count's normalisation: Δ count / N (``samples``) or / width (``width``, the authors' script)."""
    return n_samples if config.normalize == "samples" else width


def _rms(x: np.ndarray) -> float:
    """Root mean square of an (N, W) block, accumulated in float64."""
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def _count_layer(sft: np.ndarray, dpo: np.ndarray, config: AnalysisConfig, resamples: Resamples) -> LayerMaps:
    """Counts per model, their normalised difference, McNemar p-values, RMS, resamples' scores for one layer."""
    k = k_for(sft.shape[1], config.top_percent)
    in_sft, in_dpo = topk_mask(sft, k), topk_mask(dpo, k)
    count_sft = column_counts(in_sft)
    count_dpo = column_counts(in_dpo)
    both = column_counts(in_sft & in_dpo)
    pvalues = mcnemar_p(count_dpo - both, count_sft - both)
    divisor = _count_divisor(config, *sft.shape)
    resampled = np.zeros(0)
    if resamples.n_resamples:
        resampled = layer_scores(resamples.count_differences(in_sft, in_dpo) / divisor)
    delta = (count_dpo - count_sft).astype(np.float64) / divisor
    return LayerMaps(count_sft, count_dpo, delta, pvalues, np.array([_rms(sft), _rms(dpo)]), resampled)


def _mean_difference(sft: np.ndarray, dpo: np.ndarray) -> np.ndarray:
    """(N, W) float64 blocks -> (W,) mean DPO − mean SFT."""
    mean_sft, mean_dpo = (reduce(x, "n unit -> unit", "mean") for x in (sft, dpo))
    return np.asarray(mean_dpo - mean_sft)


def _paired_layer(
    sft: np.ndarray,
    dpo: np.ndarray,
    config: AnalysisConfig,
    resamples: Resamples,
    *,
    delta: Callable[[np.ndarray, np.ndarray], np.ndarray],
    resampled: Callable[[Resamples, np.ndarray], np.ndarray],
) -> LayerMaps:
    """Mean per model, ``delta(sft, dpo)`` of the (N, W) float64 blocks, paired p-values, RMS, and the layer score of
    ``resampled(resamples, dpo - sft)`` (each resample's Δ, (B, W)) for one layer."""
    sft64 = np.asarray(sft, dtype=np.float64)
    dpo64 = np.asarray(dpo, dtype=np.float64)
    mean_sft, mean_dpo = (reduce(x, "n unit -> unit", "mean") for x in (sft64, dpo64))
    scores = layer_scores(resampled(resamples, dpo64 - sft64)) if resamples.n_resamples else np.zeros(0)
    return LayerMaps(
        mean_sft,
        mean_dpo,
        delta(sft64, dpo64),
        paired_pvalues(sft64, dpo64, config.test),
        np.array([_rms(sft64), _rms(dpo64)]),
        scores,
    )


@dataclass(frozen=True)
class FromActivations:
    """How a ranking read off the recording is computed: ``per_layer`` on each layer's (N, width) blocks of the two
    models, and ``settings(config, width)``, what its maps record of how (:func:`activation_maps`). Called as a maps
    function, which is what a row of :data:`analysis.rankings.RANKINGS` names as its ``maps``."""

    per_layer: LayerKernel
    settings: Callable[[AnalysisConfig, int], dict[str, Any]] = _test_settings

    def __call__(
        self,
        run: RunReader,
        capability: str,
        hook: str,
        layers: Window | list[int],
        config: AnalysisConfig,
        models: tuple[str, str] = GLOBAL_MODELS,
    ) -> MetricMaps:
        return activation_maps(run, capability, hook, layers, config, models, self.per_layer, self.settings)


count_maps = FromActivations(_count_layer, _count_settings)  # membership counts in top k%, McNemar p-values
mean_diff_maps = FromActivations(  # mean activations and their paired difference, paired-test p-values
    partial(_paired_layer, delta=_mean_difference, resampled=Resamples.mean_differences)
)
effect_size_maps = FromActivations(  # mean activations and the d_z of their paired difference, paired-test p-values
    partial(_paired_layer, delta=effect_size_dz, resampled=Resamples.effect_sizes)
)


def save_maps(maps: list[MetricMaps], path: str | Path) -> Path:
    """Write maps to one HDF5 file, ``/{capability}/{hook}/{sft,dpo,delta,pvalues,qvalues,layers}``, atomically."""

    def fill(f: h5py.File) -> None:
        for m in maps:
            group = f.create_group(f"{m.capability}/{m.hook}")
            for name in _ARRAYS:
                group.create_dataset(name, data=getattr(m, name), compression="gzip", compression_opts=4)
            group.create_dataset("layers", data=np.asarray(m.layers, dtype=np.int32))
            if m.layer_rms is not None:
                group.create_dataset("layer_rms", data=m.layer_rms)
            if m.window is not None:
                group.attrs["window"] = json.dumps(to_json(m.window))
            group.attrs["metric"] = m.metric
            group.attrs["n_samples"] = m.n_samples
            group.attrs["settings"] = json.dumps(m.settings, sort_keys=True)

    write_hdf5(path, fill)
    return Path(path)


def load_maps(path: str | Path) -> list[MetricMaps]:
    """Read back what :func:`save_maps` wrote; a file that is not a maps file is a ProbeError naming it."""
    with read_hdf5(path, "maps file", "run `probe analyze` again") as f:
        return [_stored_maps(f[capability][hook], capability, hook) for capability in f for hook in f[capability]]


def _stored_maps(g: h5py.Group, capability: str, hook: str) -> MetricMaps:
    """One capability × hook as stored; a missing or misshapen member raises (the reader names the file)."""
    arrays = {name: array(g, name, 2) for name in _ARRAYS}
    layers = [int(i) for i in array(g, "layers", 1, "iu")]
    if any(a.shape != arrays["delta"].shape for a in arrays.values()) or len(layers) != len(arrays["delta"]):
        raise ValueError(f"{g.name}: the maps and layers differ in shape")
    n_samples = g.attrs["n_samples"]
    if not isinstance(n_samples, (int, np.integer)) or isinstance(n_samples, (bool, np.bool_)):
        raise TypeError(f"{g.name}: attribute 'n_samples' is not an integer")
    settings = json_attr(g, "settings")
    if not isinstance(settings, dict):
        raise TypeError(f"{g.name}: attribute 'settings' is not a JSON object")
    return MetricMaps(
        capability,
        hook,
        text_attr(g, "metric"),
        layers,
        n_samples=int(n_samples),
        settings=settings,
        layer_rms=array(g, "layer_rms", 2) if "layer_rms" in g else None,
        window=from_json(Window, json_attr(g, "window")) if "window" in g.attrs else None,
        **arrays,
    )

"""The ``attribution`` metric's maps: per-prompt gradient attribution (:mod:`probes.attribution`) as a ranking.

``delta`` is the mean over prompts of each unit's attribution, the first-order estimate of how
much *m* (default: the DPO model's log-probability of the reference answer) would change if
that DPO unit took the SFT model's value; positive: the SFT value would raise *m*. ``pvalues``
test the per-prompt attributions against 0 (one-sample t-test, or Wilcoxon with ``--test
wilcoxon``); ``sft``/``dpo`` are each model's mean activation over the attributed positions. The
bootstrap stability, neuron sets (``--rule top_k_abs`` takes the largest |Δ|) and plots are those
of every metric. The attribution pass runs on the first ``probe analyze --metric attribution`` of
a run and is kept in ``RUN_DIR/attribution_<m>.h5`` for the next.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from einops import reduce

from analysis.basis import GLOBAL_MODELS
from analysis.config import AnalysisConfig
from analysis.metric_maps import MetricMaps
from analysis.profile import layer_scores
from analysis.stability import Resamples
from analysis.stats import bh_qvalues, paired_pvalues
from analysis.window import Window
from core.errors import ProbeError
from core.hdf5 import array, json_attr, read_hdf5, text_attr
from probes.store import RunReader

if TYPE_CHECKING:
    from probes.distributed import World


def attribution_pass(run_dir: Path, config: AnalysisConfig, world: World) -> Path:
    """The attribution pass of ``config`` (:func:`probes.attribution.attribute_run`), its share of it on each rank of
    ``world``; the kept file's path (the ranking's prior pass, :mod:`analysis.rankings`)."""
    from probes.attribution import attribute_run

    return attribute_run(
        run_dir,
        m=config.attribution_m,
        positions=config.attribution_positions,
        dpo_file=config.dpo_data,
        max_rows=config.attribution_rows,
        world=world,
    )


def attribution_maps(
    run: RunReader,
    capability: str,
    hook: str,
    layers: Window | list[int],
    config: AnalysisConfig,
    models: tuple[str, str] = GLOBAL_MODELS,
) -> MetricMaps:
    """The ``attribution`` maps of ``capability`` × ``hook`` over ``layers`` (module doc), from the kept pass (made
    now, in this one process, if it is not there yet)."""
    from probes.distributed import World

    if models != GLOBAL_MODELS:
        raise ProbeError(f"attribution ranks the DPO units of the global pair, not {' vs '.join(models)}")
    window = layers if isinstance(layers, Window) else None
    wanted = list(layers.layers) if isinstance(layers, Window) else list(layers)
    # data-parallel only through analysis.run.prior_pass_first: here the file is there, or one process makes it
    attr, sft, dpo, settings = _read_pass(attribution_pass(run.run_dir, config, World()), capability, hook, wanted)
    settings = {"fdr_alpha": config.fdr_alpha, "test": f"{config.test} (attribution against 0)", **settings}
    n = attr.shape[0]
    resamples = Resamples.draw(n, config.stability_resamples, config.stability_seed)
    zeros = np.zeros_like(attr[:, 0, :])
    delta = reduce(attr, "n layer unit -> layer unit", "mean")
    pvalues = np.stack([paired_pvalues(zeros, attr[:, i, :], config.test) for i in range(len(wanted))])
    rms = np.array([[_rms(sft[:, i]) for i in range(len(wanted))], [_rms(dpo[:, i]) for i in range(len(wanted))]])
    resampled = (
        np.stack([layer_scores(resamples.mean_differences(attr[:, i, :])) for i in range(len(wanted))])
        if resamples.n_resamples
        else None
    )
    return MetricMaps(
        capability,
        hook,
        config.metric,
        wanted,
        reduce(sft, "n layer unit -> layer unit", "mean"),
        reduce(dpo, "n layer unit -> layer unit", "mean"),
        delta,
        pvalues,
        bh_qvalues(pvalues),
        n,
        settings,
        layer_rms=rms,
        window=window,
        resampled_scores=resampled,
    )


def _read_pass(
    path: Path, capability: str, hook: str, wanted: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """(attribution, sft, dpo), each (N, len(wanted), width) float64, and what the pass was, from its kept file."""
    from probes.attribution import ARRAYS

    with read_hdf5(path, "attribution file", "delete it and rerun: it is computed again") as f:
        stored = json_attr(f, "layers")
        missing = [i for i in wanted if i not in stored]
        if missing or f"{capability}/{hook}" not in f:
            raise ProbeError(
                f"{path}: no attribution for {capability}/{hook} at layer {missing[0] if missing else wanted[0]}"
            )
        slots = [stored.index(i) for i in wanted]
        group = f[f"{capability}/{hook}"]
        attr, sft, dpo = (array(group, name, 3)[:, slots, :].astype(np.float64) for name in ARRAYS)
        if not attr.shape == sft.shape == dpo.shape:
            raise ValueError(f"{group.name}: attribution, sft and dpo differ in shape")
        settings: dict[str, Any] = {"m": text_attr(f, "m"), "positions": text_attr(f, "positions")}
        if f.attrs.get("dpo_file"):
            settings["dpo_file"] = text_attr(f, "dpo_file")
    return attr, sft, dpo, settings


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x))))

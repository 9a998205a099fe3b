"""``explain_run``: what the changed units do, from a recorded and analysed run and the checkpoints it names.

For one capability and each hook point it (1) verifies the run's SFT and DPO models and finds
their base (:mod:`analysis.explain_models`); (2) measures every unit's weight change, SFT → DPO
and base → SFT (:mod:`analysis.weight_change`); (3) compares that ranking with the run's
activation ranking, layer by layer (:mod:`analysis.agreement`); (4) reads the DPO − SFT mean
difference of every window layer through the DPO model's final norm and unembedding
(:mod:`analysis.readout`); (5) writes a card per top unit of the saved analysis (ranked as
``probe analyze`` ranked them: |Δ| of its metric, within its window, nonzero only; in the analysis's basis,
global or local, :mod:`analysis.basis`: pass ``--analysis RUN_DIR/analysis/local`` for the local one). Outputs,
written together into the run's analysis directory (or ``out_dir``), beside the activation maps
(:class:`core.run_dir.AnalysisDir` names them)::

    weight change                            /{sft_dpo,base_sft}/{hook}/{relative,absolute,layers,components/*}
    explain record, per capability × hook    the ExplainRecord (analysis.explain_record)
    explain page, per capability × hook      the cards as one page
    plots/weight_change_<hook>.html          the weight-change maps (log10 relative change)
    plots/explain_<capability>_<hook>_agreement.html   per-layer Spearman ρ, both transitions

Mistakes are one :class:`~core.errors.ProbeError` before any weight is read: no analysis
(``probe analyze`` first), a capability or hook it did not analyse, ``top`` beyond the units
it ranked, models missing or not the recorded ones, shapes that differ.

Example:
    >>> result = explain_run("runs/latest", ExplainConfig(capability="multi_turn", top=10))  # doctest: +SKIP
    >>> card = result.records["mlp_post"].cards[0]  # doctest: +SKIP
    >>> promoted = [t.token for t in card.readout.promoted[:3]]  # doctest: +SKIP
    >>> card.layer, card.unit, card.ranks["weights_sft_dpo"], promoted  # doctest: +SKIP
    (22, 699, 15911, ['CreateModel', 'ournal', 'paralleled'])
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from einops import rearrange

from access.hook_points import validate_hook
from analysis.agreement import layer_agreement, top_overlap
from analysis.checkpoint import config_summary
from analysis.config import TESTS, AnalysisConfig
from analysis.explain_config import ExplainConfig
from analysis.explain_html import agreement_figure, page_html
from analysis.explain_models import ModelSet, open_models
from analysis.explain_record import Agreement, ExplainRecord, LayerReadOut, NeuronCard, PromptHit
from analysis.maps import compute_maps, load_maps, read_window
from analysis.metric_maps import MetricMaps
from analysis.profile import ranked_units
from analysis.rankings import activation_metrics, entry, ranking
from analysis.readout import Lens, TokenText, mean_difference, read_out, unit_directions
from analysis.summary import AnalysisSummary
from analysis.weight_change import UnitChange, save_weight_change, weight_change, weight_change_figure
from core.errors import ProbeError
from core.pair_dirs import PairDirs
from core.run_dir import AnalysisDir, RunDir
from core.stats import paired_bootstrap_ci
from probes.store import RunReader


@dataclass
class ExplainResult:
    """One record per hook point, the files written and the notes to print."""

    records: dict[str, ExplainRecord]
    out_dir: Path
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Context:
    """What every card of one run needs, loaded once."""

    run: RunReader
    capability: str
    models: ModelSet
    lens: Lens
    decode: TokenText
    changes: dict[str, dict[str, UnitChange]]  # transition -> hook -> change
    tokens: int
    prompts: int
    seed: int


def explain_run(run_dir: str | Path, config: ExplainConfig = ExplainConfig()) -> ExplainResult:
    """Explain the top ``config.top`` units of ``config.capability`` at each analysed hook point (module doc;
    :class:`analysis.explain_config.ExplainConfig` says what each setting means); writes the outputs."""
    from core.atomic import file_set

    run_path = Path(run_dir)
    saved_dir = AnalysisDir(config.analysis_dir) if config.analysis_dir is not None else RunDir(run_path).analysis
    analysis = saved_dir.root
    target = Path(config.out_dir) if config.out_dir is not None else analysis
    with RunReader(run_path) as run:
        summary = _saved_summary(run_path, saved_dir)
        capability = _capability(summary, config.capability)
        wanted = _hooks(summary, capability, config.hooks, run)
        saved = _saved_maps(analysis / summary.maps, capability, wanted, summary.run_dir)
        for maps in saved.values():
            _check_top(maps, config.top)
        with open_models(run, config.models) as models:
            context = _context(run, capability, models, wanted, config.tokens, config.prompts, config.seed)
            records = {hook: _record(context, saved[hook], summary, config.top, config.permutations) for hook in wanted}
    result = ExplainResult(records, target, notes=list(models.notes))
    try:
        with file_set(target) as staged:
            _write(result, context, staged.folder, config.plots, config.png)
    except OSError as exc:
        raise ProbeError(
            f"{target}: writing the explanation failed ({exc.strerror or exc}); nothing there was replaced: "
            "free space (or fix permissions) and rerun"
        ) from None
    return result


def neuron_card(
    run_dir: str | Path,
    maps: MetricMaps,
    layer: int,
    unit: int,
    *,
    models: PairDirs | None = None,
    tokens: int = 10,
    prompts: int = 3,
    seed: int = 0,
) -> NeuronCard:
    """One unit's card, ranked against ``maps`` (e.g. the heatmap notebook's); writes nothing. ``models``: where the
    run's checkpoints are now, when they moved."""
    if layer not in maps.layers or not 0 <= unit < maps.width:
        raise ProbeError(
            f"layer {layer}, unit {unit} is not in the map (layers {maps.layers[0]}-{maps.layers[-1]}, "
            f"units 0-{maps.width - 1})"
        )
    with RunReader(run_dir) as run, open_models(run, models) as checkpoints:
        context = _context(run, maps.capability, checkpoints, [maps.hook], tokens, prompts, seed)
        return _cards(context, maps, _other_maps(context, maps), [(maps.layers.index(layer), unit)])[0]


# --- inputs ----------------------------------------------------------------------------------------------------------


def _saved_summary(run_path: Path, analysis: AnalysisDir) -> AnalysisSummary:
    path = analysis.summary
    if not path.is_file():
        raise ProbeError(
            f"{run_path}: no analysis here ({path} is missing); run `probe analyze {run_path}` first"
            " (or pass --analysis DIR, where it wrote)"
        )
    return AnalysisSummary.load(path)


def _capability(summary: AnalysisSummary, capability: str | None) -> str:
    if capability is not None:
        return capability.strip()
    analysed = list(summary.capabilities)
    if len(analysed) != 1:
        raise ProbeError(
            f"the analysis holds {len(analysed)} capabilities ({', '.join(analysed) or 'none'}); choose one with -c"
        )
    return analysed[0]


def _hooks(summary: AnalysisSummary, capability: str, hooks: list[str] | None, run: RunReader) -> list[str]:
    analysed = summary.capabilities.get(capability)
    if not analysed:
        raise ProbeError(_not_analysed(summary, capability, run))
    if not hooks:
        return list(analysed)
    wanted = [validate_hook(h.strip()) for item in hooks for h in item.split(",") if h.strip()]
    for hook in wanted:
        summary.hook(capability, hook)  # one line naming what was analysed
    return list(dict.fromkeys(wanted))


def _not_analysed(summary: AnalysisSummary, capability: str, run: RunReader) -> str:
    """What to run for a capability the analysis lacks: analyse it, or first record it when the run has not."""
    from shlex import quote

    where = quote(str(run.run_dir))
    analyse = f"`probe analyze {where} -c {quote(capability)}`"
    recorded = run.capabilities()
    if capability in recorded:
        have = ", ".join(summary.capabilities) or "none"
        return f"-c {capability}: not analysed in this run (analysed: {have}); run {analyse}"
    settings = run.settings
    given = {"--sft": settings.sft_dir, "--dpo": settings.dpo_dir, "--base": settings.base_dir}
    given["--data"] = settings.data_file
    models = "".join(f" {flag} {quote(value)}" for flag, value in given.items() if value)
    return (
        f"-c {capability}: not recorded in this run (recorded: {', '.join(recorded) or 'none'}); record it with "
        f"`probe run -c {quote(capability)}{models} --out {where}` (and any other option the run was recorded "
        f"with), then run {analyse}"
    )


def _saved_maps(path: Path, capability: str, hooks: list[str], run_dir: str) -> dict[str, MetricMaps]:
    found = {m.hook: m for m in load_maps(path) if m.capability == capability}
    missing = [h for h in hooks if h not in found]
    if missing:
        raise ProbeError(f"{path}: no {capability}/{missing[0]} maps; rerun `probe analyze {run_dir}`")
    return {h: found[h] for h in hooks}


def _check_top(maps: MetricMaps, top: int) -> None:
    ranked = int(np.count_nonzero(maps.delta))
    if top < 1:
        raise ProbeError(f"--top {top}: expected a positive number of units")
    if top > ranked:
        raise ProbeError(
            f"--top {top}: the analysis of {maps.capability}/{maps.hook} ranks only {ranked} units (nonzero Δ of "
            f"{maps.metric} in layers {maps.layers[0]}-{maps.layers[-1]}, {maps.delta.size} units in all); "
            f"use --top {ranked} or less"
        )


def _context(
    run: RunReader, capability: str, models: ModelSet, hooks: list[str], tokens: int, prompts: int, seed: int
) -> _Context:
    changes = {"sft_dpo": weight_change(models.sft, models.dpo, hooks, "sft_dpo")}
    if models.base is not None:
        changes["base_sft"] = weight_change(models.base, models.sft, hooks, "base_sft")
    return _Context(
        run, capability, models, Lens.of(models.dpo), TokenText(models.dpo.dir, "--dpo"), changes, tokens, prompts, seed
    )


def _other_maps(context: _Context, maps: MetricMaps, test: str | None = None) -> dict[str, MetricMaps]:
    """The given maps and the activation metrics' over the same window and prompts (for the ranks; attribution, a
    gradient pass, only when it is the analysis's own); ``test``: the paired test of mean_diff/effect_size (the
    analysis's; default the map's own, else t)."""
    test = test or str(maps.settings.get("test"))
    out = {maps.metric: maps}
    for metric in activation_metrics():
        if metric != maps.metric:
            config = AnalysisConfig(
                metric=metric,
                top_percent=float(maps.settings.get("top_percent", AnalysisConfig.top_percent)),
                test=test if test in TESTS else AnalysisConfig.test,
                stability_resamples=0,
            )
            out[metric] = compute_maps(context.run, maps.capability, maps.hook, maps.layers, config, _models(maps))
    return out


def _models(maps: MetricMaps) -> tuple[str, str]:
    """The stored groups a map compares: sft and dpo (global basis), or a local pair (:mod:`analysis.basis`)."""
    before, after = maps.settings.get("models", ("sft", "dpo"))
    return str(before), str(after)


# --- one hook point --------------------------------------------------------------------------------------------------


def _record(
    context: _Context, maps: MetricMaps, summary: AnalysisSummary, top: int, permutations: int
) -> ExplainRecord:
    hook = maps.hook
    units = [(int(r), int(u)) for r, u in ranked_units(maps, maps.delta != 0)[:top]]
    cards = _cards(context, maps, _other_maps(context, maps, str(summary.settings.get("test", ""))), units)
    window = maps.window or summary.hook(maps.capability, hook).window
    assert window is not None
    return ExplainRecord(
        run_dir=summary.run_dir,
        capability=maps.capability,
        hook=hook,
        metric=maps.metric,
        analysis_settings=dict(summary.settings),
        window=window,
        position=context.run.settings.position,
        n_samples=maps.n_samples,
        models=context.models.fingerprints(),
        lens=_lens_record(context),
        cards=cards,
        mean_difference=_mean_difference(context, maps),
        agreement=[
            _agreement(maps, by_hook[hook], top, permutations, context.seed) for by_hook in context.changes.values()
        ],
        notes=list(context.models.notes),
    )


def _rank_maps(values: np.ndarray) -> np.ndarray:
    """1-based ranks of a (layers, units) map, largest first,
    ties by layer then unit (the ranking rule of analysis.profile)."""
    rows, units = np.indices(values.shape)
    flat = "layer unit -> (layer unit)"
    order = np.lexsort((rearrange(units, flat), rearrange(rows, flat), -rearrange(values, flat)))
    ranks = np.empty(values.size, dtype=np.int64)
    ranks[order] = np.arange(1, values.size + 1)
    return rearrange(ranks, "(layer unit) -> layer unit", layer=values.shape[0], unit=values.shape[1])


def _cards(
    context: _Context, maps: MetricMaps, all_maps: dict[str, MetricMaps], units: list[tuple[int, int]]
) -> list[NeuronCard]:
    ranks = {m: _rank_maps(np.abs(v.delta)) for m, v in all_maps.items()}
    for transition, by_hook in context.changes.items():
        change = by_hook[maps.hook]
        window_rows = [change.layers.index(layer) for layer in maps.layers]
        ranks[f"weights_{transition}"] = _rank_maps(
            np.nan_to_num(change.relative[window_rows], posinf=np.finfo(np.float64).max)
        )
    acts = {m: read_window(context.run, m, maps.capability, maps.hook, maps.layers) for m in ("sft", "dpo")}
    before, after = _models(maps)
    compared = {
        m: acts[m] if m in acts else read_window(context.run, m, maps.capability, maps.hook, maps.layers)
        for m in (before, after)
    }
    pairs = [(maps.layers[r], u) for r, u in units]
    readouts = read_out(
        context.lens, unit_directions(context.models.dpo, maps.hook, pairs), context.tokens, context.decode
    )
    samples = context.run.samples(maps.capability)
    unit_ci = _unit_ci(maps.metric)
    cards = []
    for (row, unit), readout in zip(units, readouts, strict=True):
        low, high = unit_ci(compared[before][:, row], compared[after][:, row], unit, maps, context.seed)
        cards.append(
            NeuronCard(
                layer=maps.layers[row],
                unit=unit,
                ranks={name: int(r[row, unit]) for name, r in ranks.items()},
                delta=float(maps.delta[row, unit]),
                ci_low=low,
                ci_high=high,
                p=float(maps.pvalues[row, unit]),
                q=float(maps.qvalues[row, unit]),
                sft=float(maps.sft[row, unit]),
                dpo=float(maps.dpo[row, unit]),
                weight_change={
                    t: by_hook[maps.hook].unit(maps.layers[row], unit) for t, by_hook in context.changes.items()
                },
                readout=readout,
                top_prompts=_top_prompts(acts, row, unit, samples, context.prompts),
            )
        )
    return cards


UnitCI = Callable[[np.ndarray, np.ndarray, int, MetricMaps, int], tuple[float, float]]


def _unit_ci(metric: str) -> UnitCI:
    """How ``metric``'s row computes the 95% CI of one unit's Δ on a card (:data:`analysis.rankings.RANKINGS`)."""
    target = ranking(metric).unit_ci
    found: UnitCI = entry(target) if target else _no_ci
    return found


def _no_ci(*_: object) -> tuple[float, float]:
    """A ranking whose row names no CI function: no interval."""
    return math.nan, math.nan


def count_ci(sft: np.ndarray, dpo: np.ndarray, unit: int, maps: MetricMaps, seed: int) -> tuple[float, float]:
    """``topk_count``: 95% percentile bootstrap CI of the unit's membership difference, resampling prompts, scaled as
    the map's Δ is (``sft``/``dpo``: (N, width) blocks of the unit's layer)."""
    from analysis.topk import topk_mask

    k = int(maps.settings["k"])
    before, after = topk_mask(sft, k)[:, unit].astype(float), topk_mask(dpo, k)[:, unit].astype(float)
    scale = 1.0 if maps.settings.get("normalize", "samples") == "samples" else sft.shape[0] / maps.width
    low, high = paired_bootstrap_ci(before, after, seed=seed)
    return low * scale, high * scale


def mean_diff_ci(
    sft: np.ndarray,
    dpo: np.ndarray,
    unit: int,
    maps: MetricMaps,  # noqa: ARG001 - the unit_ci interface
    seed: int,
) -> tuple[float, float]:
    """``mean_diff``: 95% paired bootstrap CI of the unit's mean difference."""
    return paired_bootstrap_ci(sft[:, unit].astype(np.float64), dpo[:, unit].astype(np.float64), seed=seed)


def dz_ci(
    sft: np.ndarray,
    dpo: np.ndarray,
    unit: int,
    maps: MetricMaps,  # noqa: ARG001 - the unit_ci interface
    seed: int,
) -> tuple[float, float]:
    """``effect_size``: 95% percentile bootstrap CI of the unit's d_z (attribution's cards use it too: the d_z of the
    unit's activation difference)."""
    return _dz_ci(dpo[:, unit].astype(np.float64) - sft[:, unit].astype(np.float64), seed)


def _dz_ci(diff: np.ndarray, seed: int) -> tuple[float, float]:
    from scipy import stats

    from analysis.stats import dz_of_differences

    if diff.size < 3 or np.all(diff == diff[0]):
        value = float(dz_of_differences(rearrange(diff, "n -> n 1"))[0])
        return value, value
    result = stats.bootstrap(
        (diff,),
        lambda d, axis: _dz(d, axis),
        confidence_level=0.95,
        n_resamples=10_000,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def _dz(d: np.ndarray, axis: int) -> np.ndarray:
    sd = d.std(axis=axis, ddof=1)
    return np.where(sd > 0, d.mean(axis=axis) / np.where(sd > 0, sd, 1.0), 0.0)


def _top_prompts(acts: dict[str, np.ndarray], row: int, unit: int, samples: Any, n: int) -> dict[str, list[PromptHit]]:
    """Per model, the ``n`` prompts where the unit is most active there (signed, descending; ties by row)."""
    values = {m: acts[m][:, row, unit].astype(np.float64) for m in acts}
    flat = [" ".join(p.split()) for p in samples.prompts]
    common = len(common_end(flat))
    out: dict[str, list[PromptHit]] = {}
    for model, own in values.items():
        order = np.lexsort((np.arange(own.size), -own))[:n]
        out[model] = [
            PromptHit(
                int(i),
                int(samples.sample_ids[i]),
                samples.tasks[i],
                float(values["sft"][i]),
                float(values["dpo"][i]),
                _tail(flat[i]),
                _tail(flat[i][: len(flat[i]) - common]),
            )
            for i in order
        ]
    return out


def common_end(texts: list[str]) -> str:
    """The longest end all ``texts`` share (the capability's fixed last turn, say), never a whole text.

    >>> common_end(["who are you? Please answer.", "where is it? Please answer."])
    '? Please answer.'
    """
    if len(texts) < 2:
        return ""
    shared = os.path.commonprefix([t[::-1] for t in texts])[::-1]  # noqa: RUF071 - text, compared character by character as meant
    limit = min(len(t) for t in texts) - 1
    return shared if len(shared) <= limit else shared[len(shared) - max(limit, 0) :]


def _tail(text: str, width: int = 160) -> str:
    """The last ``width`` characters of a flattened prompt."""
    return text if len(text) <= width else "…" + text[-width:]


def _mean_difference(context: _Context, maps: MetricMaps) -> list[LayerReadOut]:
    vectors = mean_difference(
        context.run, maps.capability, maps.hook, maps.layers, context.models.sft, context.models.dpo
    )
    readouts = read_out(context.lens, vectors, context.tokens, context.decode)
    return [
        LayerReadOut(layer, float(np.linalg.norm(v)), r)
        for layer, v, r in zip(maps.layers, vectors, readouts, strict=True)
    ]


def _agreement(maps: MetricMaps, change: UnitChange, top: int, permutations: int, seed: int) -> Agreement:
    weights = change.relative[[change.layers.index(layer) for layer in maps.layers]]
    return Agreement(
        change.transition,
        layer_agreement(maps.delta, weights, maps.layers, permutations, seed),
        top_overlap(maps.delta, weights, maps.layers, top),
    )


def _lens_record(context: _Context) -> dict[str, Any]:
    """Which checkpoint's lens was read, how it is built, and how much SFT → DPO moved it."""
    from analysis.checkpoint import LAYOUT
    from analysis.weight_change import tensor_change

    sft, dpo = context.models.sft, context.models.dpo
    drift = {name: tensor_change(sft, dpo, name) for name in dict.fromkeys((dpo.unembedding_name, LAYOUT.final_norm))}
    return {
        "model": "dpo",
        **config_summary(dpo),
        "relative_change_sft_dpo": drift,
        "ignores": "the final norm's 1/rms (a positive per-token scalar) and every layer after the unit's",
    }


# --- outputs ---------------------------------------------------------------------------------------------------------


def _write(result: ExplainResult, context: _Context, folder: Path, plots: bool, png: bool | None) -> None:
    from analysis.plots import write_figures

    staged, final = AnalysisDir(folder), AnalysisDir(result.out_dir)
    changes = [c for by_hook in context.changes.values() for c in by_hook.values()]
    save_weight_change(changes, staged.weight_change, context.models.fingerprints())
    figures = {}
    if plots:
        for hook, record in result.records.items():
            figures[f"weight_change_{hook}"] = weight_change_figure(
                [by_hook[hook] for by_hook in context.changes.values()], record.window.layers
            )
            figures[f"{final.explain_record(record.capability, hook).stem}_agreement"] = agreement_figure(record)
    written, notes = write_figures(figures, staged.plots, png) if figures else ([], [])
    result.notes.extend(notes)
    written_names = {p.name for p in written}
    result.files.append(final.weight_change)
    for hook, record in list(result.records.items()):
        stem = final.explain_record(record.capability, hook).stem
        files = {
            "record": final.explain_record(record.capability, hook).name,
            "page": final.explain_page(record.capability, hook).name,
            "weight_change": final.weight_change.name,
        }
        for key, name in (
            ("weight_change_plot", f"weight_change_{hook}.html"),
            ("agreement_plot", f"{stem}_agreement.html"),
        ):
            if name in written_names:
                files[key] = f"{final.plots.name}/{name}"
        record = replace(record, files=files)
        result.records[hook] = record
        record.save(folder / files["record"])
        (folder / files["page"]).write_text(page_html(record), encoding="utf-8")
        result.files += [result.out_dir / files["record"], result.out_dir / files["page"]]
    result.files += [final.plots / p.name for p in written]

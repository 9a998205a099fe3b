"""``analyze_run``: from a run directory to maps, neuron sets, plots and the summary.

This is the one entry point the CLI (``probe analyze``), ``probe run`` and the
interventions' ranking fallback call. It reads the run's recording through
:class:`probes.store.RunReader` (read-only; nothing already written is touched) and
writes into the run's analysis directory (or ``out_dir``), whose file names
:class:`core.run_dir.AnalysisDir` gives::

    summary          the basis (global: DPO vs SFT on the same prompt; local: each layer on the same input,
                     written to RUN_DIR/analysis/local by default, :mod:`analysis.basis`); per capability × hook:
                     the window used and why, top layers (and how stable their ranking is
                     under a bootstrap of the prompts) and units; settings, warnings
    maps             /{capability}/{hook}/{sft,dpo,delta,pvalues,qvalues,layers}, one file per metric
    base maps        the same for SFT − base, in a run recorded with --base (analysis.base_compare); the overlap and
                     correlation with DPO − SFT are ``base`` in the summary
    neuron sets      one per capability × hook: the selected units (access.units format)
    plots/           <capability>_<hook>_<metric>_maps.html|png, ..._profile.html|png, all_<hook>_<metric>.html|png,
                     and plotly.min.js, shared by the HTML files (offline)

The files are written as one set (:func:`core.atomic.file_set`): into a staging folder first,
then renamed into place together, with the neuron set of a capability × hook that no longer
selects any unit removed in the same step; an analysis that fails, fills the disk or is
interrupted leaves the previous analysis exactly as it was, never new maps or neuron sets
beside an old summary. The results are deterministic (no timestamps, stable tie
rules), so two analyses of one run give byte-identical summaries.

Example:
    >>> config = AnalysisConfig(metric="effect_size", layers="12-31")
    >>> result = analyze_run("runs/demo", config, capabilities=["multi_turn"], plots=False)    # doctest: +SKIP
    >>> result.summary.hook("multi_turn", "mlp_out").top_layers[0]                   # doctest: +SKIP
    RankedLayer(rank=1, layer=19, mean_abs_delta=0.031, share_significant=0.12, n_significant=491, ...)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import analysis.plots as plots_module
from access.hook_points import validate_hook
from analysis.base_compare import BaseComparison, compare_maps
from analysis.basis import analysis_dir, basis_models
from analysis.config import AnalysisConfig
from analysis.maps import compute_maps, save_maps
from analysis.metric_maps import MetricMaps
from analysis.plots import faceted_figure, maps_figure, profile_figure, write_figures
from analysis.profile import layer_profile, layer_scores, top_units
from analysis.rankings import entry, metrics, ranking
from analysis.select import select_neurons
from analysis.stability import LayerStability, layer_stability
from analysis.summary import AnalysisSummary, HookSummary
from analysis.window import format_layers, model_depth, resolve_window
from core.atomic import StagedSet, file_set
from core.capabilities import parse_capabilities
from core.errors import ProbeError
from core.run_dir import AnalysisDir
from probes.store import MODELS, RunReader


@dataclass
class AnalysisOutputs:
    """Every output of an analysis but its summary: maps in memory and paths, filled in as the set is written."""

    out_dir: Path
    summary_path: Path
    maps_path: Path
    maps: dict[tuple[str, str], MetricMaps] = field(default_factory=dict)
    neuron_sets: dict[tuple[str, str], Path] = field(default_factory=dict)
    plots: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    stability: dict[tuple[str, str], LayerStability] = field(default_factory=dict)
    # SFT − base, in a run recorded with --base
    base_maps: dict[tuple[str, str], MetricMaps] = field(default_factory=dict)
    base_comparison: dict[tuple[str, str], BaseComparison] = field(default_factory=dict)


@dataclass(kw_only=True)
class AnalysisResult(AnalysisOutputs):
    """What an analysis produced: every output, and the summary built from them last (as in ``summary_path``)."""

    summary: AnalysisSummary


def prior_pass_first(run_dir: str | Path, config: AnalysisConfig) -> bool:
    """Under torchrun / accelerate launch with several processes, a metric with a prior pass (attribution's gradient
    pass, :mod:`analysis.rankings`) runs that pass data-parallel first, every rank its share; then rank 0 alone goes on
    to the maps (False on the others). One process, or a metric without one: nothing to do here (True)."""
    from probes.distributed import world_from_env

    prior = ranking(config.metric).prior
    world = world_from_env()
    if prior is None or prior.run is None or not world.distributed:
        return True
    entry(prior.run)(Path(run_dir), config, world)
    return world.is_main


def analyze_run(
    run_dir: str | Path,
    config: AnalysisConfig = AnalysisConfig(),
    *,
    capabilities: str | list[str] | tuple[str, ...] | None = None,
    hooks: str | list[str] | tuple[str, ...] | None = None,
    out_dir: str | Path | None = None,
    plots: bool = True,
    png: bool | None = None,
) -> AnalysisResult:
    """Analyse a recorded run as ``config`` says (metric, window, neuron selection, bootstrap; see
    :class:`analysis.config.AnalysisConfig`); see the module docstring for the files written.

    ``capabilities``/``hooks``: None = everything recorded. ``out_dir``: None = ``RUN_DIR/analysis``
    (``RUN_DIR/analysis/local`` for ``config.basis == "local"``, see :mod:`analysis.basis`).
    ``plots``: write the figures; ``png``: also as PNG (None = when Chromium exists).
    """
    if plots and png is True and not plots_module.chromium_available():
        raise ProbeError(
            "--png: PNG export needs Chromium (kaleido renders with it); install it (`make chromium`) or pass --no-png"
        )
    run_path = Path(run_dir)
    layout = analysis_dir(run_path, config.basis, out_dir)
    target = layout.root
    with RunReader(run_path) as run:
        selected = _capabilities(run, capabilities)
        hashes = {m: str(run.model_info(m).get("weights_sha256", "")) for m in MODELS}
        n_model = model_depth(run, (layer for c in selected for h in run.hooks(c) for layer in run.layers(c, h)))
        warnings: list[str] = []
        all_maps: dict[tuple[str, str], MetricMaps] = {}
        for cap in selected:
            for hook in _hooks(run, cap, hooks):
                window = resolve_window(config.layers, n_model, run.layers(cap, hook))
                warnings.extend(n for n in window.warnings if n not in warnings)
                models = basis_models(run, cap, hook, config.basis, config.direction)
                all_maps[(cap, hook)] = compute_maps(run, cap, hook, window, config, models)
        base_maps = _base_maps(run, all_maps, config)
    result = AnalysisOutputs(target, layout.summary, layout.maps(config.metric), all_maps, warnings=warnings)
    result.base_maps = base_maps
    result.base_comparison = {
        key: replace(
            compare_maps(maps, all_maps[key], config.top_k, seed=config.stability_seed),
            sft_minus_base_maps=layout.base_maps(config.metric).name,
        )
        for key, maps in base_maps.items()
    }
    if config.stability_resamples:
        result.stability = {key: _stability(maps, config) for key, maps in all_maps.items()}
    try:
        with file_set(target) as staged:
            summary = _write_set(result, config, str(run_path), hashes, staged, png if plots else False, plots)
    except OSError as exc:
        raise ProbeError(
            f"{target}: writing the analysis failed ({exc.strerror or exc}); nothing there was replaced, the previous "
            "analysis is as it was: free space (or fix permissions) and rerun"
        ) from None
    return AnalysisResult(**vars(result), summary=summary)


def _write_set(
    result: AnalysisOutputs,
    config: AnalysisConfig,
    run_dir: str,
    hashes: dict[str, str],
    staged: StagedSet,
    png: bool | None,
    plots: bool,
) -> AnalysisSummary:
    """Every output, written below ``staged.folder`` (:func:`core.atomic.file_set` moves them into place together);
    returns the summary, written last."""
    save_maps(list(result.maps.values()), staged.folder / result.maps_path.name)
    if result.base_maps:
        save_maps(list(result.base_maps.values()), AnalysisDir(staged.folder).base_maps(config.metric))
    _write_neuron_sets(result, config, run_dir, hashes, staged)
    if plots:
        _write_plots(result, config, png, staged.folder)
    summary = _summary(result, config, run_dir, hashes)
    summary.save(staged.folder / result.summary_path.name)
    return summary


def _base_maps(
    run: RunReader, maps: dict[tuple[str, str], MetricMaps], config: AnalysisConfig
) -> dict[tuple[str, str], MetricMaps]:
    """SFT − base maps over the same windows, when the run recorded a base (only for the metrics computed from the
    recording alone: a prior pass such as attribution's ranks DPO units only; nor in the local basis: SFT − base is a
    global comparison)."""
    if "base" not in run.models() or not ranking(config.metric).from_activations or config.basis != "global":
        return {}
    plain = replace(config, stability_resamples=0)
    return {
        (cap, hook): compute_maps(run, cap, hook, m.window or m.layers, plain, models=("base", "sft"))
        for (cap, hook), m in maps.items()
        if hook in run.hooks(cap, "base")
    }


def _capabilities(run: RunReader, names: str | list[str] | tuple[str, ...] | None) -> list[str]:
    recorded = run.capabilities()
    if not recorded:
        raise ProbeError(f"{run.path}: no recorded samples in this run; record activations first with `probe run`")
    wanted = [c.value for c in parse_capabilities(names)] if names is not None else []
    items = names.split(",") if isinstance(names, str) else list(names or [])
    if names is None or any(i.strip().lower() == "all" for n in items for i in n.split(",")):
        return recorded  # "all" means all that were recorded
    missing = [c for c in wanted if c not in recorded]
    if missing:
        raise ProbeError(
            f"capability {missing[0]!r} was not recorded in {run.run_dir} (recorded: {', '.join(recorded)})"
        )
    return wanted


def _hooks(run: RunReader, capability: str, names: str | list[str] | tuple[str, ...] | None) -> list[str]:
    recorded = [h for h in run.hooks(capability, "sft") if h in run.hooks(capability, "dpo")]
    if not recorded:
        raise ProbeError(f"{run.path}: capability {capability!r} has no activations recorded for both models")
    if names is None:
        return recorded
    items = names.split(",") if isinstance(names, str) else [p for n in names for p in n.split(",")]
    wanted = [validate_hook(h.strip()) for h in items if h.strip()]
    for hook in wanted:
        if hook not in recorded:
            raise ProbeError(
                f"--hook {hook}: not recorded for capability {capability!r} in {run.run_dir} (recorded: "
                f"{', '.join(recorded)})"
            )
    return wanted


def _stability(maps: MetricMaps, config: AnalysisConfig) -> LayerStability:
    assert maps.resampled_scores is not None  # compute_maps scores every resample when stability_resamples > 0
    return layer_stability(maps.layers, layer_scores(maps.delta), maps.resampled_scores, config.stability_seed)


def _write_neuron_sets(
    result: AnalysisOutputs, config: AnalysisConfig, run_dir: str, hashes: dict[str, str], staged: StagedSet
) -> None:
    for (cap, hook), maps in result.maps.items():
        chosen = select_neurons(maps, config.rule, config.top_k, config.threshold, config.fdr_alpha, run_dir, hashes)
        final = AnalysisDir(result.out_dir).neuron_set(cap, hook)
        if len(chosen) == 0:
            result.warnings.append(f"{cap}/{hook}: no unit qualifies under --rule {config.rule}; no neuron set written")
            staged.obsolete.append(final)  # an older set must not outlive the analysis that replaced it
            continue
        chosen.save(AnalysisDir(staged.folder).neuron_set(cap, hook))
        result.neuron_sets[(cap, hook)] = final
        quiet_note = _quiet_units_note(maps, [n.layer for n in chosen.neurons], config.metric)
        if quiet_note:
            result.warnings.append(f"{cap}/{hook}: {quiet_note}")


def _quiet_units_note(maps: MetricMaps, unit_layers: list[int], metric: str, ratio: float = 0.01) -> str | None:
    """A warning when most selected units sit in layers whose activations are < ``ratio`` of the loudest layer's."""
    quiet = set(maps.quiet_layers(ratio))
    n_quiet = sum(layer in quiet for layer in unit_layers)
    if not unit_layers or n_quiet * 2 <= len(unit_layers):
        return None
    by_size = " or ".join(m for m in metrics() if ranking(m).by_size)
    advice = "" if ranking(metric).by_size else f" (scale-blind metric; --metric {by_size} ranks by size)"
    return (
        f"{n_quiet} of {len(unit_layers)} selected units sit in layers {format_layers(sorted(quiet))}, "
        f"whose RMS activation is below {ratio:.0%} of layer {maps.loudest_layer()}'s: "
        f"scaling them may change nothing downstream{advice}"
    )


def _write_plots(result: AnalysisOutputs, config: AnalysisConfig, png: bool | None, folder: Path) -> None:
    figures = {}
    for (cap, hook), maps in result.maps.items():
        figures[AnalysisDir(folder).maps_plot(cap, hook, config.metric).stem] = maps_figure(maps, config.reorder)
        figures[f"{cap}_{hook}_{config.metric}_profile"] = profile_figure(maps, config.fdr_alpha)
    for hook in dict.fromkeys(h for _, h in result.maps):
        figures[f"all_{hook}_{config.metric}"] = faceted_figure(
            [m for (_, h), m in result.maps.items() if h == hook], config.reorder
        )
    paths, notes = write_figures(figures, AnalysisDir(folder).plots, png)
    result.plots.extend(AnalysisDir(result.out_dir).plots / p.name for p in paths)
    result.warnings.extend(notes)


def _summary(result: AnalysisOutputs, config: AnalysisConfig, run_dir: str, hashes: dict[str, str]) -> AnalysisSummary:
    per_cap: dict[str, dict[str, HookSummary]] = {}
    for (cap, hook), maps in result.maps.items():
        significant = maps.significant(config.fdr_alpha)
        neuron_set = result.neuron_sets.get((cap, hook))
        per_cap.setdefault(cap, {})[hook] = HookSummary(
            n_samples=maps.n_samples,
            width=maps.width,
            layers=format_layers(maps.layers),
            n_units=int(maps.delta.size),
            n_significant=int(significant.sum()),
            share_significant=float(significant.mean()),
            top_layers=layer_profile(maps, config.fdr_alpha),
            top_units=top_units(maps, config.top_units),
            settings=maps.settings,
            window=maps.window,
            stability=result.stability.get((cap, hook)),
            neuron_set=neuron_set.name if neuron_set else None,
            plots=sorted(p.name for p in result.plots if p.name.startswith(f"{cap}_{hook}_")),
            base=result.base_comparison.get((cap, hook)),
        )
    return AnalysisSummary(
        run_dir=run_dir,
        metric=config.metric,
        settings=asdict(config),
        model_hashes=hashes,
        maps=result.maps_path.name,
        warnings=list(result.warnings),
        capabilities=per_cap,
    )

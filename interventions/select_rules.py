"""Selection rules: the K units each rule picks from a run, and where its ranking comes from.

A rule is a ranking of :mod:`analysis.rankings` in a basis it supports (:func:`analysis.rankings.select_rules`):
its ``rule`` name in the global basis (``count`` for ``topk_count``, ``mean_diff``, ``effect_size``,
``attribution``, ``weight`` for ``weight_change``), ``local_`` + that name in the local basis (each DPO layer run on
SFT's input to it, so a unit's score is its own layer's change, :mod:`analysis.local_basis`). Every rule scores each
unit of the capability's layer window and keeps the K of largest |score|, ties by layer then unit (the neuron-set
rule of ``probe analyze``, :func:`analysis.select.select_neurons`); a unit scored 0 is never picked.

Where a ranking comes from, in this order:

1. a saved analysis of the run under the rule's metric: the first ``RUN_DIR/analysis*/summary.json``
   (``analysis`` itself first, then by name) of that metric that analysed the capability × hook; its
   maps, its window and its settings;
2. otherwise, for a ranking computed from the recording alone (``count``, ``mean_diff``, ``effect_size``): the maps
   computed afresh from ``activations.h5`` with the default settings over the default window (seconds);
3. a ranking whose prior pass ``--select`` does not run has no such fallback (``attribution``: a gradient pass
   through both models, about 8 minutes for 160 prompts of the default pair on 2 cores), so a run without it is one
   error naming the ``probe analyze`` command that makes it;
4. a ranking without maps gives its row's scores (``weight``: a ``weight_change.h5`` of ``probe explain`` under
   ``RUN_DIR/analysis*/`` whose models are the run's, else computed from the run's checkpoints in memory, seconds),
   over the default window;
5. a ``local_*`` rule: the maps in the local basis, computed afresh from ``activations.h5``.

Example:
    >>> rule_names("count, mean_diff,count")
    ['count', 'mean_diff']
    >>> rule_names("count,votes")
    Traceback (most recent call last):
    core.config_file.OptionError: --select: expected rules from count, mean_diff, ..., got 'votes'
    >>> sets = rule_sets("runs/latest", "multi_turn", "mlp_out", ["count", "mean_diff"], k=64)   # doctest: +SKIP
    >>> sets["mean_diff"].units.by_layer().keys(), sets["count"].source                          # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from access.units import Neuron, NeuronSet
from analysis.rankings import entry, select_rule, select_rules
from core.config_file import OptionError
from core.errors import ProbeError
from core.run_dir import RunDir

if TYPE_CHECKING:
    from analysis.metric_maps import MetricMaps
    from analysis.window import Window
    from probes.store import RunReader


def rule_names(spec: str | list[str]) -> list[str]:
    """``"count,mean_diff"`` or a list, each a known rule, without repeats (empty: no comparison)."""
    names = spec.split(",") if isinstance(spec, str) else [str(n) for n in spec]
    out: list[str] = []
    for name in (n.strip() for n in names):
        if name and name not in select_rules():
            raise OptionError("select", f"rules from {', '.join(select_rules())}", name)
        if name and name not in out:
            out.append(name)
    return out


@dataclass(frozen=True)
class RuleSet:
    """One rule's units and where they came from."""

    rule: str
    units: NeuronSet
    source: str  # the ranking, in words: a saved analysis's maps file, or how it was computed
    window: str  # the layers it ranked, e.g. "11-29"
    width: int  # units per layer at the hook point


def rule_sets(
    run_dir: str | Path,
    capability: str,
    hook: str,
    rules: list[str],
    k: int,
    progress: Callable[[str], None] | None = None,
) -> dict[str, RuleSet]:
    """Each rule's top ``k`` units of ``capability`` at ``hook`` (module doc); a rule without one is a ProbeError."""
    from interventions.selection import require_recorded
    from probes.store import RunReader

    require_recorded(run_dir, capability, hook)
    out: dict[str, RuleSet] = {}
    with RunReader(run_dir) as run:
        for rule in sorted(rules, key=lambda r: not _needs_saved_pass(r)):  # those that can fail, first
            out[rule] = _rule_set(run, Path(run_dir), rule, capability, hook, k)
            if progress is not None:
                progress(f"{rule}: top {len(out[rule].units)} units of layers {out[rule].window}, {out[rule].source}")
    return {rule: out[rule] for rule in rules}


def _needs_saved_pass(rule: str) -> bool:
    """The rule's ranking needs a pass that ``--select`` does not run itself (an error when it has not run)."""
    prior = select_rule(rule)[0].prior
    return prior is not None and not prior.on_demand


def _rule_set(run: RunReader, run_dir: Path, rule: str, capability: str, hook: str, k: int) -> RuleSet:
    from analysis.select import select_neurons
    from analysis.window import format_layers

    row, basis = select_rule(rule)
    if row.scores is not None:
        return _scored_set(run, run_dir, rule, capability, hook, k)
    if basis != "global":
        return _local_set(run, run_dir, rule, capability, hook, k)
    metric = row.name
    saved = saved_maps(run_dir, metric, capability, hook)
    if saved is not None:
        maps, path = saved
        source = f"from {path} (probe analyze)"
    elif row.prior is None:  # cheap to rank afresh from the recorded activations
        maps = _fresh_maps(run, metric, capability, hook)
        source = f"ranked afresh from activations.h5 (no saved {metric} analysis; default settings)"
    else:
        command = (
            f"probe analyze {run_dir} --metric {metric} -c {capability} --hook {hook} --out {run_dir}/analysis_{metric}"
        )
        raise ProbeError(
            f"--select {rule}: {run_dir} has no {metric} analysis of {capability}/{hook}; run `{command}` first "
            f"({row.prior.what}, {row.prior.cost})"
        )
    units = select_neurons(maps, "top_k_abs", k, run_dir=str(run_dir), model_hashes=_hashes(run))
    if not len(units):
        raise ProbeError(f"--select {rule}: the {metric} ranking of {capability}/{hook} scores every unit 0")
    return RuleSet(rule, units, source, format_layers(maps.layers), maps.width)


def _local_set(run: RunReader, run_dir: Path, rule: str, capability: str, hook: str, k: int) -> RuleSet:
    """The rule's metric in the local basis over the default window, ranked afresh from activations.h5."""
    from analysis.basis import describe_basis
    from analysis.config import AnalysisConfig
    from analysis.local_basis import basis_maps
    from analysis.select import select_neurons
    from analysis.window import format_layers

    row, basis = select_rule(rule)
    try:
        config = AnalysisConfig(metric=row.name, basis=basis, stability_resamples=0)
        maps = basis_maps(run, capability, hook, config)
    except ProbeError as exc:
        raise ProbeError(f"--select {rule}: {exc}") from None
    units = select_neurons(maps, "top_k_abs", k, run_dir=str(run_dir), model_hashes=_hashes(run))
    if not len(units):
        raise ProbeError(f"--select {rule}: the {basis} {row.name} ranking of {capability}/{hook} scores every unit 0")
    source = f"ranked afresh from activations.h5 in the {describe_basis(basis, maps.settings.get('direction'))}"
    return RuleSet(rule, units, source, format_layers(maps.layers), maps.width)


def saved_maps(run_dir: Path, metric: str, capability: str, hook: str) -> tuple[MetricMaps, Path] | None:
    """The maps of the first saved analysis of ``metric`` that covers ``capability`` × ``hook`` (module doc), if any."""
    from analysis.maps import load_maps
    from analysis.summary import AnalysisSummary

    for folder in RunDir(run_dir).analyses():
        try:
            summary = AnalysisSummary.load(folder.summary)
        except ProbeError:
            continue
        if summary.metric != metric or hook not in summary.capabilities.get(capability, {}):
            continue
        if summary.settings.get("basis", "global") != "global":  # a local analysis answers only the local rules
            continue
        path = folder.root / summary.maps
        found = [m for m in load_maps(path) if m.capability == capability and m.hook == hook]
        if found:
            return found[0], path
    return None


def _window(run: RunReader, capability: str, hook: str) -> Window:
    from analysis.window import model_depth, resolve_window

    stored = run.layers(capability, hook)
    return resolve_window(None, model_depth(run, stored), stored)


def _fresh_maps(run: RunReader, metric: str, capability: str, hook: str) -> MetricMaps:
    from analysis.config import AnalysisConfig
    from analysis.maps import compute_maps

    config = AnalysisConfig(metric=metric, stability_resamples=0)
    return compute_maps(run, capability, hook, _window(run, capability, hook), config)


def _hashes(run: RunReader) -> dict[str, str]:
    return {m: str(run.model_info(m).get("weights_sha256", "")) for m in ("sft", "dpo")}


def _scored_set(run: RunReader, run_dir: Path, rule: str, capability: str, hook: str, k: int) -> RuleSet:
    """The top ``k`` units of a ranking without maps (its row's ``scores``, e.g. weight change) over the default
    window, positive scores only."""
    from analysis.agreement import top_positive
    from analysis.window import format_layers

    row = select_rule(rule)[0]
    assert row.scores is not None
    window = _window(run, capability, hook).layers
    relative, source = entry(row.scores)(run, hook)
    scores = np.nan_to_num(relative[window], posinf=np.finfo(np.float64).max)
    neurons = [Neuron(window[i], unit, float(scores[i, unit])) for i, unit in top_positive(scores, k)]
    if not neurons:
        raise ProbeError(
            f"--select {rule}: no unit of {hook} in layers {format_layers(window)} scores above 0 ({row.label})"
        )
    selection = {"rule": "top_k_abs", "k": k, "window": format_layers(window), "score": row.delta_label}
    units_set = NeuronSet(neurons, hook, row.name, capability, selection, str(run_dir), _hashes(run))
    return RuleSet(rule, units_set, source, format_layers(window), int(relative.shape[1]))

"""Which units to scale: a neuron-set file, the top K of a run's ranking, or a ``layer:unit`` list.

Every route ends in the same object, :class:`access.units.NeuronSet`, so the
intervention code never cares where a selection came from, and the report can always
say. Selections are checked against the model *before* any forward: a layer or unit
outside the hook point is a user mistake (:class:`ProbeError` naming the argument),
never an ``IndexError`` in the middle of generation.

Example:
    >>> ns = parse_units("14:3,14:9,20:0", hook="mlp_out")
    >>> ns.by_layer()
    {14: [3, 9], 20: [0]}
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from access.hook_points import validate_hook
from access.hook_table import DEFAULT_HOOK
from access.units import Neuron, NeuronSet
from core.errors import ProbeError
from core.run_dir import RunDir
from interventions.results import UnitsSummary

if TYPE_CHECKING:
    pass

# wider than any hook point and deeper than any model: a range past it is a typo, refused before it is expanded
MAX_INDEX = 1 << 20


def parse_units(spec: str, hook: str = DEFAULT_HOOK) -> NeuronSet:
    """Parse ``"14:3,14:9,20:0"`` (also ``"14:3-7"`` for a unit range) into a manual neuron set."""
    validate_hook(hook)
    neurons: list[Neuron] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        layer_s, sep, unit_s = part.partition(":")
        try:
            if not sep:
                raise ValueError
            layer = int(layer_s)
            lo_s, dash, hi_s = unit_s.partition("-")
            lo, hi = int(lo_s), int(hi_s) if dash else int(lo_s)
            if lo > hi or layer < 0 or lo < 0:
                raise ValueError
        except ValueError:
            raise ProbeError(
                f"--units {spec!r}: bad entry {part!r}; expected LAYER:UNIT pairs like 14:3,14:9,20:0 (or 14:3-7)"
            ) from None
        if layer >= MAX_INDEX or hi >= MAX_INDEX:
            raise ProbeError(
                f"--units {spec!r}: {part!r} reaches past {MAX_INDEX - 1}, beyond any model's layers and units; "
                "check the range"
            )
        neurons.extend(Neuron(layer, unit) for unit in range(lo, hi + 1))
    if not neurons:
        raise ProbeError(f"--units {spec!r}: no units given; expected LAYER:UNIT pairs like 14:3,14:9,20:0")
    seen: set[tuple[int, int]] = set()
    for n in neurons:
        if (n.layer, n.unit) in seen:
            raise ProbeError(f"--units {spec!r}: layer {n.layer} unit {n.unit} is listed twice")
        seen.add((n.layer, n.unit))
    return NeuronSet(neurons=neurons, hook=hook, metric="manual", selection={"rule": "units", "spec": spec})


def load_neuron_file(path: str | Path, top_k: int | None = None) -> NeuronSet:
    """Load a neuron-set file; with ``top_k``, keep the K units of largest |delta|."""
    neurons = NeuronSet.load(path)
    validate_hook(neurons.hook)
    return top_k_of(neurons, top_k) if top_k is not None else neurons


def top_k_of(neurons: NeuronSet, k: int) -> NeuronSet:
    """The ``k`` units of largest |delta| (ties broken by layer, then unit)."""
    if k < 1:
        raise ProbeError(f"--top-k must be at least 1, got {k}")
    if k > len(neurons):
        raise ProbeError(
            f"--top-k {k}: the ranking has only {len(neurons)} units; "
            f"ask for fewer or re-run `probe analyze --top-k {k}`"
        )
    ranked = sorted(neurons.neurons, key=lambda n: (-abs(n.delta), n.layer, n.unit))[:k]
    selection = {**neurons.selection, "top_k": k}
    return NeuronSet(
        ranked, neurons.hook, neurons.metric, neurons.capability, selection, neurons.run_dir, dict(neurons.model_hashes)
    )


def ranking_from_run(run_dir: str | Path, capability: str, hook: str, k: int) -> NeuronSet:
    """Top ``k`` units of the run's discrepancy ranking for one capability and hook point.

    Uses the neuron set of the run's analysis when it holds at least ``k`` units; otherwise
    ranks afresh through :func:`analysis.analyze_run` into the analysis's ``top<k>``
    folder (:meth:`core.run_dir.AnalysisDir.top`; an existing analysis is never overwritten).
    """
    if k < 1:
        raise ProbeError(f"--top-k must be at least 1, got {k}")
    analysis = RunDir(run_dir).analysis
    existing = analysis.neuron_set(capability, hook)
    if existing.is_file():
        ranked = NeuronSet.load(existing)
        if len(ranked) >= k:
            return top_k_of(ranked, k)
    out_dir = analysis.top(k).root
    target = analysis.top(k).neuron_set(capability, hook)
    if not target.is_file():
        from analysis import AnalysisConfig, analyze_run  # analysis is upstream of interventions

        analyze_run(
            run_dir, AnalysisConfig(top_k=k), capabilities=[capability], hooks=[hook], out_dir=out_dir, plots=False
        )
    if not target.is_file():
        raise ProbeError(
            f"{run_dir}: analysis wrote no ranking for capability={capability} hook={hook}; was it recorded?"
        )
    return top_k_of(NeuronSet.load(target), k)


def analysed_neuron_set(run_dir: str | Path, capability: str, hook: str) -> NeuronSet:
    """The neuron set ``probe analyze`` wrote for one capability and hook of a run, or why there is none.

    Advice depends on the cause: a capability or hook the run never recorded cannot be
    analysed, so it is named with what the run did record; only a recorded one gets
    "run ``probe analyze``".
    """
    path = RunDir(run_dir).analysis.neuron_set(capability, hook)
    if path.is_file():
        return NeuronSet.load(path)
    require_recorded(run_dir, capability, hook)
    raise ProbeError(
        f"{path}: no neuron set for capability={capability} hook={hook}; "
        f"run `probe analyze {run_dir}` or pass --top-k/--neurons/--units"
    )


def require_recorded(run_dir: str | Path, capability: str, hook: str) -> None:
    from probes.store import MODELS, RunReader

    with RunReader(run_dir) as run:
        recorded = run.capabilities()
        if capability not in recorded:
            raise ProbeError(
                f"{run_dir}: capability {capability!r} was not recorded in this run (recorded: "
                f"{', '.join(recorded) or 'none'}); choose one of those with --capability, "
                f"or record it with `probe run --capability {capability}`"
            )
        hooks = [h for h in run.hooks(capability, MODELS[0]) if all(h in run.hooks(capability, m) for m in MODELS)]
        if hook not in hooks:
            raise ProbeError(
                f"{run_dir}: hook {hook!r} was not recorded for capability {capability!r} (recorded: "
                f"{', '.join(hooks) or 'none'}); choose one of those with --hook"
            )


def merged(sets: list[NeuronSet]) -> NeuronSet:
    """Every unit of ``sets`` (one hook point) once, in first-seen order: all that several selection rules edit."""
    seen: dict[tuple[int, int], Neuron] = {}
    for neurons in sets:
        for n in neurons.neurons:
            seen.setdefault((n.layer, n.unit), Neuron(n.layer, n.unit))
    first = sets[0]
    return NeuronSet(
        list(seen.values()),
        first.hook,
        metric="merged",
        capability=first.capability,
        selection={"rule": "merged", "rules": [s.metric for s in sets]},
        run_dir=first.run_dir,
        model_hashes=dict(first.model_hashes),
    )


def describe(neurons: NeuronSet) -> UnitsSummary:
    """The set as the reports give it: size, per-layer counts, provenance."""
    return UnitsSummary(
        hook=neurons.hook,
        size=len(neurons),
        per_layer={layer: len(units) for layer, units in sorted(neurons.by_layer().items())},
        metric=neurons.metric,
        capability=neurons.capability,
        selection=neurons.selection,
        run_dir=neurons.run_dir,
        units=[(n.layer, n.unit) for n in neurons.neurons],
    )

"""Neuron sets: the file that carries a selection from analysis to interventions.

A neuron set is a list of ``(layer, unit, delta)`` on one hook point, plus everything
needed to know where it came from: the metric and capability that ranked it, the
selection rule, the run directory and the hashes of the two models. JSON, so it can be
read, edited or written by hand; it round-trips exactly (floats are written with
``repr`` precision by ``json``). It is written by :func:`core.records.to_json`; since a
hand-written file is expected, :meth:`NeuronSet.read` checks each field itself and says
in one line what a field must be.

Example file::

    {"format": "rolemrc-probe/neuron-set", "version": 1,
     "hook": "mlp_out", "metric": "topk_count", "capability": "multi_turn",
     "selection": {"rule": "top_k_abs", "k": 64, "threshold": 0.0, "layers": [12, 31], "window": "12-31", ...},
     "run_dir": "runs/...", "model_hashes": {"sft": "...", "dpo": "..."},
     "neurons": [{"layer": 19, "unit": 7, "delta": -0.12}, ...]}
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from access.hook_points import n_layers, validate_hook, width
from core.atomic import write_atomic
from core.errors import ProbeError
from core.inputs import read_json, shown
from core.records import to_json

if TYPE_CHECKING:
    from transformers import PreTrainedModel

FORMAT = "rolemrc-probe/neuron-set"
VERSION = 1


@dataclass(frozen=True, order=True)
class Neuron:
    layer: int
    unit: int
    delta: float = 0.0


@dataclass
class NeuronSet:
    FORMAT: ClassVar[str] = FORMAT
    VERSION: ClassVar[int] = VERSION

    neurons: list[Neuron]
    hook: str
    metric: str = "manual"
    capability: str = ""
    selection: dict[str, Any] = field(default_factory=dict)
    run_dir: str = ""
    model_hashes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_units(self.neurons, "neuron set")

    def __len__(self) -> int:
        return len(self.neurons)

    def by_layer(self) -> dict[int, list[int]]:
        """Units grouped by layer, in listing order."""
        out: dict[int, list[int]] = {}
        for n in self.neurons:
            out.setdefault(n.layer, []).append(n.unit)
        return out

    def save(self, path: str | Path) -> Path:
        target = Path(path)
        write_atomic(target, json.dumps(to_json(self), indent=1) + "\n")
        return target

    @classmethod
    def read(cls, obj: Any, source: str = "neuron set") -> NeuronSet:
        """``obj`` (a parsed file) as a neuron set; a wrong field is one line naming ``source`` and the field."""
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise ProbeError(f"{source}: not a neuron-set file (expected a JSON object with format {FORMAT!r})")
        version = obj.get("version", VERSION)
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= VERSION:
            newer = isinstance(version, int) and not isinstance(version, bool) and version > VERSION
            raise ProbeError(
                f"{source}: neuron-set version {shown(version)}, "
                + (
                    f"newer than this toolkit reads ({VERSION}); update the toolkit"
                    if newer
                    else f"expected an integer 1-{VERSION}"
                )
            )
        if not isinstance(obj.get("hook"), str):
            raise ProbeError(f"{source}: missing 'hook' (e.g. \"mlp_out\")")
        raw = obj.get("neurons")
        if not isinstance(raw, list) or not raw:
            raise ProbeError(f"{source}: 'neurons' must be a non-empty list of {{layer, unit, delta}}")
        neurons = [_neuron(item, i, source) for i, item in enumerate(raw)]
        _check_units(neurons, source)
        hashes = _optional(obj, "model_hashes", dict, source, "an object of model name to weights hash")
        if any(not isinstance(v, str) for v in hashes.values()):
            raise ProbeError(f"{source}: 'model_hashes' must map model names to hash strings")
        return cls(
            neurons=neurons,
            hook=obj["hook"],
            metric=_optional(obj, "metric", str, source, "a string", "manual"),
            capability=_optional(obj, "capability", str, source, "a string", ""),
            selection=_optional(obj, "selection", dict, source, "an object describing the selection rule"),
            run_dir=_optional(obj, "run_dir", str, source, "a string", ""),
            model_hashes=hashes,
        )

    @classmethod
    def load(cls, path: str | Path) -> NeuronSet:
        return cls.read(read_json(path, "neuron-set file"), str(path))


def _optional(obj: dict[str, Any], key: str, kind: type, source: str, expected: str, default: Any = None) -> Any:
    """``obj[key]`` if present and of ``kind`` (``None`` counts as absent), else ``default`` (a new empty ``kind``)."""
    value = obj.get(key)
    if value is None:
        return kind() if default is None else default
    if not isinstance(value, kind):
        raise ProbeError(f"{source}: '{key}' must be {expected}, got {type(value).__name__}")
    return dict(value) if isinstance(value, dict) else value


def _check_units(neurons: list[Neuron], source: str) -> None:
    seen: set[tuple[int, int]] = set()
    for n in neurons:
        if n.layer < 0 or n.unit < 0:
            raise ProbeError(f"{source}: negative layer or unit in {n}")
        if (n.layer, n.unit) in seen:
            raise ProbeError(f"{source}: layer {n.layer} unit {n.unit} is listed twice")
        seen.add((n.layer, n.unit))


def _neuron(item: Any, index: int, source: str) -> Neuron:
    if not isinstance(item, dict):
        raise ProbeError(f"{source}: neurons[{index}] must be an object with layer, unit and delta")
    layer, unit, delta = item.get("layer"), item.get("unit"), item.get("delta", 0.0)
    if not isinstance(layer, int) or isinstance(layer, bool) or not isinstance(unit, int) or isinstance(unit, bool):
        raise ProbeError(
            f"{source}: neurons[{index}]: layer and unit must be integers, got {shown(layer)}, {shown(unit)}"
        )
    if not isinstance(delta, (int, float)) or isinstance(delta, bool) or not _finite(delta):
        raise ProbeError(f"{source}: neurons[{index}]: delta must be a finite number, got {shown(delta)}")
    return Neuron(layer, unit, float(delta))


def _finite(number: int | float) -> bool:
    """Whether ``number`` is a finite float; an int too large for a float is not."""
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def check_against_model(neurons: NeuronSet, model: PreTrainedModel, source: str = "neuron set") -> None:
    """Raise :class:`ProbeError` if a layer or unit lies outside the model's hook point."""
    validate_hook(neurons.hook)
    total, units = n_layers(model), width(model, neurons.hook)
    for n in neurons.neurons:
        if not 0 <= n.layer < total:
            raise ProbeError(
                f"{source}: layer {n.layer} (unit {n.unit}) is outside the model, which has layers 0-{total - 1}"
            )
        if not 0 <= n.unit < units:
            raise ProbeError(
                f"{source}: unit {n.unit} of layer {n.layer} is outside {neurons.hook}, which has units 0-{units - 1}"
            )

"""Neuron sets: the file that carries a selection from analysis to interventions.

A neuron set is a list of ``(layer, unit, delta)`` on one hook point, plus everything
needed to know where it came from: the metric and capability that ranked it, the
selection rule, the run directory and the hashes of the two models. JSON, so it can be
read, edited or written by hand; it round-trips exactly (floats are written with
``repr`` precision by ``json``).

Example file::

    {"format": "rolemrc-probe/neuron-set", "version": 1,
     "hook": "mlp_out", "metric": "topk_count", "capability": "multi_turn",
     "selection": {"rule": "top_k_abs_delta", "k": 64, "layers": [12, 31]},
     "run_dir": "runs/...", "model_hashes": {"sft": "...", "dpo": "..."},
     "neurons": [{"layer": 19, "unit": 7, "delta": -0.12}, ...]}
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ProbeError

FORMAT = "rolemrc-probe/neuron-set"
VERSION = 1


@dataclass(frozen=True, order=True)
class Neuron:
    layer: int
    unit: int
    delta: float = 0.0


@dataclass
class NeuronSet:
    neurons: list[Neuron]
    hook: str
    metric: str = "manual"
    capability: str = ""
    selection: dict[str, Any] = field(default_factory=dict)
    run_dir: str = ""
    model_hashes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        seen: set[tuple[int, int]] = set()
        for n in self.neurons:
            if n.layer < 0 or n.unit < 0:
                raise ProbeError(f"neuron set: negative layer or unit in {n}")
            if (n.layer, n.unit) in seen:
                raise ProbeError(f"neuron set: layer {n.layer} unit {n.unit} is listed twice")
            seen.add((n.layer, n.unit))

    def __len__(self) -> int:
        return len(self.neurons)

    def by_layer(self) -> dict[int, list[int]]:
        """Units grouped by layer, in listing order."""
        out: dict[int, list[int]] = {}
        for n in self.neurons:
            out.setdefault(n.layer, []).append(n.unit)
        return out

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["neurons"] = [asdict(n) for n in self.neurons]
        return {"format": FORMAT, "version": VERSION, **body}

    def save(self, path: str | Path) -> Path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(target.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        tmp.replace(target)
        return target

    @classmethod
    def from_dict(cls, obj: Any, source: str = "neuron set") -> NeuronSet:
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            raise ProbeError(f"{source}: not a neuron-set file (expected a JSON object with format {FORMAT!r})")
        if not isinstance(obj.get("hook"), str):
            raise ProbeError(f"{source}: missing 'hook' (e.g. \"mlp_out\")")
        raw = obj.get("neurons")
        if not isinstance(raw, list) or not raw:
            raise ProbeError(f"{source}: 'neurons' must be a non-empty list of {{layer, unit, delta}}")
        neurons = [_neuron(item, i, source) for i, item in enumerate(raw)]
        return cls(
            neurons=neurons,
            hook=obj["hook"],
            metric=str(obj.get("metric", "manual")),
            capability=str(obj.get("capability", "")),
            selection=dict(obj.get("selection") or {}),
            run_dir=str(obj.get("run_dir", "")),
            model_hashes={str(k): str(v) for k, v in (obj.get("model_hashes") or {}).items()},
        )

    @classmethod
    def load(cls, path: str | Path) -> NeuronSet:
        p = Path(path)
        if not p.is_file():
            raise ProbeError(f"{p}: no such neuron-set file")
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ProbeError(f"{p}:{exc.lineno}: malformed JSON ({exc.msg}); expected a neuron-set file") from None
        return cls.from_dict(obj, str(p))


def _neuron(item: Any, index: int, source: str) -> Neuron:
    if not isinstance(item, dict):
        raise ProbeError(f"{source}: neurons[{index}] must be an object with layer, unit and delta")
    layer, unit, delta = item.get("layer"), item.get("unit"), item.get("delta", 0.0)
    if not isinstance(layer, int) or isinstance(layer, bool) or not isinstance(unit, int) or isinstance(unit, bool):
        raise ProbeError(f"{source}: neurons[{index}]: layer and unit must be integers, got {layer!r}, {unit!r}")
    if not isinstance(delta, (int, float)) or isinstance(delta, bool) or not math.isfinite(delta):
        raise ProbeError(f"{source}: neurons[{index}]: delta must be a finite number, got {delta!r}")
    return Neuron(layer, unit, float(delta))

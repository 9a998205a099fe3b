"""Per-unit weight change between two checkpoints: which units fine-tuning rewrote, read off the weights alone.

An activation map says a unit *behaves* differently after DPO; it cannot say whether DPO
changed the unit's own weights or only what flows into it. Both checkpoints are on disk, so
this module measures the first directly, for every unit of every layer, with no prompt:

``mlp_post`` unit *u* (a true MLP neuron)
    its gate row ``W_gate[u, :]``, up row ``W_up[u, :]`` and down column ``W_down[:, u]``
    (and their bias entries where the model has MLP biases); components ``gate``, ``up``,
    ``down``.
``mlp_out`` / ``attn_out`` coordinate *c* (a residual-stream coordinate)
    the row that writes it: ``W_down[c, :]`` of the MLP, ``W_O[c, :]`` of the attention (and the
    bias entry, if any); component ``down`` or ``o_proj``.
``resid_post`` coordinate *c* at layer *i*
    everything that has written it by the end of block *i*: the embedding column
    ``W_E[:, c]`` and the rows ``W_O[c, :]`` and ``W_down[c, :]`` of blocks 0..i, accumulated;
    components ``embedding``, ``attention``, ``mlp`` (each accumulated the same way).

The number is the relative change ``‖w_b − w_a‖ / ‖w_a‖`` over all of the unit's weights
taken together (``relative``; each component's own in ``components``), with ``‖w_b − w_a‖``
kept as ``absolute``. A unit whose weights were exactly zero and stayed so has change 0; one
that was zero and moved has +inf. An untouched pair gives zeros everywhere.

Weights are read one tensor of each checkpoint at a time (:class:`analysis.checkpoint.Checkpoint`),
so memory is two tensors, never two models. Sums of squares are accumulated in float64 (``numpy.einsum``).

Example:
    >>> with Checkpoint("runs/sft", "--sft") as sft, Checkpoint("runs/dpo", "--dpo") as dpo:   # doctest: +SKIP
    ...     change = weight_change(sft, dpo, ["mlp_post"], "sft_dpo")["mlp_post"]
    >>> change.relative.shape                                                                   # doctest: +SKIP
    (30, 1536)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from einops import rearrange

from access.hook_points import validate_hook
from access.hook_table import HOOK_TABLE, READS, Part
from analysis.checkpoint import LAYOUT, Checkpoint, MlpPart, check_same_shape, same_tensor_shape
from core.errors import ProbeError
from core.run_dir import RunDir

if TYPE_CHECKING:
    from probes.store import RunReader

FORMAT = "rolemrc-probe/weight-change"
VERSION = 1
TRANSITIONS: dict[str, tuple[str, str]] = {"sft_dpo": ("sft", "dpo"), "base_sft": ("base", "sft")}
LABELS: dict[str, str] = {"sft_dpo": "SFT → DPO", "base_sft": "base → SFT"}


@dataclass
class Squares:
    """Per-unit sums of squares of the change (``delta``) and of the earlier weights (``before``)."""

    delta: np.ndarray
    before: np.ndarray

    def __add__(self, other: Squares) -> Squares:
        return Squares(self.delta + other.delta, self.before + other.before)

    def relative(self) -> np.ndarray:
        """‖Δ‖ / ‖w_a‖ per unit; 0 where both are 0, +inf where only the earlier weights are 0."""
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.sqrt(self.delta / self.before)
        return np.where(self.before > 0, ratio, np.where(self.delta > 0, np.inf, 0.0))

    def absolute(self) -> np.ndarray:
        return np.asarray(np.sqrt(self.delta))


@dataclass
class UnitChange:
    """One hook point's weight change from checkpoint a to b, (n_layers, width), rows following ``layers``."""

    hook: str
    transition: str
    layers: list[int]
    relative: np.ndarray
    absolute: np.ndarray
    components: dict[str, np.ndarray] = field(default_factory=dict)

    def row(self, layer: int) -> np.ndarray:
        return np.asarray(self.relative[self.layers.index(layer)])

    def unit(self, layer: int, unit: int) -> dict[str, float]:
        """One unit's figures: relative, absolute and each component's relative change."""
        i = self.layers.index(layer)
        out = {"relative": float(self.relative[i, unit]), "absolute": float(self.absolute[i, unit])}
        out.update({name: float(values[i, unit]) for name, values in self.components.items()})
        return out


def _squares(a: Any, b: Any, dim: int) -> Squares:
    """Sums over ``dim`` of the squares of ``b - a`` and of ``a`` (float32 tensors), accumulated in float64.

    >>> import torch
    >>> s = _squares(torch.tensor([[3.0, 4.0]]), torch.tensor([[3.0, 5.0]]), 1)
    >>> s.delta.tolist(), s.before.tolist(), s.relative().tolist()
    ([1.0], [25.0], [0.2])
    """
    before, after = a.numpy(), b.numpy()
    diff = after - before
    spec = "ij,ij->i" if dim == 1 else "ij,ij->j"
    return Squares(np.einsum(spec, diff, diff, dtype=np.float64), np.einsum(spec, before, before, dtype=np.float64))


def _bias_rows(a: Checkpoint, b: Checkpoint, bias: str) -> tuple[Any, Any]:
    """Both checkpoints' ``bias`` as (unit, 1) rows: each unit's bias entry is one more weight of its row."""
    return rearrange(a.tensor(bias), "unit -> unit 1"), rearrange(b.tensor(bias), "unit -> unit 1")


def _part(a: Checkpoint, b: Checkpoint, weight: str, bias: str, dim: int) -> Squares:
    """The per-unit squares of one weight (rows: ``dim=1``; columns: ``dim=0``)
    plus its bias entry where there is one."""
    same_tensor_shape(a, b, weight)
    total = _squares(a.tensor(weight), b.tensor(weight), dim)
    if dim == 1 and a.has(bias) and b.has(bias):
        same_tensor_shape(a, b, bias)
        total = total + _squares(*_bias_rows(a, b, bias), 1)
    return total


def _mlp(a: Checkpoint, b: Checkpoint, layer: int, part: MlpPart, dim: int) -> Squares:
    return _part(a, b, a.mlp_name(layer, part), a.mlp_name(layer, part, "bias"), dim)


def _attention(a: Checkpoint, b: Checkpoint, layer: int) -> Squares:
    return _part(a, b, a.attention_out_name(layer), a.attention_out_name(layer, "bias"), 1)


def weight_change(a: Checkpoint, b: Checkpoint, hooks: Iterable[str], transition: str) -> dict[str, UnitChange]:
    """Per hook point, the [layers × units] change from ``a`` to ``b`` over every layer (see the module doc)."""
    hooks = [validate_hook(h) for h in dict.fromkeys(hooks)]
    check_same_shape(a, b)
    n_layers = a.shape.n_layers
    rows: dict[str, list[dict[str, Squares]]] = {h: [] for h in hooks}
    part_of = {hook: HOOK_TABLE[hook].part for hook in hooks}
    running: dict[str, Squares] = {}
    if "block" in part_of.values():
        running["embedding"] = _part(a, b, LAYOUT.embedding, "", 0)
    for layer in range(n_layers):
        parts = _layer_parts(a, b, layer, set(part_of.values()))
        if "block" in part_of.values():
            for name, key in (("attention", "o_rows"), ("mlp", "down_rows")):
                running[name] = running[name] + parts[key] if name in running else parts[key]
        for hook, part in part_of.items():
            rows[hook].append(dict(running) if part == "block" else {piece: parts[key] for piece, key in PIECES[part]})
    return {hook: _assemble(hook, transition, rows[hook]) for hook in hooks}


PIECES: dict[Part, tuple[tuple[str, str], ...]] = {
    "down_proj": (("gate", "gate"), ("up", "up"), ("down", "down_columns")),
    "mlp": (("down", "down_rows"),),
    "attention": (("o_proj", "o_rows"),),
}  # what each hook point's part reads, by piece name; "block" sums the attention's and the MLP's rows


def _layer_parts(a: Checkpoint, b: Checkpoint, layer: int, wanted: set[Part]) -> dict[str, Squares]:
    """The squares one layer contributes, reading only the tensors the hook points' parts need (each once)."""
    parts: dict[str, Squares] = {}
    if "down_proj" in wanted:
        parts["gate"] = _mlp(a, b, layer, "gate", 1)
        parts["up"] = _mlp(a, b, layer, "up", 1)
    if any("mlp" in READS[part] for part in wanted):
        down_a, down_b = a.mlp_weight(layer, "down"), b.mlp_weight(layer, "down")
        same_tensor_shape(a, b, a.mlp_name(layer, "down"))
        parts["down_columns"] = _squares(down_a, down_b, 0)
        parts["down_rows"] = _squares(down_a, down_b, 1)
        bias = a.mlp_name(layer, "down", "bias")
        if a.has(bias) and b.has(bias):
            parts["down_rows"] = parts["down_rows"] + _squares(*_bias_rows(a, b, bias), 1)
        del down_a, down_b
    if any("attention" in READS[part] for part in wanted):
        parts["o_rows"] = _attention(a, b, layer)
    return parts


def _assemble(hook: str, transition: str, rows: list[dict[str, Squares]]) -> UnitChange:
    names = list(rows[0]) if rows else []
    totals = [sum((row[n] for n in names[1:]), row[names[0]]) for row in rows]
    return UnitChange(
        hook=hook,
        transition=transition,
        layers=list(range(len(rows))),
        relative=np.stack([t.relative() for t in totals]),
        absolute=np.stack([t.absolute() for t in totals]),
        components={n: np.stack([row[n].relative() for row in rows]) for n in names},
    )


def tensor_change(a: Checkpoint, b: Checkpoint, name: str) -> float:
    """The relative change ‖b − a‖ / ‖a‖ of one whole tensor (the unembedding, a norm's weight)."""
    same_tensor_shape(a, b, name)
    before, after = (rearrange(m.tensor(name), "... -> 1 (...)") for m in (a, b))
    return float(_squares(before, after, 1).relative()[0])


# --- the file beside the activation maps ----------------------------------------------------------------------------


def save_weight_change(changes: list[UnitChange], path: str | Path, models: dict[str, dict[str, str]]) -> Path:
    """``/{transition}/{hook}/{relative, absolute, layers, components/<part>}``, the models' dirs and fingerprints."""
    from core.hdf5 import write_hdf5

    def fill(f: Any) -> None:
        f.attrs["format"], f.attrs["version"] = FORMAT, VERSION
        f.attrs["models"] = json.dumps(models, sort_keys=True)
        for change in changes:
            group = f.create_group(f"{change.transition}/{change.hook}")
            for name in ("relative", "absolute"):
                group.create_dataset(name, data=getattr(change, name), compression="gzip", compression_opts=4)
            group.create_dataset("layers", data=np.asarray(change.layers, dtype=np.int32))
            for name, values in change.components.items():
                group.create_dataset(f"components/{name}", data=values, compression="gzip", compression_opts=4)

    write_hdf5(path, fill)
    return Path(path)


def load_weight_change(path: str | Path) -> tuple[list[UnitChange], dict[str, Any]]:
    """What :func:`save_weight_change` wrote: the maps and the models they were computed from; a file that is not
    one is a :class:`ProbeError` naming it."""
    from core.hdf5 import json_attr, read_hdf5

    remedy = "rerun `probe explain` (or delete the file: the change is then computed from the checkpoints)"
    with read_hdf5(path, "weight-change file", remedy) as f:
        if f.attrs.get("format") != FORMAT or f.attrs.get("version") != VERSION:
            raise ProbeError(f"{path}: not a weight-change file of version {VERSION}; {remedy}")
        changes = [_stored_change(f[transition][hook], transition, hook) for transition in f for hook in f[transition]]
        models = json_attr(f, "models")
    if not isinstance(models, dict) or not all(isinstance(v, dict) for v in models.values()):
        raise ProbeError(f"{path}: its 'models' attribute is not a JSON object of models; {remedy}")
    return changes, models


def _stored_change(group: Any, transition: str, hook: str) -> UnitChange:
    """One hook point's maps as stored; shapes that do not agree raise ValueError (the reader names the file)."""
    from core.hdf5 import array

    if transition not in LABELS:
        raise ValueError(f"unknown transition {transition!r}")
    layers = [int(i) for i in array(group, "layers", 1, "iu")]
    relative, absolute = array(group, "relative", 2), array(group, "absolute", 2)
    parts = group.get("components", {})
    components = {n: array(parts, n, 2) for n in parts}
    if any(a.shape != relative.shape for a in (absolute, *components.values())) or len(layers) != len(relative):
        raise ValueError(f"{group.name}: layers, relative, absolute and components differ in shape")
    return UnitChange(hook, transition, layers, relative, absolute, components)


def pair_scores(run: RunReader, hook: str) -> tuple[np.ndarray, str]:
    """The ``weight_change`` ranking (:mod:`analysis.rankings`): (n_layers, width) relative SFT → DPO change of every
    unit of ``hook`` at every layer, and where it came from, in words: a weight change file of ``probe explain`` in
    one of the run's analysis folders whose models are the run's, else computed from the run's checkpoints now."""
    from analysis.explain_models import open_models

    hashes = {m: str(run.model_info(m).get("weights_sha256", "")) for m in ("sft", "dpo")}
    for folder in RunDir(run.run_dir).analyses():
        path = folder.weight_change
        if not path.is_file():
            continue
        changes, fingerprints = load_weight_change(path)
        if all(fingerprints.get(m, {}).get("weights_sha256") == hashes[m] for m in hashes):
            for change in changes:
                if change.transition == "sft_dpo" and change.hook == hook:
                    return change.relative, f"from {path} (probe explain)"
    with open_models(run) as models:
        change = weight_change(models.sft, models.dpo, [hook], "sft_dpo")[hook]
    return change.relative, "computed from the run's checkpoints (no weight_change.h5 from probe explain)"


def weight_change_figure(changes: list[UnitChange], window: list[int] | None = None) -> Any:
    """One hook point's change maps (one panel per transition), log10 of the relative change; zeros left blank."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from analysis.window import format_layers

    fig = make_subplots(
        rows=len(changes),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.12,
        subplot_titles=[f"{LABELS[c.transition]}: log10 ‖Δw‖/‖w‖" for c in changes],
    )
    for i, change in enumerate(changes):
        with np.errstate(divide="ignore"):
            z = np.where(change.relative > 0, np.log10(change.relative), np.nan)
        fig.add_trace(
            go.Heatmap(
                z=z,
                y=change.layers,
                colorscale="Viridis",
                customdata=change.relative,
                colorbar={"len": 0.8 / len(changes), "y": 1 - (i + 0.5) / len(changes)},
                hovertemplate="layer %{y}, unit %{x}: %{customdata:.3g}<extra></extra>",
            ),
            row=i + 1,
            col=1,
        )
        fig.update_yaxes(title_text="layer", row=i + 1, col=1)
    hook = changes[0].hook if changes else ""
    note = f" · the analysis window is layers {format_layers(window)}" if window else ""
    fig.update_xaxes(title_text=f"unit ({HOOK_TABLE[hook].width})" if hook else "unit", row=len(changes), col=1)
    fig.update_layout(
        title=f"Weight change per unit · {hook} · all layers{note}", height=380 * max(1, len(changes)) + 80, width=1200
    )
    return fig

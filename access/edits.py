"""Edits as data: what an intervention does to a model, as a frozen record any editing driver applies.

=========  ===========================================  ======================================
kind       what it does at every forward                placebo family
=========  ===========================================  ======================================
``scale``  multiplies units by ``factor`` (in float32)  matched random units, same factor
``set``    writes per-unit constants into units         matched random units (values from
                                                        ``pool`` where given, e.g. a mean)
``patch``  writes the values another model computes     matched random units, same source
           on the same tokens (run in lockstep)
``add``    adds ``alpha * vector`` at one layer         random directions of the same norm,
                                                        same layer
``expo``   weights ``θ_src + alpha(θ_host − θ_src)``, every  none: it is every weight, there is no
           parameter (in place for the block)          subset to draw at random
``expo-    the same blend on the units' MLP weights     matched random units, same blend
units``    (:data:`access.amplify.UNIT_PARAMETERS`)
``lda``    logits ``logit + alpha(logit − logit_src)``, the source run  none: it edits the whole output
           to its logits in lockstep                    distribution, no subset to draw
=========  ===========================================  ======================================

For the amplification kinds the host is the DPO model and the source SFT: ``expo`` alpha = 0 is SFT's weights,
alpha = 1 is DPO's own; ``lda`` alpha = 0 is DPO's logits, alpha = −1 is SFT's (:mod:`access.amplify` says how each is
exact there).

Each kind is one class registered in :data:`EDIT_KINDS` and declares:

* ``check(model)``: a one-line :class:`ProbeError` before any generation for what cannot apply;
* ``compile(model, stats)``: the functions to run at ``(hook, layer)`` sites, and any context to
  enter around generation (a patch's source in lockstep), which the torch and nnsight drivers
  apply the same way (:class:`access.drivers.SiteEdits`);
* ``placebos(model, n, seed)``: its placebo family;
* ``noop_reason(dtype)``: why it changes nothing whatever the activations (``None`` if it may
  change something), and ``changed_fraction(dtype)`` for the dtype check;
* ``describe()``: its full description, kept in ``ab_report.json``; its fingerprint (for
  resuming an interrupted A/B run) is the hash of that description.

Example:
    >>> from access.units import Neuron, NeuronSet
    >>> paper = Scale(NeuronSet([Neuron(20, 7)], hook="mlp_out"), factor=1 - 1e-6)
    >>> paper.describe()
    {'kind': 'scale', 'factor': 0.999999, 'hook': 'mlp_out', 'units': [[20, 7]]}
    >>> paper.noop_reason(torch.bfloat16)
    'factor 0.999999 rounds to exactly 1 in bfloat16: x*f == x for every bfloat16 value, so ...'
    >>> with edits(model, Scale(units, 0.0)) as stats:            # doctest: +SKIP
    ...     out = model.generate(**batch)
    >>> with edits(dpo, Patch(units, source=sft)):                 # doctest: +SKIP
    ...     out = dpo.generate(**batch)
"""

from __future__ import annotations

import hashlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from access.amplify import AmplifiedLogits, WeightBlend, unit_targets, whole_model
from access.drivers.base import SiteEdits
from access.factors import PAPER_FACTOR, validate_factor
from access.hook_points import n_layers, validate_hook, width
from access.lockstep import Lockstep
from access.placebo import placebo_sets
from access.scaling import dtype_noop_fraction
from access.sites import EditStats, add_fn, scale_fn, write_fn
from access.units import NeuronSet, check_against_model
from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

EDIT_KINDS: dict[str, type[Edit]] = {}


def register(cls: type[Edit]) -> type[Edit]:
    """Make an edit kind known by its ``kind`` name (reports, configs and the CLI find it there)."""
    EDIT_KINDS[cls.kind] = cls
    return cls


class Edit(ABC):
    """One change to a model's forward pass, as data."""

    kind: ClassVar[str]
    edits_logits: ClassVar[bool] = False  # edits the model's output logits (after its LM head), not a module's values

    @abstractmethod
    def check(self, model: PreTrainedModel) -> None:
        """Raise :class:`ProbeError` if the edit cannot apply to ``model``."""

    @abstractmethod
    def compile(self, model: PreTrainedModel, stats: EditStats) -> SiteEdits:
        """What the drivers apply: ``(hook, layer, fn)`` for each site the edit touches, and any context to enter around
        the whole generation; the site functions count into ``stats``."""

    @abstractmethod
    def placebos(self, model: PreTrainedModel, n: int, seed: int) -> list[Edit]:
        """``n`` edits of the same kind and size that touch what a random choice would."""

    def noop_reason(self, dtype: torch.dtype) -> str | None:  # noqa: ARG002 - the Edit interface
        """Why the edit changes no value whatever the activations, or ``None``."""
        return None

    def changed_fraction(self, dtype: torch.dtype) -> float:
        """Share of ``dtype``'s values the edit can change (1.0 where that depends on the activations)."""
        return 0.0 if self.noop_reason(dtype) else 1.0

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """The full description, JSON-ready."""

    @abstractmethod
    def label(self) -> str:
        """A short human name."""

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.describe(), sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class UnitEdit(Edit):
    """An edit of chosen units of one hook point; its placebos are matched random unit sets."""

    units: NeuronSet

    def check(self, model: PreTrainedModel) -> None:
        check_against_model(self.units, model)

    def placebos(self, model: PreTrainedModel, n: int, seed: int) -> list[Edit]:
        return [self.on_units(s) for s in placebo_sets(self.units, width(model, self.units.hook), n, seed)]

    def on_units(self, units: NeuronSet) -> Edit:
        """The same edit on other units."""
        return replace(self, units=units)

    def layer_index(self) -> dict[int, torch.Tensor]:
        """Per layer, the unit indices in listing order."""
        return {layer: torch.tensor(units, dtype=torch.long) for layer, units in sorted(self.units.by_layer().items())}

    def _units_description(self) -> dict[str, Any]:
        return {"hook": self.units.hook, "units": [[n.layer, n.unit] for n in self.units.neurons]}


@register
@dataclass(frozen=True)
class Scale(UnitEdit):
    """Multiply the units by ``factor`` (the product in float32; exact at 1.0)."""

    kind: ClassVar[str] = "scale"
    factor: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "factor", validate_factor(self.factor))

    def check(self, model: PreTrainedModel) -> None:
        super().check(model)
        check_finite_in_dtype(model, [self.factor], f"--factor {self.factor!r}")

    def compile(self, model: PreTrainedModel, stats: EditStats) -> SiteEdits:  # noqa: ARG002 - the Edit interface
        return SiteEdits(
            [
                (self.units.hook, layer, scale_fn(index, self.factor, stats))
                for layer, index in self.layer_index().items()
            ]
        )

    def noop_reason(self, dtype: torch.dtype) -> str | None:
        if self.changed_fraction(dtype) > 0.0:
            return None
        name = str(dtype).removeprefix("torch.")
        return (
            f"factor {self.factor!r} rounds to exactly 1 in {name}: x*f == x for every {name} value, "
            f"so the intervention is a no-op (use float32, or |1-f| large enough for {name})"
        )

    def changed_fraction(self, dtype: torch.dtype) -> float:
        return dtype_noop_fraction(self.factor, dtype)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "factor": self.factor, **self._units_description()}

    def label(self) -> str:
        return f"scale ×{self.factor!r}"


@register
@dataclass(frozen=True)
class Set(UnitEdit):
    """Write per-unit constants into the units (``values`` in the order of ``units.neurons``).

    ``pool`` (per layer, one value for every unit of the hook point, e.g. another model's mean)
    gives placebo sets their values; without it a placebo writes the same constants into its
    random units.
    """

    kind: ClassVar[str] = "set"
    values: tuple[float, ...] = ()
    pool: dict[int, np.ndarray] | None = field(default=None, compare=False)
    source: str = ""  # where the values come from, for the report

    def __post_init__(self) -> None:
        if len(self.values) != len(self.units):
            raise ProbeError(f"set: {len(self.values)} values for {len(self.units)} units; give one value per unit")
        if not all(math.isfinite(v) for v in self.values):
            raise ProbeError("set: every value must be a finite number")

    def on_units(self, units: NeuronSet) -> Edit:
        if self.pool is None:
            return replace(self, units=units)
        return replace(self, units=units, values=tuple(float(self.pool[n.layer][n.unit]) for n in units.neurons))

    def check(self, model: PreTrainedModel) -> None:
        super().check(model)
        check_finite_in_dtype(model, self.values, "set: a value")

    def compile(self, model: PreTrainedModel, stats: EditStats) -> SiteEdits:  # noqa: ARG002 - the Edit interface
        by_layer: dict[int, list[float]] = {}
        for neuron, value in zip(self.units.neurons, self.values, strict=True):
            by_layer.setdefault(neuron.layer, []).append(value)
        out = []
        for layer, index in self.layer_index().items():
            constants = torch.tensor(by_layer[layer], dtype=torch.float32)
            out.append((self.units.hook, layer, write_fn(index, _constant(constants), stats)))
        return SiteEdits(out)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source, "values": list(self.values), **self._units_description()}

    def label(self) -> str:
        return f"set to {self.source}" if self.source else "set"


@register
@dataclass(frozen=True)
class Patch(UnitEdit):
    """Each unit takes the value ``source`` computes on the same tokens,
    at every forward (the source runs in lockstep)."""

    kind: ClassVar[str] = "patch"
    source: PreTrainedModel | None = field(default=None, compare=False)
    source_name: str = "source"

    def check(self, model: PreTrainedModel) -> None:
        super().check(model)
        if self.source is None:
            raise ProbeError("patch: no source model given")
        check_same_shape(model, self.source, self.source_name)

    def compile(self, model: PreTrainedModel, stats: EditStats) -> SiteEdits:
        assert self.source is not None  # check() refuses a patch without a source
        hook, index = self.units.hook, self.layer_index()
        lockstep = Lockstep(model, self.source, {(hook, layer): units for layer, units in index.items()})
        sites = [
            (hook, layer, write_fn(units, _lockstep_values(lockstep, hook, layer), stats))
            for layer, units in index.items()
        ]
        return SiteEdits(sites, lockstep)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source_name, **self._units_description()}

    def label(self) -> str:
        return f"patch from {self.source_name}"


@register
@dataclass(frozen=True)
class Add(Edit):
    """Add ``alpha * vector`` to the hook point at one layer, at every position of every forward (a steering vector)."""

    kind: ClassVar[str] = "add"
    hook: str
    layer: int
    vector: tuple[float, ...]
    alpha: float = 1.0
    source: str = ""  # what the vector is, for the report

    def __post_init__(self) -> None:
        validate_hook(self.hook)
        object.__setattr__(self, "alpha", validate_factor(self.alpha, "alpha"))
        if not self.vector or not all(math.isfinite(v) for v in self.vector):
            raise ProbeError("add: the vector must be a non-empty list of finite numbers")

    def check(self, model: PreTrainedModel) -> None:
        expected, total = width(model, self.hook), n_layers(model)
        if len(self.vector) != expected:
            raise ProbeError(
                f"add: a vector of width {len(self.vector)} does not fit {self.hook}, "
                f"which is {expected} wide in this model"
            )
        if not 0 <= self.layer < total:
            raise ProbeError(f"add: layer {self.layer} is outside the model, which has layers 0-{total - 1}")

    def compile(self, model: PreTrainedModel, stats: EditStats) -> SiteEdits:  # noqa: ARG002 - the Edit interface
        return SiteEdits(
            [(self.hook, self.layer, add_fn(torch.tensor(self.vector, dtype=torch.float32) * self.alpha, stats))]
        )

    def placebos(self, model: PreTrainedModel, n: int, seed: int) -> list[Edit]:  # noqa: ARG002 - the Edit interface
        norm = float(np.linalg.norm(np.asarray(self.vector, dtype=np.float64)))
        rng = np.random.default_rng([seed, self.layer])
        out: list[Edit] = []
        for _ in range(n):
            direction = rng.standard_normal(len(self.vector))
            out.append(
                replace(
                    self,
                    vector=tuple(float(v) for v in direction / np.linalg.norm(direction) * norm),
                    source="random direction",
                )
            )
        return out

    def noop_reason(self, dtype: torch.dtype) -> str | None:  # noqa: ARG002 - the Edit interface
        if self.alpha == 0.0 or not any(self.vector):
            return "the steering vector is zero (alpha 0 or a zero vector): it adds nothing"
        return None

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "hook": self.hook,
            "layer": self.layer,
            "alpha": self.alpha,
            "source": self.source,
            "norm": float(np.linalg.norm(np.asarray(self.vector, dtype=np.float64))),
            "vector": list(self.vector),
        }

    def label(self) -> str:
        return f"add {self.source or 'vector'} at {self.hook} {self.layer}"


def _source_check(edit: Expo | ExpoUnits | Lda, model: PreTrainedModel) -> None:
    if edit.source is None:
        raise ProbeError(f"{edit.kind}: no source model given (the other model of the pair)")
    if edit.source is model:
        raise ProbeError(f"{edit.kind}: the source is the edited model itself; give the other model of the pair")
    check_same_shape(model, edit.source, edit.source_name, edit.kind)


@register
@dataclass(frozen=True)
class Expo(Edit):
    """Weight extrapolation: every parameter of the host set to ``θ_source + alpha * (θ_host − θ_source)`` for the
    block (:class:`access.amplify.WeightBlend`); with the host DPO and the source SFT, alpha = 0 is SFT and
    alpha = 1 is DPO. It touches the embeddings and every layer from 0 up (:meth:`first_layer`)."""

    kind: ClassVar[str] = "expo"
    alpha: float = 2.0
    source: PreTrainedModel | None = field(default=None, compare=False)
    source_name: str = "sft"

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", validate_factor(self.alpha, "--dose (alpha)"))

    def check(self, model: PreTrainedModel) -> None:
        _source_check(self, model)

    def compile(self, model: PreTrainedModel, stats: EditStats) -> SiteEdits:  # noqa: ARG002 - the Edit interface
        assert self.source is not None  # check() refuses an edit without a source
        return SiteEdits([], WeightBlend(model, self.source, self.alpha, whole_model(model)))

    def placebos(self, model: PreTrainedModel, n: int, seed: int) -> list[Edit]:  # noqa: ARG002 - the Edit interface
        return []  # every weight: no subset to draw at random

    def noop_reason(self, dtype: torch.dtype) -> str | None:  # noqa: ARG002 - the Edit interface
        return "alpha 1 is the host's own weights: the blend changes nothing" if self.alpha == 1.0 else None

    def first_layer(self, model: PreTrainedModel) -> int:  # noqa: ARG002 - the same signature for every kind
        """The lowest block whose values the edit can change: 0 (and the embeddings below it)."""
        return 0

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "alpha": self.alpha, "source": self.source_name}

    def label(self) -> str:
        return f"expo alpha={self.alpha!r}"


@register
@dataclass(frozen=True)
class ExpoUnits(UnitEdit):
    """Weight extrapolation of the units' own MLP weights only (:data:`access.amplify.UNIT_PARAMETERS`): for
    ``mlp_post`` units (hidden neurons) their gate_proj and up_proj rows and their down_proj column; for ``mlp_out``
    units (coordinates of the MLP's output) the down_proj row (and bias element) that computes each: everything
    upstream of that row feeds every output coordinate alike, so blending it would blend the whole MLP, not the unit.
    Other hook points are refused. Over every ``mlp_post`` unit of every layer it equals :class:`Expo` where the
    models differ only in bias-free gated MLP weights (the planted pair)."""

    kind: ClassVar[str] = "expo-units"
    alpha: float = 2.0
    source: PreTrainedModel | None = field(default=None, compare=False)
    source_name: str = "sft"

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", validate_factor(self.alpha, "--dose (alpha)"))

    def check(self, model: PreTrainedModel) -> None:
        super().check(model)
        unit_targets(model, self.units.hook, self.units.by_layer())
        _source_check(self, model)

    def compile(self, model: PreTrainedModel, stats: EditStats) -> SiteEdits:  # noqa: ARG002 - the Edit interface
        assert self.source is not None  # check() refuses an edit without a source
        targets = unit_targets(model, self.units.hook, self.units.by_layer())
        return SiteEdits([], WeightBlend(model, self.source, self.alpha, targets))

    def noop_reason(self, dtype: torch.dtype) -> str | None:  # noqa: ARG002 - the Edit interface
        return "alpha 1 is the host's own weights: the blend changes nothing" if self.alpha == 1.0 else None

    def first_layer(self, model: PreTrainedModel) -> int:  # noqa: ARG002 - the same signature for every kind
        """The lowest layer holding a unit (its MLP is the first module whose weights change)."""
        return min(n.layer for n in self.units.neurons)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "alpha": self.alpha, "source": self.source_name, **self._units_description()}

    def label(self) -> str:
        return f"expo-units alpha={self.alpha!r}"


@register
@dataclass(frozen=True)
class Lda(Edit):
    """Logit-difference amplification: the host's logits ``l`` become ``l + alpha * (l − l_source)``, the source
    run to its logits on the same tokens (:class:`access.amplify.AmplifiedLogits`); with the host DPO and the source
    SFT, alpha = 0 is DPO and alpha = −1 is SFT. The source runs a full forward (:meth:`first_layer` 0)."""

    kind: ClassVar[str] = "lda"
    edits_logits: ClassVar[bool] = True
    alpha: float = 1.0
    source: PreTrainedModel | None = field(default=None, compare=False)
    source_name: str = "sft"

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha", validate_factor(self.alpha, "--dose (alpha)"))

    def check(self, model: PreTrainedModel) -> None:
        _source_check(self, model)

    def compile(self, model: PreTrainedModel, stats: EditStats) -> SiteEdits:  # noqa: ARG002 - the Edit interface
        assert self.source is not None  # check() refuses an edit without a source
        return SiteEdits([], AmplifiedLogits(model, self.source, self.alpha))

    def placebos(self, model: PreTrainedModel, n: int, seed: int) -> list[Edit]:  # noqa: ARG002 - the Edit interface
        return []  # the whole output distribution: no subset to draw at random

    def noop_reason(self, dtype: torch.dtype) -> str | None:  # noqa: ARG002 - the Edit interface
        return "alpha 0 is the host's own logits: the edit changes nothing" if self.alpha == 0.0 else None

    def first_layer(self, model: PreTrainedModel) -> int:  # noqa: ARG002 - the same signature for every kind
        """0: the source runs its whole forward."""
        return 0

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "alpha": self.alpha, "source": self.source_name}

    def label(self) -> str:
        return f"lda alpha={self.alpha!r}"


def _constant(values: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: values


def _lockstep_values(lockstep: Lockstep, hook: str, layer: int) -> Callable[[], torch.Tensor]:
    """The source's values at (hook, layer) of the forward running now."""
    return lambda: lockstep.values[(hook, layer)]


def check_same_shape(
    model: PreTrainedModel, source: PreTrainedModel, source_name: str = "source", what: str = "patch"
) -> None:
    """A source model must have the edited model's configuration and module layout (the checks ``probe run`` makes of
    a pair); ``what``: the edit kind, as the error names it."""
    from access.pair import compare_configs, compare_layouts

    names = ("patched" if what == "patch" else "edited", source_name)
    problems = compare_configs(model.config, source.config, names) or compare_layouts(model, source, names)
    if problems:
        raise ProbeError(
            f"{what}: the {source_name} model is not another checkpoint of the {names[0]} one: {'; '.join(problems)}"
        )


def check_finite_in_dtype(model: PreTrainedModel, values: Sequence[float], what: str) -> None:
    """Refuse a number the model's dtype cannot hold (the edit is computed in float32 and cast back)."""
    dtype = next(model.parameters()).dtype
    largest = torch.finfo(dtype).max
    if any(abs(v) > largest for v in values):
        raise ProbeError(
            f"{what} is not a finite number in {str(dtype).removeprefix('torch.')} (largest {largest:.3g}); "
            "use a value of moderate size"
        )


def site_edits(model: PreTrainedModel, chosen: Sequence[Edit]) -> SiteEdits:
    """The drivers' form of ``chosen``: every site function, every context to enter, one shared stats object."""
    from contextlib import ExitStack

    stats = EditStats()
    for edit in chosen:
        edit.check(model)
    compiled = [edit.compile(model, stats) for edit in chosen]
    sites = [site for part in compiled for site in part.sites]
    contexts = [part.around for part in compiled if part.around is not None]

    @contextmanager
    def around() -> Iterator[None]:
        with ExitStack() as stack:
            for context in contexts:
                stack.enter_context(context)
            yield

    if len(contexts) <= 1:  # a lone context stays itself, so shared decoding can see a patch's lockstep
        return SiteEdits(sites, contexts[0] if contexts else None, stats)
    return SiteEdits(sites, around(), stats)


@contextmanager
def edits(model: PreTrainedModel, *chosen: Edit) -> Iterator[EditStats]:
    """Within the block, every forward of ``model`` has ``chosen`` applied (torch hooks; removed on exit,
    also on error)."""
    from access.drivers.torch_hooks import applied

    plan = site_edits(model, chosen)
    with applied(model, plan):
        yield plan.stats


@contextmanager
def scaled_units(model: PreTrainedModel, neurons: NeuronSet, factor: float = PAPER_FACTOR) -> Iterator[EditStats]:
    """Within the block, every forward of ``model`` sees the units of ``neurons`` scaled by ``factor``
    (the same as ``edits(model, Scale(neurons, factor))``); the product is computed in float32.

    Why this is consistent with the KV cache: ``generate`` runs the prompt forward once and
    then one forward per new token. The hook fires at each of them, on every position that
    forward computes. Keys and values cached at layer *l* are computed from the residual
    stream that already contains the intervened outputs of layers < *l* (and of *l* itself
    for resid/MLP hooks feeding layer *l+1*), so the cached generation equals a full
    recomputation of the intervened model over the whole sequence (tested with
    ``use_cache=False``).

    Hooks are removed in ``finally``: an exception inside the block (or in generation)
    leaves the model exactly as it was.
    """
    with edits(model, Scale(neurons, factor)) as stats:
        yield stats

"""A patch of units at several hook points at once, with one source in lockstep for all of them.

:class:`access.edits.Patch` patches units of one hook point. Two of them in one arm bring two source contexts, which
the shared teacher-forced engine (:mod:`access.forced_passes`) leaves to whole forwards. A layer and component profile
patches whole sub-layers, attention outputs and MLP outputs together (a window of layers, every attention output),
so :class:`JointPatch` holds one neuron set per hook point and compiles to **one** lockstep whose sites span them
all: the shared engine then runs it from its fork layer and reads its values from the one source pass per batch, as
it does for a plain patch. It is not an A/B edit kind (nothing registers it): it is how
:mod:`localize.profile` patches components.

Example:
    >>> from access.units import Neuron, NeuronSet
    >>> both = JointPatch((NeuronSet([Neuron(1, 0)], hook="attn_out"), NeuronSet([Neuron(1, 0)], hook="mlp_out")))
    >>> both.label(), [s.hook for s in both.units]
    ('patch from source', ['attn_out', 'mlp_out'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from access.drivers.base import SiteEdits
from access.edits import Edit, Patch, check_same_shape
from access.lockstep import Lockstep
from access.sites import EditStats, write_fn
from access.units import NeuronSet, check_against_model
from core.errors import ProbeError

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class JointPatch(Edit):
    """Every unit of every set in ``units`` (one per hook point) takes the value ``source`` computes on the same
    tokens."""

    kind: ClassVar[str] = "joint_patch"
    units: tuple[NeuronSet, ...]
    source: PreTrainedModel | None = field(default=None, compare=False)
    source_name: str = "source"

    def check(self, model: PreTrainedModel) -> None:
        if self.source is None:
            raise ProbeError("patch: no source model given")
        if len({s.hook for s in self.units}) != len(self.units):
            raise ProbeError("joint patch: one neuron set per hook point")
        for units in self.units:
            check_against_model(units, model)
        check_same_shape(model, self.source, self.source_name)

    def compile(self, model: PreTrainedModel, stats: EditStats) -> SiteEdits:
        assert self.source is not None  # check() refuses a patch without a source
        index = {
            (units.hook, layer): torch.tensor(members, dtype=torch.long)
            for units in self.units
            for layer, members in sorted(units.by_layer().items())
        }
        lockstep = Lockstep(model, self.source, index)
        sites = [
            (hook, layer, write_fn(members, _values(lockstep, (hook, layer)), stats))
            for (hook, layer), members in index.items()
        ]
        return SiteEdits(sites, lockstep)

    def placebos(self, model: PreTrainedModel, n: int, seed: int) -> list[Edit]:
        """One patch of matched random units per hook point, joined (each hook's draw seeded apart)."""
        drawn = [
            Patch(units, self.source, self.source_name).placebos(model, n, seed + k)
            for k, units in enumerate(self.units)
        ]
        return [
            JointPatch(tuple(p.units for p in group if isinstance(p, Patch)), self.source, self.source_name)
            for group in zip(*drawn, strict=True)
        ]

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "source": self.source_name,
            "hooks": {s.hook: [[n.layer, n.unit] for n in s.neurons] for s in self.units},
        }

    def label(self) -> str:
        return f"patch from {self.source_name}"


def _values(lockstep: Lockstep, site: tuple[str, int]) -> Any:
    return lambda: lockstep.values[site]

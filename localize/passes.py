"""Patched passes in both directions: which model is edited, with whose values, and one engine call for many sets.

Every measurement of :mod:`localize` is the gap closed (:func:`access.outcomes.gap_closed`) when a set of units of one
model takes the other model's values on the same teacher-forced tokens:

``necessity`` (DPO <- SFT)
    DPO with SFT's values at the units, against SFT: what the units are *necessary* for (how much of DPO's change
    goes when they lose it), on SFT's responses;
``sufficiency`` (SFT <- DPO)
    SFT with DPO's values, against DPO: whether the units are *sufficient* (how much of the change they carry into
    SFT alone), on DPO's responses.

A :class:`UnitSet` is a set of units of one hook point in the curve's unit space (a head at ``attn_z``, else one
coordinate); an arm is one or more of them patched together (:class:`access.joint_patch.JointPatch` where they span
several hook points). :class:`DirectionPasses` runs every arm of one direction through the shared teacher-forced
engine (:class:`access.outcomes.Outcomes`) in one call: each batch of rows is prepared once for all of them, each arm
runs from its fork layer, the patch source runs once per batch, and identical arms (the 100% point of every ranking)
run once. An empty arm reproduces the unedited pass bit for bit, so it closes exactly 0.

Example:
    >>> s = UnitSet.of("mlp_post", [(2, 5), (0, 7)], units_per_layer=32)
    >>> s.flat, [(n.layer, n.unit) for n in s.neurons().neurons]
    ((7, 69), [(0, 7), (2, 5)])
    >>> [(n.layer, n.unit) for n in UnitSet.of("attn_z", [(1, 0)], units_per_layer=2, group=3).neurons().neurons]
    [(1, 0), (1, 1), (1, 2)]
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from access.edits import Edit
    from access.outcomes import ArmOutcomes, Forced, Outcomes


@dataclass(frozen=True)
class Direction:
    """One direction of the patch: ``edited`` takes ``source``'s values and is measured against ``source``."""

    name: str
    edited: str
    source: str
    label: str
    meaning: str


NECESSITY, SUFFICIENCY = "necessity", "sufficiency"
DIRECTIONS: dict[str, Direction] = {
    d.name: d
    for d in (
        Direction(NECESSITY, "dpo", "sft", "DPO <- SFT", "what the units are necessary for"),
        Direction(SUFFICIENCY, "sft", "dpo", "SFT <- DPO", "whether the units are sufficient"),
    )
}


@dataclass(frozen=True)
class UnitSet:
    """Units of ``hook`` as sorted flat indices ``layer * units_per_layer + unit``; a unit is ``group`` coordinates."""

    hook: str
    flat: tuple[int, ...]
    units_per_layer: int
    group: int = 1

    @classmethod
    def of(cls, hook: str, units: Iterable[tuple[int, int]], units_per_layer: int, group: int = 1) -> UnitSet:
        return cls(
            hook, tuple(sorted({layer * units_per_layer + unit for layer, unit in units})), units_per_layer, group
        )

    @classmethod
    def from_flat(cls, hook: str, flat: np.ndarray, units_per_layer: int, group: int = 1) -> UnitSet:
        return cls(hook, tuple(int(i) for i in np.sort(flat)), units_per_layer, group)

    def layers(self) -> list[int]:
        return sorted({i // self.units_per_layer for i in self.flat})

    def neurons(self) -> object:
        """The coordinates as a :class:`access.units.NeuronSet` (each unit's ``group`` coordinates)."""
        from access.units import Neuron, NeuronSet

        neurons = [
            Neuron(i // self.units_per_layer, (i % self.units_per_layer) * self.group + c)
            for i in self.flat
            for c in range(self.group)
        ]
        return NeuronSet(neurons, hook=self.hook, metric="localize")

    def digest(self) -> str:
        body = np.asarray(self.flat, dtype=np.int64).tobytes()
        return hashlib.sha256(f"{self.hook}|{self.group}|".encode() + body).hexdigest()


Arm = tuple[UnitSet, ...]  # patched together; () is the unedited model


def arm_edits(arm: Arm, source: PreTrainedModel, source_name: str) -> list[Edit]:
    """The edits of one arm: a plain patch for one hook point, a joint patch for several."""
    from access.edits import Patch
    from access.joint_patch import JointPatch

    sets = [s.neurons() for s in arm if s.flat]
    if not sets:
        return []
    if len(sets) == 1:
        return [Patch(sets[0], source=source, source_name=source_name)]  # type: ignore[arg-type]
    return [JointPatch(tuple(sets), source=source, source_name=source_name)]  # type: ignore[arg-type]


@dataclass(frozen=True)
class RowGap:
    """One arm's per-row mean KL to the target, edited and unedited (the gap closed is their ratio of means)."""

    kl: np.ndarray
    kl_unedited: np.ndarray


class DirectionPasses:
    """Every arm of one direction, measured by the shared engine on the same batches (module doc)."""

    def __init__(
        self,
        direction: Direction,
        model: PreTrainedModel,
        source: PreTrainedModel,
        rows: Sequence[Forced],
        responses: str,
        max_batch_tokens: int,
    ) -> None:
        from access.outcomes import Outcomes

        self.direction, self.source = direction, source
        self.outcomes: Outcomes = Outcomes(model, source, rows, responses=responses, max_batch_tokens=max_batch_tokens)
        self.measured: dict[str, RowGap] = {}

    @property
    def n_batches(self) -> int:
        return self.outcomes.n_batches

    def run(
        self, arms: dict[Hashable, Arm], progress: Callable[[int, int], None] | None = None
    ) -> dict[Hashable, RowGap]:
        """Each arm's :class:`RowGap`; an arm already measured (the same sets) is not run again."""
        keys = {key: _arm_digest(arm) for key, arm in arms.items()}
        pending: dict[str, Arm] = {}
        for key, digest in keys.items():
            if digest not in self.measured:
                pending.setdefault(digest, arms[key])
        if pending:
            edits = [arm_edits(arm, self.source, self.direction.source) for arm in pending.values()]
            results: list[ArmOutcomes] = self.outcomes.arms(edits, progress)
            for digest, result in zip(pending, results, strict=True):
                self.measured[digest] = RowGap(result.kl, result.kl_unedited)
        return {key: self.measured[digest] for key, digest in keys.items()}


def _arm_digest(arm: Arm) -> str:
    return hashlib.sha256("|".join(sorted(s.digest() for s in arm if s.flat)).encode()).hexdigest()

"""What a ``probe localize`` run measured, handed from :mod:`localize.run` to :mod:`localize.assemble`: the plan, the
directions, each ranking's scores and unit order, the gradient passes, and every arm's per-row KLs.

Example:
    >>> ZERO
    ('zero',)
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from probes.distributed import World

if TYPE_CHECKING:
    from access.relevance import GapAttribution
    from localize.passes import Direction, RowGap
    from localize.plan import LocalizePlan
    from localize.profile import ProfileArm

ZERO: Hashable = ("zero",)  # the arm that patches nothing: f(0), exactly 0


@dataclass
class Measured:
    """What the passes gave, for :mod:`localize.assemble`: per direction, each arm key's per-row KLs."""

    plan: LocalizePlan
    directions: list[Direction]
    responses: dict[str, str]
    scores: dict[str, dict[str, np.ndarray]]  # ranking -> direction -> [layers, units]
    orders: dict[tuple[str, str], np.ndarray]  # (ranking, direction) -> unit order
    sources: dict[str, str]  # ranking -> where it came from
    attribution: dict[str, GapAttribution]
    gaps: dict[str, dict[Hashable, RowGap]] = field(default_factory=dict)
    profile: list[ProfileArm] = field(default_factory=list)
    heads: list[ProfileArm] = field(default_factory=list)
    placebo_drawn: dict[tuple[str, str], int] = field(default_factory=dict)  # (direction, point) -> random sets drawn
    seconds: dict[str, float] = field(default_factory=dict)
    world: World = field(default_factory=World)  # the processes of a torchrun launch (one: the whole run here)
    mine: list[int] = field(default_factory=list)  # the rows (indices into plan.rows) this process measures
    estimate_s: float = 0.0  # every placebo set drawn
    estimate_least_s: float = 0.0  # the sequential band's sets at the verdict points spared
    phases: dict[str, float] = field(default_factory=dict)  # the estimate per phase ("necessity passes", ...), seconds
    warnings: list[str] = field(default_factory=list)

"""The records of ``localize.json``: every curve point, the placebo band, the summaries, the profile, the verdicts.

Written and read by :mod:`core.records`, like every stored record of the toolkit (:meth:`LocalizeReport.load` gives
the typed records back). A curve point is ``(ranking, direction, k, f, CI)``; ``ranking`` is a ranking of
:data:`localize.rankings.RANKINGS`; the unedited model is the point ``k = 0`` (f exactly 0).

Example:
    >>> from core.records import from_json, to_json
    >>> point = CurvePoint("relp", "necessity", "2%", 921, 0.02, 0.41, 0.3, 0.5, {"relp": 0.6})
    >>> from_json(CurvePoint, to_json(point)) == point
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from core.records import read_record


@dataclass(frozen=True)
class CurvePoint:
    """f(k) of one ranking in one direction: ``units`` patched (``share`` of the hook's), its 95% CI over rows, and
    the estimates' prediction of it (per estimator of :mod:`access.relevance`)."""

    ranking: str
    direction: str
    k: str
    units: int
    share: float
    f: float
    ci_low: float
    ci_high: float
    estimated: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PlaceboPoint:
    """The random sets' f at one point of one direction, and their percentiles: the sets drawn (``undrawn`` more were
    configured and not drawn, the sequential band having stopped where the verdict could no longer change)."""

    direction: str
    k: str
    units: int
    share: float
    values: list[float]
    p01: float
    p05: float
    p50: float
    p95: float
    p99: float
    undrawn: int = 0


@dataclass(frozen=True)
class Stat:
    """A statistic with its 95% bootstrap CI over rows."""

    value: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class RankingSummary:
    """One ranking in one direction: CPR and CMD (MIB's, linear in k), CPR on the log k axis, the smallest k
    reaching 50% and 80% (None: none does), f at the printed points, the estimates' agreement with the patched curve
    (Pearson r over the grid), and where the ranking came from."""

    ranking: str
    label: str
    direction: str
    cpr: Stat
    cmd: Stat
    cpr_log: Stat  # CPR on the log k axis, per decade: what the ranking verdict compares
    k50: int | None
    k80: int | None
    f_at: dict[str, float]
    estimated_r: dict[str, float]
    source: str


@dataclass(frozen=True)
class ProfileRow:
    """One profile arm in one direction: what it patches (``kind``: sublayer, window or head) and the gap it
    closes."""

    direction: str
    label: str
    kind: str
    sublayer: str
    layers: list[int]
    head: int | None
    f: float
    ci_low: float
    ci_high: float
    name: str = ""


@dataclass(frozen=True)
class VerdictRecord:
    """A verdict and why."""

    verdict: str
    reason: str


@dataclass(frozen=True)
class DirectionInfo:
    """One direction as measured: what it edits with whose values, on which responses, and the gap (the unedited
    rows' mean KL to the target, nats per token)."""

    name: str
    label: str
    meaning: str
    responses: str
    gap: float
    rows: int


@dataclass
class LocalizeReport:
    """Everything ``probe localize`` measured (module doc)."""

    FORMAT: ClassVar[str] = "rolemrc-probe/localize"
    VERSION: ClassVar[int] = 1

    run_dir: str
    out_dir: str  # where localize.json and localize.html were written
    capability: str
    hook: str
    unit: str  # "head" at attn_z, else "unit"
    n_layers: int
    units_per_layer: int
    total_units: int
    split: str
    row_ids: list[int]
    window: list[int]
    directions: list[DirectionInfo]
    points: list[CurvePoint]
    placebo: list[PlaceboPoint]
    summaries: list[RankingSummary]
    profile: list[ProfileRow]
    ranking_verdict: VerdictRecord
    claim_1c: VerdictRecord
    planted: list[list[int]]
    settings: dict[str, Any]
    seconds: dict[str, float]
    estimate_s: float  # every placebo set drawn
    machine: str
    warnings: list[str] = field(default_factory=list)
    estimate_least_s: float | None = None  # the sequential band's sets spared where the curves fix the verdict

    @classmethod
    def load(cls, path: str | Path) -> LocalizeReport:
        return read_record(cls, path, "localize report")

    def curve(self, ranking: str, direction: str) -> list[CurvePoint]:
        """One ranking's points in one direction, by size (k = 0 first)."""
        return sorted(
            (p for p in self.points if p.ranking == ranking and p.direction == direction), key=lambda p: p.units
        )

    def summary(self, ranking: str, direction: str) -> RankingSummary:
        return next(s for s in self.summaries if s.ranking == ranking and s.direction == direction)

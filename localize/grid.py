"""The sizes k at which a curve is measured: shares of a hook point's units (MIB's grid) or counts of units.

A point is written ``0.2%`` (a share of every unit of the hook point at every layer, as MIB's faithfulness curves
take it) or ``16`` (a number of units, e.g. a planted pair's planted count). A share becomes ``int(share x units)``
units, as MIB's ``evaluate_area_under_curve`` does, and at least one.

Example:
    >>> [p.label for p in parse_grid("0.1%, 2%,16")]
    ['0.1%', '2%', '16']
    >>> [p.units(46_080) for p in parse_grid(DEFAULT_GRID)]
    [46, 92, 230, 460, 921, 2304, 4608, 9216, 23040, 46080]
    >>> parse_grid("0%")
    Traceback (most recent call last):
    core.config_file.OptionError: --k: expected shares in (0, 100]% or unit counts of at least 1, got '0%'
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.config_file import OptionError

DEFAULT_GRID = "0.1%,0.2%,0.5%,1%,2%,5%,10%,20%,50%,100%"  # MIB's circuit sizes (arXiv 2504.13151)


@dataclass(frozen=True, order=True)
class Point:
    """One k: a share of the hook point's units in percent, or a count of units (``share`` None)."""

    share: float | None
    count: int | None = None

    @property
    def label(self) -> str:
        return f"{self.share:g}%" if self.share is not None else str(self.count)

    def units(self, total: int) -> int:
        """How many of ``total`` units this point patches."""
        if self.share is None:
            assert self.count is not None
            return min(self.count, total)
        return max(1, min(total, int(self.share / 100 * total + 1e-9)))

    def fraction(self, total: int) -> float:
        """The share of ``total`` it patches, in [0, 1]."""
        return self.units(total) / total


def parse_grid(spec: str | list[str], flag: str = "k") -> list[Point]:
    """``"0.1%,2%,16"`` (or a list) as points, without repeats, in the order given; every share in (0, 100]."""
    items = spec.split(",") if isinstance(spec, str) else [str(s) for s in spec]
    points: list[Point] = []
    expected = "shares in (0, 100]% or unit counts of at least 1"
    for item in (s.strip() for s in items):
        if not item:
            continue
        try:
            point = Point(float(item.removesuffix("%"))) if item.endswith("%") else Point(None, int(item))
        except ValueError:
            raise OptionError(flag, expected, item) from None
        share, count = point.share, point.count
        if (share is not None and not (math.isfinite(share) and 0 < share <= 100)) or (count is not None and count < 1):
            raise OptionError(flag, expected, item)
        if point not in points:
            points.append(point)
    if not points:
        raise OptionError(flag, expected, spec)
    return points

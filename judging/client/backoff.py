"""Exponential backoff with jitter, honouring a server's ``Retry-After``.

Rate-limited endpoints (HTTP 429) and overloaded ones (5xx) recover if clients back off
and do not retry in lock-step; jitter spreads the retries of concurrent workers. When
the server says how long to wait (``Retry-After`` in seconds) we wait at least that,
capped by ``max_delay`` so a hostile header cannot stall a run for hours.

Example:
    >>> policy = BackoffPolicy(base=1.0, max_delay=8.0, jitter=0.0)
    >>> [policy.delay(a) for a in range(5)]
    [1.0, 2.0, 4.0, 8.0, 8.0]
    >>> policy.delay(0, retry_after="3")
    3.0
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from core.errors import ProbeError


@dataclass(frozen=True)
class BackoffPolicy:
    """Delay before retry number ``attempt`` (0-based): ``base * 2**attempt`` plus up to ``jitter`` of it."""

    base: float = 1.0
    max_delay: float = 30.0
    jitter: float = 0.25
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.base < 0 or self.max_delay < 0:
            raise ProbeError(f"backoff delays must be >= 0, got base={self.base}, max_delay={self.max_delay}")
        if not 0 <= self.jitter <= 1:
            raise ProbeError(f"backoff jitter must be in [0, 1], got {self.jitter}")

    def delay(self, attempt: int, retry_after: str | float | None = None) -> float:
        """Seconds to sleep before retry ``attempt``; never below the server's ``Retry-After``."""
        wait = self.base * (2 ** min(attempt, 62))
        wait = min(self.max_delay, wait + wait * self.jitter * self.rng.random())
        hinted = _seconds(retry_after)
        if hinted is not None:
            wait = max(wait, min(hinted, self.max_delay))
        return float(wait)


def _seconds(value: str | float | None) -> float | None:
    """A ``Retry-After`` value in seconds (HTTP dates are ignored: local servers send seconds)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None

"""One validated settings object for an analysis, shared by the library, the CLI and the notebook.

Everything is checked in ``__post_init__`` so that a bad value fails before any
activation is read, with a one-line :class:`ProbeError` naming the CLI option.

Example:
    >>> AnalysisConfig(metric="mean_diff").metric
    'mean_diff'
    >>> AnalysisConfig(metric="mean_diff", normalize="width")
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --normalize width only applies to --metric topk_count (the authors' /d_model scaling of count differences)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from analysis.stats import TESTS
from core.errors import ProbeError

METRICS: tuple[str, ...] = ("topk_count", "mean_diff", "effect_size")
NORMALIZATIONS: tuple[str, ...] = ("samples", "width")
RULES: tuple[str, ...] = ("top_k_abs", "fdr")
DEFAULT_LAYERS = "12-31"


@dataclass(frozen=True)
class AnalysisConfig:
    """Settings of one analysis (see ``docs/analysis.md`` for what each means)."""

    metric: str = "topk_count"
    top_percent: float = 20.0
    layers: str | None = DEFAULT_LAYERS
    normalize: str = "samples"
    top_k: int = 64
    fdr_alpha: float = 0.05
    rule: str = "top_k_abs"
    threshold: float = 0.0
    test: str = "t"
    reorder: bool = False
    top_units: int = 20

    def __post_init__(self) -> None:
        _choice("--metric", self.metric, METRICS)
        _choice("--normalize", self.normalize, NORMALIZATIONS)
        _choice("--rule", self.rule, RULES)
        _choice("--test", self.test, TESTS)
        if not (isinstance(self.top_percent, (int, float)) and 0.0 < self.top_percent <= 100.0):
            raise ProbeError(f"--top-percent {self.top_percent}: expected a number in (0, 100]")
        if self.normalize == "width" and self.metric != "topk_count":
            raise ProbeError("--normalize width only applies to --metric topk_count (the authors' /d_model scaling of count differences)")
        if not isinstance(self.top_k, int) or self.top_k < 1:
            raise ProbeError(f"--top-k {self.top_k}: expected a positive integer")
        if not 0.0 < self.fdr_alpha < 1.0:
            raise ProbeError(f"--fdr-alpha {self.fdr_alpha}: expected a number in (0, 1)")
        if not math.isfinite(self.threshold) or self.threshold < 0:
            raise ProbeError(f"--threshold {self.threshold}: expected a finite number >= 0 (a minimum |delta|)")
        if self.top_units < 1:
            raise ProbeError(f"top_units {self.top_units}: expected a positive integer")


def _choice(option: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ProbeError(f"{option} {value!r}: expected one of {', '.join(allowed)}")

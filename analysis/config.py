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

from core.errors import ProbeError

METRICS: tuple[str, ...] = ("topk_count", "mean_diff", "effect_size")
NORMALIZATIONS: tuple[str, ...] = ("samples", "width")
RULES: tuple[str, ...] = ("top_k_abs", "fdr")
TESTS: tuple[str, ...] = ("t", "wilcoxon")  # paired tests of mean_diff/effect_size (analysis.stats)


@dataclass(frozen=True)
class AnalysisConfig:
    """Settings of one analysis (see ``docs/analysis.md`` for what each means).

    ``layers=None`` is the default window: the paper's 12-31 scaled by depth
    (:func:`analysis.window.resolve_window`). ``stability_resamples`` bootstrap
    resamples of the prompts measure how stable the layer ranking is
    (:mod:`analysis.stability`); 0 disables it.
    """

    metric: str = "topk_count"
    top_percent: float = 20.0
    layers: str | None = None
    normalize: str = "samples"
    top_k: int = 64
    fdr_alpha: float = 0.05
    rule: str = "top_k_abs"
    threshold: float = 0.0
    test: str = "t"
    reorder: bool = False
    top_units: int = 20
    stability_resamples: int = 20
    stability_seed: int = 0

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
        if isinstance(self.stability_resamples, bool) or not isinstance(self.stability_resamples, int) or self.stability_resamples < 0:
            raise ProbeError(f"--stability-resamples {self.stability_resamples}: expected an integer >= 0 (0 disables the bootstrap)")
        if self.top_units < 1:
            raise ProbeError(f"top_units {self.top_units}: expected a positive integer")


def _choice(option: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ProbeError(f"{option} {value!r}: expected one of {', '.join(allowed)}")

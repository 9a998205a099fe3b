"""One validated settings object for an analysis, shared by the library, the CLI and the notebook.

Everything is checked in ``__post_init__`` so that a bad value fails before any
activation is read, with a one-line :class:`ProbeError` naming the CLI option. Types and
bounds are the field hints (:mod:`core.config_file`), which a ``--config`` file is read by too.

Example:
    >>> AnalysisConfig(metric="mean_diff").metric
    'mean_diff'
    >>> AnalysisConfig(metric="mean_diff", normalize="width")
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: --normalize width only applies to --metric topk_count (the authors' /d_model scaling of count differences)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from core.config_file import NON_NEGATIVE, POSITIVE, SEED, OptionError, Range, typed_config
from core.errors import ProbeError

ACTIVATION_METRICS: tuple[str, ...] = (
    "topk_count",
    "mean_diff",
    "effect_size",
)  # computed from the recorded activations alone
METRICS: tuple[str, ...] = (
    *ACTIVATION_METRICS,
    "attribution",
)  # attribution: a gradient pass through the models, analysis.attribution_maps
ATTRIBUTION_MS: tuple[str, ...] = ("reference_logprob", "dpo_margin")  # probes.attribution.M_CHOICES
ATTRIBUTION_POSITIONS: tuple[str, ...] = ("all", "response")
NORMALIZATIONS: tuple[str, ...] = ("samples", "width")
RULES: tuple[str, ...] = ("top_k_abs", "fdr")
TESTS: tuple[str, ...] = ("t", "wilcoxon")  # paired tests of mean_diff/effect_size (analysis.stats)


@dataclass(frozen=True)
@typed_config
class AnalysisConfig:
    """Settings of one analysis (see ``docs/analysis.md`` for what each means).

    ``layers=None`` is the default window: the paper's 12-31 scaled by depth
    (:func:`analysis.window.resolve_window`). ``stability_resamples`` bootstrap
    resamples of the prompts measure how stable the layer ranking is
    (:mod:`analysis.stability`); 0 disables it.
    """

    metric: str = "topk_count"
    top_percent: Annotated[float, Range(0, 100, low_open=True)] = 20.0
    layers: str | None = None
    normalize: str = "samples"
    top_k: Annotated[int, POSITIVE] = 64
    fdr_alpha: Annotated[float, Range(0, 1, low_open=True, high_open=True)] = 0.05
    rule: str = "top_k_abs"
    threshold: Annotated[float, NON_NEGATIVE] = 0.0  # a minimum |delta|
    test: str = "t"
    reorder: bool = False
    top_units: Annotated[int, POSITIVE] = field(default=20, metadata={"flag": None})
    stability_resamples: Annotated[int, NON_NEGATIVE] = 20  # 0 disables the bootstrap
    stability_seed: Annotated[int, SEED] = field(default=0, metadata={"flag": None})
    attribution_m: str = "reference_logprob"  # --metric attribution: the metric m whose change is attributed
    attribution_positions: str = "all"
    attribution_rows: Annotated[int, POSITIVE] = 256  # dpo_margin: pairs per capability
    dpo_data: Path | None = None  # dpo_margin: the DPO pairs (default: the run's --responses, or its DPO --data)

    def __post_init__(self) -> None:
        for name, allowed in (
            ("metric", METRICS),
            ("normalize", NORMALIZATIONS),
            ("rule", RULES),
            ("test", TESTS),
            ("attribution_m", ATTRIBUTION_MS),
            ("attribution_positions", ATTRIBUTION_POSITIONS),
        ):
            if getattr(self, name) not in allowed:
                raise OptionError(name, f"one of {', '.join(allowed)}", getattr(self, name))
        if self.normalize == "width" and self.metric != "topk_count":
            raise ProbeError(
                "--normalize width only applies to --metric topk_count (the authors' /d_model scaling of count differences)"
            )

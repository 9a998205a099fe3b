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
    core.errors.ProbeError: --normalize width only applies to --metric topk_count (the authors' /d_model scaling ...)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from access.directions import DIRECTIONS
from analysis.rankings import BASES, TOPK_COUNT, metric_help, metrics, ranking
from core.config_fields import option
from core.config_file import NON_NEGATIVE, POSITIVE, SEED, Range, choice, typed_config
from core.errors import ProbeError

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

    metric: str = option(TOPK_COUNT, metric_help())
    basis: str = option(
        "global",
        "global (DPO vs SFT on the same prompt: the paper's maps) or local (each DPO layer run on SFT's input to it: "
        "what that layer's own weights change; needs the local recording: `probe run` makes it unless --local none).",
    )
    direction: str | None = option(
        None, "local basis: dpo_on_sft or sft_on_dpo (default: the one recorded; dpo_on_sft when both were)."
    )
    top_percent: Annotated[float, Range(0, 100, low_open=True)] = option(
        20.0, "topk_count: share of units kept per sample and layer, in percent."
    )
    layers: str | None = option(
        None,
        "Layer window, e.g. 12-31, 12-, 3,5,7 or all; must lie in the model (default: the paper's 12-31 scaled by "
        "depth, 11-29 of 30 layers).",
    )
    normalize: str = option(
        "samples",
        "topk_count: divide count differences by the number of samples, or by the width (the authors' script).",
    )
    top_k: Annotated[int, POSITIVE] = option(64, "Units in each neuron set (the cap, for --rule fdr).")
    fdr_alpha: Annotated[float, Range(0, 1, low_open=True, high_open=True)] = option(
        0.05, "Benjamini-Hochberg level across layers x units."
    )
    rule: str = option(
        "top_k_abs", "Neuron selection: top_k_abs (largest |Δ|) or fdr (BH-significant, |Δ| >= --threshold)."
    )
    threshold: Annotated[float, NON_NEGATIVE] = option(0.0, "Minimum |Δ| for a selected unit.")
    test: str = option("t", "mean_diff/effect_size: paired t-test (t) or Wilcoxon signed-rank (wilcoxon).")
    reorder: bool = option(False, "Plot units sorted by summed |Δ| (as the authors' lin_heat_map intended).")
    top_units: Annotated[int, POSITIVE] = option(20, "Units listed per capability and hook in summary.json.", flag=None)
    stability_resamples: Annotated[int, Range(0, 10_000)] = option(
        20, "Bootstrap resamples of the prompts for the top layers' stability (0: off)."
    )
    stability_seed: Annotated[int, SEED] = option(0, "Seed of the bootstrap.", flag=None)
    attribution_m: str = option(
        "reference_logprob",
        "attribution: reference_logprob (DPO log-prob of each test row's reference answer) or dpo_margin (chosen - "
        "rejected log-prob on the capability's DPO pairs).",
    )
    attribution_positions: str = option(
        "all", "attribution: sum over all tokens (the positions an intervention acts at) or the response tokens only."
    )
    attribution_rows: Annotated[int, POSITIVE] = option(256, "attribution with dpo_margin: DPO pairs per capability.")
    dpo_data: Path | None = option(
        None, "attribution with dpo_margin: the DPO pairs (default: the run's --responses file or DPO --data)."
    )

    def __post_init__(self) -> None:
        for name, allowed in (
            ("metric", metrics()),
            ("normalize", NORMALIZATIONS),
            ("rule", RULES),
            ("test", TESTS),
            ("attribution_m", ATTRIBUTION_MS),
            ("attribution_positions", ATTRIBUTION_POSITIONS),
            ("basis", BASES),
        ):
            choice(name, getattr(self, name), allowed)
        if self.direction is not None:
            choice("direction", self.direction, tuple(DIRECTIONS))
            if self.basis != "local":
                raise ProbeError("--direction applies to --basis local")
        row = ranking(self.metric)
        if self.basis not in row.bases:
            able = ", ".join(m for m in metrics() if self.basis in ranking(m).bases)
            only = " and ".join(row.bases)
            raise ProbeError(
                f"--basis {self.basis} applies to the metrics {able}; {self.metric} ranks in the {only} basis only"
            )
        if self.dpo_data is not None:
            object.__setattr__(self, "dpo_data", Path(self.dpo_data))  # frozen: the one place a value is converted
        if self.normalize == "width" and not row.normalizes:
            counts = " or ".join(m for m in metrics() if ranking(m).normalizes)
            raise ProbeError(
                f"--normalize width only applies to --metric {counts} "
                "(the authors' /d_model scaling of count differences)"
            )

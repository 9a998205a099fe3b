"""The rankings: one row each, saying what it scores, in which bases, how it is computed and what must run first.

A ranking orders a hook point's units by how much fine-tuning changed them. Every consumer reads the rows:
``probe analyze --metric`` offers each ranking that makes maps (a value per prompt and unit, so p-values and a
bootstrap), ``--select`` each ranking in each basis it supports (:func:`select_rules`: ``count``, ``local_count``,
..., ``weight``), ``probe explain`` ranks every card's unit under each ranking computed from the recording alone and
gives its Δ a confidence interval the row names, and the figures and tables print its labels.

How a ranking is computed is named, not imported: ``maps`` (or ``scores``, for a ranking without per-prompt values),
``unit_ci`` and a prior pass's ``run`` are ``module:attribute`` strings that :func:`entry` imports on use, as
:mod:`access.driver_table` does for drivers. Importing this table loads no numpy, h5py or torch, so that configs and
the CLI read names and help from it at start-up; ``tests/test_rankings.py`` checks that every entry resolves to a
module of this room or one below it. The lists read off the table (:func:`metrics`, :func:`select_rules`) are
computed on each call, so that a row added at run time (``RANKINGS["mine"] = Ranking(...)``, from a notebook or a
test) is offered everywhere the table's rows are.

A ranking that needs more than the recording says so in ``prior``: a gradient pass through both models (attribution,
and any ranking read off a causal or gradient pass), or a read of both checkpoints' weights (weight change). Its
``run`` is the pass itself, which ``probe analyze`` runs data-parallel first under torchrun; ``on_demand`` says
whether ``--select`` may run it itself or must name the command that does.

A new ranking is one row here plus the function its row names and its tests (docs/extending.md, "A ranking").

Example:
    >>> ranking("topk_count").rule, ranking("attribution").bases, ranking("mean_diff").from_activations
    ('count', ('global',), True)
    >>> select_rules()["count"], select_rules()["local_mean_diff"], select_rules()["weight"]
    (('topk_count', 'global'), ('mean_diff', 'local'), ('weight_change', 'global'))
    >>> ranking("votes")
    Traceback (most recent call last):
    ...
    core.errors.ProbeError: unknown ranking 'votes'; expected one of topk_count, mean_diff, ...
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from core.errors import ProbeError

BASES: tuple[str, ...] = ("global", "local")  # analysis.basis says what each means
GLOBAL_ONLY: tuple[str, ...] = BASES[:1]


@dataclass(frozen=True)
class Prior:
    """A pass that must run before a ranking's scores can be read."""

    what: str  # in words, for messages: "a gradient pass through both models"
    cost: str  # how long, in words
    on_demand: bool  # True: ``--select`` runs it itself (seconds); False: it names the command that runs it
    run: str | None = None  # "module:attribute", (run_dir, config, world) -> Path: the pass, data-parallel over world


@dataclass(frozen=True)
class Ranking:
    """One way to rank a hook point's units by how much fine-tuning changed them (module doc)."""

    name: str  # --metric of probe analyze; the maps, summaries and neuron sets store it
    label: str  # what it scores, in words (the help of --metric)
    short: str  # its column in probe explain's ranks
    maps: str | None = None  # "module:attribute", (run, capability, hook, layers, config, models) -> MetricMaps
    scores: str | None = None  # without maps: "module:attribute", (run, hook) -> ((n_layers, width) scores, source)
    unit_ci: str | None = None  # "module:attribute", (before, after, unit, maps, seed) -> 95% CI of a card's Δ
    value_label: str = ""  # what each model's map holds (figure titles)
    delta_label: str = ""  # what its Δ is (figure titles and colour bars)
    bases: tuple[str, ...] = BASES
    prior: Prior | None = None  # None: computed from the recorded activations alone
    rule: str = ""  # --select's name for it in the global basis (default: its name); "local_" + rule in the local
    by_size: bool = False  # ranks by the size of the change (a quiet layer's units rank low)
    normalizes: bool = False  # its Δ is a count difference divided by --normalize (samples or width)

    def __post_init__(self) -> None:
        if (self.maps is None) == (self.scores is None):
            raise ValueError(f"ranking {self.name}: name exactly one of maps and scores")
        if not self.rule:
            object.__setattr__(self, "rule", self.name)

    @property
    def from_activations(self) -> bool:
        """Computed from the recorded activations alone, in seconds, with nothing to run first."""
        return self.prior is None

    @property
    def analyzed(self) -> bool:
        """``probe analyze`` offers it: it makes maps."""
        return self.maps is not None

    def rule_name(self, basis: str) -> str:
        """Its name for ``--select`` in ``basis``."""
        return self.rule if basis == "global" else f"{basis}_{self.rule}"


TOPK_COUNT, MEAN_DIFF, EFFECT_SIZE, ATTRIBUTION = "topk_count", "mean_diff", "effect_size", "attribution"
WEIGHT_CHANGE = "weight_change"
RANKINGS: dict[str, Ranking] = {
    row.name: row
    for row in (
        Ranking(
            TOPK_COUNT,
            "the paper's top-k% membership counts",
            "count",
            maps="analysis.maps:count_maps",
            unit_ci="analysis.explain:count_ci",
            value_label="count in top k%",
            delta_label="Δ count",
            rule="count",
            normalizes=True,
        ),
        Ranking(
            MEAN_DIFF,
            "the mean paired DPO − SFT activation difference",
            "mean",
            maps="analysis.maps:mean_diff_maps",
            unit_ci="analysis.explain:mean_diff_ci",
            value_label="mean activation",
            delta_label="Δ mean",
            by_size=True,
        ),
        Ranking(
            EFFECT_SIZE,
            "paired d_z",
            "d_z",
            maps="analysis.maps:effect_size_maps",
            unit_ci="analysis.explain:dz_ci",
            value_label="mean activation",
            delta_label="d_z",
        ),
        Ranking(
            ATTRIBUTION,
            "gradient x (SFT - DPO) activation: the estimated change of --attribution-m if the DPO unit took the SFT "
            "value; loads the run's models",
            "attribution",
            maps="analysis.attribution_maps:attribution_maps",
            unit_ci="analysis.explain:dz_ci",
            value_label="mean activation",
            delta_label="est. Δm (SFT value)",
            bases=GLOBAL_ONLY,
            prior=Prior(
                "a gradient pass through both models",
                "minutes on a CPU; docs/interventions.md has the default pair's time",
                on_demand=False,
                run="analysis.attribution_maps:attribution_pass",
            ),
        ),
        Ranking(
            WEIGHT_CHANGE,
            "the relative SFT → DPO change of the unit's own weights",
            "weights",
            scores="analysis.weight_change:pair_scores",
            delta_label="relative weight change",
            bases=GLOBAL_ONLY,
            prior=Prior("a read of both checkpoints' weights", "seconds", on_demand=True),
            rule="weight",
        ),
    )
}


def metrics() -> tuple[str, ...]:
    """The rankings ``probe analyze --metric`` offers: those that make maps."""
    return tuple(name for name, row in RANKINGS.items() if row.analyzed)


def activation_metrics() -> tuple[str, ...]:
    """The rankings that make maps from the recorded activations alone, in seconds."""
    return tuple(name for name in metrics() if RANKINGS[name].from_activations)


def select_rules() -> dict[str, tuple[str, str]]:
    """``--select``'s rules: every ranking in the global basis, then those that rank in the local one;
    rule -> (ranking, basis)."""
    return {
        row.rule_name(basis): (row.name, basis) for basis in BASES for row in RANKINGS.values() if basis in row.bases
    }


def ranking(name: str) -> Ranking:
    """The row of ``name``; an unknown name is one :class:`ProbeError` line listing the known ones."""
    if name not in RANKINGS:
        raise ProbeError(f"unknown ranking {name!r}; expected one of {', '.join(RANKINGS)}")
    return RANKINGS[name]


def select_rule(rule: str) -> tuple[Ranking, str]:
    """The ranking and basis of the ``--select`` rule ``rule`` (the names checked by the config)."""
    name, basis = select_rules()[rule]
    return RANKINGS[name], basis


def metric_help() -> str:
    """The help of ``--metric``: each ranking that makes maps, with what it scores."""
    named = [f"{name} ({RANKINGS[name].label})" for name in metrics()]
    return f"{', '.join(named[:-1])}, or {named[-1]}."


def entry(target: str) -> Any:
    """The object a row names, ``module:attribute``, imported now."""
    module, attribute = target.split(":")
    return getattr(importlib.import_module(module), attribute)

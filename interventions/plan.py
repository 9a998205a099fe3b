"""``plan_ab``: resolve and check every input of an A/B run before anything is generated.

An :class:`ABPlan` holds what ``run_ab`` (:mod:`interventions.ab`) then runs: the model and data file (from the run,
or explicit overrides), the rows of the target capability (and collateral ones), the neuron set of each selection
rule, the loaded models, and every arm of the configured recipes with its edits checked against its model and its
placebo sets drawn. A mistake in any of them costs seconds, not a generation pass. ``probe lmeval``
(:mod:`lmeval.run`), ``--select`` (:mod:`interventions.select_compare`) and ``probe replicate``'s estimate
(:func:`pass_count`) plan through the same functions.

Example:
    >>> neurons = resolve_neurons(ABConfig(run_dir="/no/run", capability="multi_turn", units="20:7,21:3"))
    >>> neurons.hook, [(n.layer, n.unit) for n in neurons.neurons]   # --units wins over the run's neuron set
    ('mlp_out', [(20, 7), (21, 3)])
    >>> pass_count(ABConfig(units="20:7", model_dir="m", data_file="d", edits="scale,patch", placebo=20))
    PassCount(baselines=2, arms=4, placebo_arms=60)
    >>> plan = plan_ab(ABConfig(run_dir="runs/x", capability="multi_turn"))   # doctest: +SKIP
    >>> len(plan.rows), [arm.label for arm in plan.arms]                         # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from core.capabilities import Capability
from core.errors import ProbeError
from core.rows import group_by_capability, read_test_rows
from core.run_dir import DataDir
from core.schema import TestRow
from interventions.config import ABConfig
from interventions.recipes import (
    RECIPES,
    Arm,
    RecipeSettings,
    RunData,
    draw_placebos,
    other,
    plan_arms,
)
from interventions.selection import analysed_neuron_set, load_neuron_file, merged, parse_units, ranking_from_run
from training.eval_config import HELDOUT

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from access.units import NeuronSet


def resolve_source_dir(config: ABConfig) -> Path:
    """The other model of the pair (the patch source): ``source_dir``, else the run's."""
    name = other(config.model)
    source = config.source_dir
    if source is None and config.run_dir is not None:
        from probes.store import RunReader

        with RunReader(config.run_dir) as run:
            source = run.model_info(name).get("model_dir") or run.settings.model_dir(name)
    if not source:
        needing = ",".join(e for e in config.edit.edits if RECIPES[e].needs_source)
        raise ProbeError(
            f"--edit {needing} needs the {name} model: give a run directory that records it, or --source-dir"
        )
    if not Path(source).is_dir():
        raise ProbeError(
            f"{source}: model directory not found (the {name} model, the edits' source); pass --source-dir"
        )
    return Path(source)


def _recorded(config: ABConfig) -> tuple[str | None, str | None]:
    """(model dir, data file) the run recorded for ``config.model`` (none without a run)."""
    if config.run_dir is None:
        return None, None
    from probes.store import RunReader

    with RunReader(config.run_dir) as run:
        info, settings = run.model_info(config.model), run.settings
    return info.get("model_dir") or settings.model_dir(config.model), settings.data_file


def resolve_sources(config: ABConfig) -> tuple[Path, Path]:
    """(model_dir, rows file): explicit overrides win, then what the run recorded (``--pair`` fills the rest). The
    rows are ``--data``, else the held-out split (:func:`data_synthesis.heldout.files.heldout_test_file`), or with
    ``--split test`` the run's data file."""
    model_dir, data_file = config.model_dir, config.data_file
    if data_file is None and config.split == HELDOUT:
        from data_synthesis.heldout.files import heldout_test_file

        data_file = heldout_test_file()
    if config.run_dir is None and (model_dir is None or data_file is None):
        raise ProbeError("an intervention needs a run directory, or --model-dir and --data")
    if config.run_dir is not None and (model_dir is None or data_file is None):
        recorded_model, recorded_data = _recorded(config)
        model_dir, data_file = model_dir or recorded_model, data_file or recorded_data
        if not model_dir:
            raise ProbeError(
                f"{config.run_dir}: the run does not record a model dir for {config.model!r}; pass --model-dir"
            )
        if not data_file:
            raise ProbeError(f"{config.run_dir}: the run does not record its data file; pass --data or --split heldout")
    assert model_dir is not None and data_file is not None
    if not Path(model_dir).is_dir():
        raise ProbeError(f"{model_dir}: model directory not found (model {config.model!r}); pass --model-dir")
    return Path(model_dir), Path(data_file)


def split_of(rows: Sequence[TestRow]) -> str:
    """The split ``rows`` belong to: the held-out one if every row says so (``extra["split"]``), else test.

    >>> split_of([TestRow([], "", "t", {"split": "heldout"})]), split_of([TestRow([], "", "t", {})])
    ('heldout', 'test')
    """
    return HELDOUT if rows and all(row.extra.get("split") == HELDOUT for row in rows) else "test"


def resolved_config(config: ABConfig, rows: Sequence[TestRow]) -> ABConfig:
    """``config`` as its report records it: ``split`` is the split its rows belong to (:func:`split_of`), and for
    held-out rows, which have no DPO pairs beside them, ``dpo_file`` defaults to the pairs beside the run's own data
    file (the DPO margin is measured on the training distribution's pairs whichever rows are generated)."""
    split, dpo_file = split_of(rows), config.dpo_file
    if dpo_file is None and split == HELDOUT and config.data_file is None:
        recorded = _recorded(config)[1]
        beside = DataDir(Path(recorded).parent).dpo if recorded else None
        dpo_file = beside if beside is not None and beside.is_file() else None
    if (split, dpo_file) == (config.split, config.dpo_file):
        return config
    return replace(config, split=split, dpo_file=dpo_file)


def resolve_neurons(config: ABConfig) -> NeuronSet:
    """The neuron set the config names (before checking it against a model)."""
    if config.edit.units is not None:
        return parse_units(config.edit.units, config.edit.hook)
    if config.edit.neurons is not None:
        return load_neuron_file(config.edit.neurons, config.edit.top_k)
    assert config.run_dir is not None
    if config.edit.top_k is not None:
        return ranking_from_run(config.run_dir, config.capability, config.edit.hook, config.edit.top_k)
    return analysed_neuron_set(config.run_dir, config.capability, config.edit.hook)


def neuron_source(config: ABConfig) -> str:
    """Where the config's units come from, as an error message names them."""
    return f"--units {config.edit.units}" if config.edit.units else str(config.edit.neurons or "the run's neuron set")


def provenance_warnings(neurons: NeuronSet, model: str, model_dir: Path) -> list[str]:
    """Warnings when the neuron set was ranked on a model compared with itself, or on other weights than
    the model intervened on."""
    hashes = neurons.model_hashes
    same = (
        []
        if not hashes.get("sft") or hashes.get("sft") != hashes.get("dpo")
        else [
            "the neuron set was ranked on one model recorded twice (SFT and DPO weights are both "
            f"{hashes['sft'][:12]}...): its DPO-SFT discrepancies are noise, so the selected units mean nothing; "
            "record a real SFT/DPO pair"
        ]
    )
    return same + _weights_warning(neurons, model, model_dir)


def _weights_warning(neurons: NeuronSet, model: str, model_dir: Path) -> list[str]:
    expected = neurons.model_hashes.get(model)
    if not expected:
        return []
    from core.provenance import weights_sha256

    actual = weights_sha256(model_dir)
    if actual == expected:
        return []
    return [
        f"the neuron set was ranked on {model} weights {expected[:12]}..., "
        f"but {model_dir} has weights {actual[:12]}...: the selected units may not mean the same thing in this model"
    ]


def select_rows(rows: list[TestRow], config: ABConfig) -> tuple[list[int], dict[Capability, list[int]]]:
    """Row indices to generate, and per capability the indices (into that list) it is scored on."""
    wanted = [config.target] + ([c for c in Capability if c != config.target] if config.collateral else [])
    groups = group_by_capability(rows, wanted)
    chosen: dict[Capability, list[int]] = {}
    for cap in wanted:
        by_task: dict[str, list[int]] = {}
        for index, row in groups[cap]:
            by_task.setdefault(row.task, []).append(index)
        interleaved = [i for group in zip_longest(*by_task.values()) for i in group if i is not None]
        limits = [n for n in (config.limit, None if cap == config.target else config.collateral_rows) if n is not None]
        chosen[cap] = interleaved[: min(limits)] if limits else interleaved
    if not chosen[config.target]:
        raise ProbeError(f"{config.data_file or 'the data file'}: no rows for capability {config.capability!r}")
    unique = sorted({i for indices in chosen.values() for i in indices})
    position = {row: k for k, row in enumerate(unique)}
    return unique, {cap: [position[i] for i in idx] for cap, idx in chosen.items() if idx}


def recipe_settings(config: ABConfig) -> RecipeSettings:
    """The part of ``config`` the arm recipes read."""
    return RecipeSettings(
        edits=tuple(config.edit.edits),
        factors=tuple(config.factors),
        doses=tuple(config.edit.doses),
        model=config.model,
        capability=config.capability,
        run_dir=config.run_dir,
    )


class PassCount(NamedTuple):
    """How many generation (or lm-eval) passes a config makes, before any unit is resolved."""

    baselines: int
    arms: int
    placebo_arms: int


def pass_count(config: ABConfig, recipes: list[str] | None = None) -> PassCount:
    """The passes of ``config``'s recipes (or of ``recipes`` among them; each :class:`interventions.recipes.Recipe`'s
    ``passes``) for one selection rule."""
    models, arms, placebo_arms = {config.model}, 0, 0
    for name in config.edit.edits if recipes is None else recipes:
        shape = RECIPES[name].passes
        arms += len(config.factors) if shape.per_factor else shape.arms
        arms += max(1, len(config.edit.doses)) - shape.arms if shape.per_dose else 0
        placebo_arms += shape.placebo_arms * config.placebo
        models |= {"sft", "dpo"} if shape.both_models else set()
    return PassCount(len(models), arms, placebo_arms)


def placebo_passes(config: ABConfig, count: PassCount) -> tuple[int, int]:
    """How many of ``count``'s placebo passes run, at least and at most (each arm with placebo sets has
    ``config.placebo`` of them; :func:`interventions.sequential.placebo_runs`).

    >>> config = ABConfig(units="20:7", model_dir="m", data_file="d", edits="scale,patch", placebo=20)
    >>> placebo_passes(config, pass_count(config))
    (0, 60)
    """
    from interventions.sequential import placebo_runs

    arms = count.placebo_arms // config.placebo if config.placebo else 0
    return placebo_runs([config.placebo] * arms, config.placebo_generation)


@dataclass
class ModelPool:
    """The pair's models, each loaded on first use and checked to share the first one's tokenizer."""

    config: ABConfig
    dirs: dict[str, Path]
    models: dict[str, PreTrainedModel] = field(default_factory=dict)
    tokenizer: PreTrainedTokenizerBase | None = None

    def model(self, name: str) -> PreTrainedModel:
        """Model ``name`` of the pair (the other model is needed only to patch from it)."""
        if name not in self.models:
            self._load(name)
        return self.models[name]

    def _load(self, name: str) -> None:
        import torch

        from core.models import check_same_tokenizer, load_causal_lm

        directory = self.dirs.get(name) or resolve_source_dir(self.config)
        model, tokenizer = load_causal_lm(
            directory,
            "--model-dir" if name == self.config.model else "--source-dir",
            dtype=getattr(torch, self.config.dtype),
            device=self.config.device,
            eval_mode=True,
        )
        if self.tokenizer is not None:
            check_same_tokenizer(
                self.tokenizer, tokenizer, "the patched model and its source (--edit patch)", (self.config.model, name)
            )
        else:
            self.tokenizer = tokenizer
        self.dirs[name], self.models[name] = Path(directory), model


def planned_arms(
    config: ABConfig,
    selections: dict[str, NeuronSet],
    model_of: Callable[[str], PreTrainedModel],
    only_model: str | None = None,
) -> list[Arm]:
    """Every arm of every selection rule (``only_model``: of those that run on it), each edit checked against its
    model before anything is generated, and each arm's placebo sets drawn (none for an arm that is a no-op in the
    model's dtype)."""
    arms = [
        replace(arm, rule=rule, label=f"{rule}: {arm.label}" if rule else arm.label)
        for rule, chosen in selections.items()
        for arm in plan_arms(RunData(recipe_settings(config), chosen, model_of))
        if only_model is None or arm.model == only_model
    ]
    for arm in arms:
        model = model_of(arm.model)
        for edit in arm.edits:
            edit.check(model)
        if not any(e.noop_reason(model.dtype) for e in arm.edits):
            arm.placebo_edits = draw_placebos(arm, model, config.placebo, config.seed)
    return arms


def checked_selections(
    config: ABConfig, model: PreTrainedModel, selections: dict[str, NeuronSet] | None = None
) -> dict[str, NeuronSet]:
    """rule -> its units ("": the config's one set), each checked to fit ``model`` (a meta-device skeleton will do)."""
    from access.units import check_against_model

    chosen = selections or {"": resolve_neurons(config)}
    for rule, units in chosen.items():
        check_against_model(units, model, f"--select {rule}" if rule else neuron_source(config))
    return chosen


def check_responses(
    config: ABConfig, model_dir: Path, data_file: Path, rows: Sequence[TestRow], row_ids: Sequence[int]
) -> None:
    """With outcomes on, ``--responses FILE`` (or an earlier run's folder) read and checked now, as the outcomes will
    read it (:func:`interventions.outcomes.outcome_inputs`: every line's shape, rows, token ids and fingerprints,
    and each prompt plus response within the context), for every model whose arms' outcomes teacher-force it:
    a bad file is refused before any model loads, not after the arms' generation. ``rows``: the target
    capability's rows, ``row_ids`` their indices in the data file. Without the other model of the pair the run
    measures no outcomes (:func:`interventions.outcome_runs.outcome_runs`), so the file is not read."""
    from probes.outcome_rows import response_source

    if config.outcomes == "off" or response_source(config.responses) != "file":
        return
    from core.models import load_tokenizer
    from interventions.outcomes import checked_responses

    try:
        dirs = {config.model: model_dir, other(config.model): resolve_source_dir(config)}
    except ProbeError:
        return
    tokenizer = load_tokenizer(model_dir, "--model-dir")
    both = any(RECIPES[name].passes.both_models for name in config.edit.edits)
    for target in (other(config.model), config.model) if both else (other(config.model),):
        checked_responses(tokenizer, rows, row_ids, config.responses, target, data_file, dirs)


@dataclass
class ABPlan:
    """Everything an A/B run needs, resolved and checked (module doc)."""

    config: ABConfig
    model_dir: Path
    data_file: Path
    rows: list[TestRow]
    row_ids: list[int]  # the rows' indices in the data file
    groups: dict[Capability, list[int]]  # per capability, the indices into ``rows`` it is scored on
    selections: dict[str, NeuronSet]  # rule -> its units ("": the config's one set)
    pool: ModelPool
    arms: list[Arm]

    @property
    def neurons(self) -> NeuronSet:
        """Every unit any arm edits (the one set, or the rules' sets merged)."""
        return self.selections[""] if "" in self.selections else merged(list(self.selections.values()))

    @property
    def models(self) -> dict[str, PreTrainedModel]:
        return self.pool.models

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        """The pair's tokenizer (the intervened model's, loaded with it)."""
        assert self.pool.tokenizer is not None, "plan_ab loads the intervened model"
        return self.pool.tokenizer


def plan_ab(config: ABConfig, selections: dict[str, NeuronSet] | None = None) -> ABPlan:
    """Resolve and check every input of ``config``'s A/B run (module doc); ``selections`` (rule -> units) replaces
    the config's neuron set by several, as ``--select`` does."""
    model_dir, data_file = resolve_sources(config)
    named = selections or {"": resolve_neurons(config)}  # a bad neuron file is said before the rows are read
    all_rows = read_test_rows(data_file)
    config = resolved_config(config, all_rows)
    row_ids, groups = select_rows(all_rows, config)
    target = groups[config.target]
    check_responses(config, model_dir, data_file, [all_rows[row_ids[i]] for i in target], [row_ids[i] for i in target])
    pool = ModelPool(config, {config.model: model_dir})
    chosen = checked_selections(config, pool.model(config.model), named)
    return ABPlan(
        config=config,
        model_dir=model_dir,
        data_file=data_file,
        rows=[all_rows[i] for i in row_ids],
        row_ids=row_ids,
        groups=groups,
        selections=chosen,
        pool=pool,
        arms=planned_arms(config, chosen, pool.model),
    )

"""Arm recipes: what each ``--edit`` name adds to an A/B run, built from the run's own data.

An :class:`Arm` is a named list of edits applied to one model of the pair and compared with
that model's unedited baseline; its placebo arms apply the edits' placebo family. Each recipe is one
:class:`Recipe` row of :data:`RECIPES`: the function that turns the selected units (the run's ranking, as for every
arm) and what the run recorded into arms, the passes they make, what it needs and its line of ``--edit``'s help:

==========  ====================================================================================
``scale``   the units scaled by ``--factor`` (main), each ``--dose``, and factor 0 as the
            positive control; placebos for the main factor
``mean``    mean-ablation: the units set to the *other* model's mean over the capability's prompts
            (read from the run's recording, at the recorded position)
``patch``   cross-checkpoint patching both ways: ``DPO ← SFT`` (DPO generates, the units take
            SFT's values on the same tokens) and ``SFT ← DPO``
``steer``   the other model's mean minus this model's, at the hook point of each layer holding
            selected units, added at every position (ActAdd-style). For ``resid_post`` only
            the lowest such layer: the residual stream carries a difference added there upward,
            so adding each layer's would count it again.
``expo``    weight extrapolation θ_SFT + alpha(θ_DPO − θ_SFT) of the DPO model, one arm per alpha of
            ``--dose`` (default 2); no placebos (every weight)
``expo-``   the same blend on the selected units' MLP weights only, one arm per alpha; placebos
``units``   (matched random units, same blend) for the main alpha: the first alpha above 1, else the first
``lda``     logit-difference amplification logit_DPO + alpha(logit_DPO − logit_SFT), one arm per alpha; no placebos
==========  ====================================================================================

The amplification arms (``expo``, ``expo-units``, ``lda``) always run on the DPO model with SFT as the source, so
alpha = 1 (``expo``) or 0 (``lda``) is DPO itself.

A new recipe is one row of :data:`RECIPES` (and its build function beside it); a new edit kind is one class in
:mod:`access.edits`. The module imports neither torch, numpy nor h5py until a recipe builds, so that ``--edit``'s
help and its check read the rows at start-up.

Example:
    >>> RECIPES["patch"].needs_source, RECIPES["mean"].needs_run, RECIPES["lda"].default_alpha
    (True, True, 1.0)
    >>> [name for name, recipe in RECIPES.items() if recipe.directional]   # claim 4's arms move toward the other model
    ['mean', 'patch', 'steer']
    >>> recipe_of("patch dpo<-sft").name, recipe_of("count: scale 0.0")   # an arm by its name; a rule's arm: none
    ('patch', None)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from core.errors import ProbeError

if TYPE_CHECKING:
    import numpy as np
    from transformers import PreTrainedModel

    from access.edits import Edit
    from access.units import NeuronSet


def other(model: str) -> str:
    """The pair's other model.

    >>> other("sft")
    'dpo'
    """
    from probes.store import MODELS

    return MODELS[1 - MODELS.index(model)]


@dataclass
class Arm:
    """Edits applied to one model of the pair, compared with that model's baseline."""

    name: str  # stable, unique within a rule; with the edits' hash, the arm's key in the resume store
    label: str  # what it does, in words
    role: str  # "main" | "dose" | "control" | "arm"
    model: str  # the model that generates
    edits: tuple[Edit, ...]
    placebo: bool = True  # run the edits' placebo family
    factor: float | None = None  # scale arms
    placebo_edits: list[tuple[Edit, ...]] = field(default_factory=list)
    rule: str = ""  # the selection rule whose units it edits (``--select``); "" for the run's one neuron set
    recipe: str = ""  # the key of its row in RECIPES (set by plan_arms)

    @property
    def title(self) -> str:
        """The arm's name in the report: ``name``, after its rule when there is one ("count: scale 0.0")."""
        return f"{self.rule}: {self.name}" if self.rule else self.name

    def describe(self) -> list[dict[str, Any]]:
        return [edit.describe() for edit in self.edits]


@dataclass(frozen=True)
class RecipeSettings:
    """What of an A/B config the recipes read (:func:`interventions.plan.recipe_settings` takes it from an ABConfig)."""

    edits: tuple[str, ...]  # recipe names, in order: the first one's first arm is the main arm
    factors: tuple[float, ...]  # the main factor first, then doses and the positive control
    doses: tuple[float, ...]
    model: str  # the edited model: "sft" or "dpo"
    capability: str
    run_dir: str | Path | None


class RunData:
    """What recipes read: the settings, the selected units, the loaded models, the run's per-model means."""

    def __init__(self, config: RecipeSettings, units: NeuronSet, model_of: Callable[[str], PreTrainedModel]) -> None:
        self.config, self.units, self.model_of = config, units, model_of
        self._means: dict[str, dict[int, np.ndarray]] | None = None

    def means(self, edit: str) -> dict[str, dict[int, np.ndarray]]:
        """Per model, per recorded layer, the mean activation over the capability's prompts."""
        if self._means is None:
            self._means = read_means(self.config, self.units, edit)
        return self._means


def read_means(config: RecipeSettings, units: NeuronSet, edit: str) -> dict[str, dict[int, np.ndarray]]:
    import numpy as np

    from interventions.selection import require_recorded
    from probes.store import MODELS, RunReader

    assert config.run_dir is not None, "ABConfig refuses these edits without a run"
    require_recorded(config.run_dir, config.capability, units.hook)
    with RunReader(config.run_dir) as run:
        layers = run.layers(config.capability, units.hook)
        means = {m: run.activations(m, config.capability, units.hook).astype(np.float64).mean(axis=0) for m in MODELS}
    missing = sorted(set(units.by_layer()) - set(layers))
    if missing:
        raise ProbeError(
            f"--edit {edit}: layer {missing[0]} holds selected units but was not recorded in {config.run_dir} "
            f"(recorded: {layers[0]}-{layers[-1]}); select units in recorded layers"
        )
    return {m: {layer: means[m][j] for j, layer in enumerate(layers)} for m in MODELS}


def scale_arms(data: RunData) -> list[Arm]:
    from access.edits import Scale

    cfg, arms = data.config, []
    for k, factor in enumerate(cfg.factors):
        role = "main" if k == 0 else ("control" if factor == 0.0 and factor not in cfg.doses else "dose")
        arms.append(
            Arm(
                f"scale {factor!r}",
                f"scale ×{factor!r}",
                role,
                cfg.model,
                (Scale(data.units, factor),),
                placebo=k == 0,
                factor=factor,
            )
        )
    return arms


def mean_arms(data: RunData) -> list[Arm]:
    from access.edits import Set

    cfg, source = data.config, other(data.config.model)
    pool = data.means("mean")[source]
    values = tuple(float(pool[n.layer][n.unit]) for n in data.units.neurons)
    edit = Set(data.units, values, pool=pool, source=f"{source} mean over {cfg.capability}")
    return [
        Arm(
            "mean",
            f"mean-ablation: units set to the {source.upper()} mean over {cfg.capability}",
            "arm",
            cfg.model,
            (edit,),
        )
    ]


def patch_arms(data: RunData) -> list[Arm]:
    from access.edits import Patch

    first = data.config.model
    return [
        Arm(
            f"patch {target}<-{other(target)}",
            f"patch {target.upper()} ← {other(target).upper()}: units take the {other(target).upper()} "
            "model's values on the same tokens",
            "arm",
            target,
            (Patch(data.units, source=data.model_of(other(target)), source_name=other(target)),),
        )
        for target in (first, other(first))
    ]


def steer_arms(data: RunData) -> list[Arm]:
    from access.edits import Add
    from access.hook_table import HOOK_TABLE

    cfg, hook = data.config, data.units.hook
    means, source = data.means("steer"), other(cfg.model)
    layers = sorted(data.units.by_layer())
    layers = layers[:1] if HOOK_TABLE[hook].part == "block" else layers  # the residual stream carries it upward
    edits = tuple(
        Add(
            hook,
            layer,
            tuple(float(v) for v in means[source][layer] - means[cfg.model][layer]),
            1.0,
            source=f"{source} - {cfg.model} mean difference",
        )
        for layer in layers
    )
    where = ", ".join(str(layer) for layer in layers)
    return [
        Arm(
            "steer",
            f"steer {cfg.model.upper()} toward {source.upper()}: + ({source.upper()} − {cfg.model.upper()}) "
            f"mean at {hook} layer{'s' if len(layers) > 1 else ''} {where}",
            "arm",
            cfg.model,
            edits,
        )
    ]


AMPLIFIED, AMPLIFY_SOURCE = "dpo", "sft"  # the amplification arms' host and source


def alphas(data: RunData, recipe: str) -> list[float]:
    """The amplification arms' alpha values: ``--dose``, the main one first (the first above 1, else the first), or the
    recipe's default."""
    default = RECIPES[recipe].default_alpha
    assert default is not None, "an amplification recipe has a default alpha"
    given = list(data.config.doses) or [default]
    main = next((a for a in given if a > 1.0), given[0])
    return [main, *(a for a in given if a != main)]


def _amplified(data: RunData, recipe: str, make: Callable[[float, PreTrainedModel], Edit], what: str) -> list[Arm]:
    source = data.model_of(AMPLIFY_SOURCE)
    placebos = RECIPES[recipe].passes.placebo_arms > 0  # for the main alpha's arm only
    return [
        Arm(
            f"{recipe} {alpha!r}",
            f"{make(alpha, source).label()}: {what}",
            "dose",
            AMPLIFIED,
            (make(alpha, source),),
            placebo=k == 0 and placebos,
        )
        for k, alpha in enumerate(alphas(data, recipe))
    ]


def expo_arms(data: RunData) -> list[Arm]:
    from access.edits import Expo

    return _amplified(
        data, "expo", lambda a, src: Expo(a, src, AMPLIFY_SOURCE), "every weight θ_SFT + alpha(θ_DPO − θ_SFT)"
    )


def expo_units_arms(data: RunData) -> list[Arm]:
    from access.edits import ExpoUnits

    return _amplified(
        data,
        "expo-units",
        lambda a, src: ExpoUnits(data.units, a, src, AMPLIFY_SOURCE),
        f"the selected {data.units.hook} units' MLP weights θ_SFT + alpha(θ_DPO − θ_SFT)",
    )


def lda_arms(data: RunData) -> list[Arm]:
    from access.edits import Lda

    return _amplified(
        data,
        "lda",
        lambda a, src: Lda(a, src, AMPLIFY_SOURCE),
        "logits logit_DPO + alpha(logit_DPO − logit_SFT), SFT in lockstep",
    )


class RecipePasses(NamedTuple):
    """The passes a recipe's arms make, known before any unit is resolved (:func:`interventions.plan.pass_count`)."""

    arms: int  # per_factor: one arm per factor of the config
    placebo_arms: int  # arms that run the edits' placebo family
    both_models: bool = False  # it edits both models, so both baselines run
    per_factor: bool = False
    per_dose: bool = False  # one arm per --dose value (at least one); placebos for one of them


# what an arm's placebo sets are, in words (the placebo family of its edits, access.edits)
MATCHED_UNITS = "random units, same hook point and count per layer"
MATCHED_DIRECTIONS = "random directions of the same norm at the same layers"
MATCHED_BLEND = "random units, same hook point and count per layer, given the same blend"
NO_PLACEBO = "none: the edit is the whole model (every weight, or the whole output distribution)"


@dataclass(frozen=True)
class Recipe:
    """One ``--edit`` recipe: how it builds its arms and everything the rest of the toolkit reads about it.

    Args:
        name: the ``--edit`` name; an arm's name starts with it (``patch dpo<-sft``, :func:`recipe_of`).
        build: the run's data (:class:`RunData`) -> the recipe's arms, the main one first.
        passes: the passes its arms make (:func:`interventions.plan.pass_count`, ``probe replicate``'s estimate).
        help: its entry in ``--edit``'s help (:mod:`interventions.edit_spec`).
        placebo: what its arms' placebo sets are, in words (the report's ``placebo.family``).
        needs_run: it reads the run's recorded activations (refused without RUN_DIR before anything loads).
        needs_source: it runs the pair's other model (the run's, ``--source-dir``, or the default pair's).
        default_alpha: an amplification recipe's alpha without ``--dose``.
        directional: its arms move one model's units toward the other's, so they can show that the units carry the
            difference between the two models (claim 4, :mod:`study.verdicts`).
        pass_cost: a pass's cost against one decoded alone, where it cannot share batches (``probe replicate``'s
            estimate; None: it shares them).
    """

    name: str
    build: Callable[[RunData], list[Arm]]
    passes: RecipePasses
    help: str
    placebo: str = MATCHED_UNITS
    needs_run: bool = False
    needs_source: bool = False
    default_alpha: float | None = None
    directional: bool = False
    pass_cost: float | None = None


PATCH_COST = 1.7  # a patch pass runs the source model in lockstep up to the patched layers (the default pair's pace)

RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        # the main factor's arm has placebos, doses and control do not
        Recipe("scale", scale_arms, RecipePasses(1, 1, per_factor=True), "factor, doses, control"),
        Recipe("mean", mean_arms, RecipePasses(1, 1), "the other model's mean", needs_run=True, directional=True),
        Recipe(
            "patch",
            patch_arms,
            RecipePasses(2, 2, both_models=True),  # both ways
            "both ways between the pair",
            needs_source=True,
            directional=True,
            pass_cost=PATCH_COST,
        ),
        Recipe(
            "steer",
            steer_arms,
            RecipePasses(1, 1),
            "mean-difference vector",
            MATCHED_DIRECTIONS,
            needs_run=True,
            directional=True,
        ),
        Recipe(
            "expo",
            expo_arms,
            RecipePasses(1, 0, per_dose=True),
            "weights SFT + alpha (DPO - SFT), alpha from --dose",
            NO_PLACEBO,
            needs_source=True,
            default_alpha=2.0,
        ),
        Recipe(
            "expo-units",
            expo_units_arms,
            RecipePasses(1, 1, per_dose=True),  # the main alpha's arm has placebos
            "the same on the units' MLP weights",
            MATCHED_BLEND,
            needs_source=True,
            default_alpha=2.0,
        ),
        Recipe(
            "lda",
            lda_arms,
            RecipePasses(1, 0, per_dose=True),
            "logits DPO + alpha (DPO - SFT)",
            NO_PLACEBO,
            needs_source=True,
            default_alpha=1.0,
        ),
    )
}


def recipe_of(arm_name: str) -> Recipe | None:
    """The recipe an arm of a report comes from, by the arm's name (None: a rule's arm, ``count: scale 0.0``, or no
    recipe's)."""
    return RECIPES.get(arm_name.split(" ", 1)[0])


def plan_arms(data: RunData) -> list[Arm]:
    """Every arm of the configured recipes, in order; the first recipe's first arm is the main arm."""
    arms = [replace(arm, recipe=name) for name in data.config.edits for arm in RECIPES[name].build(data)]
    if arms and arms[0].role != "main":
        arms[0].role = "main"
    return arms


def placebo_family(arm: Arm) -> str:
    """What the arm's placebo sets are, in words (its recipe's :attr:`Recipe.placebo`)."""
    return RECIPES[arm.recipe].placebo


def draw_placebos(arm: Arm, model: PreTrainedModel, n: int, seed: int) -> list[tuple[Edit, ...]]:
    """The arm's ``n`` placebo arms: each edit replaced by the k-th member of its placebo family."""
    if not arm.placebo or n == 0:
        return []
    families = [edit.placebos(model, n, seed) for edit in arm.edits]
    return [tuple(family[k] for family in families) for k in range(n)]

"""``localize``: where the change lives, measured: faithfulness curves per ranking, the placebo band, the layer and
component profile, and the two verdicts, written to ``localize.json`` and ``localize.html``.

The steps, each with progress and the time left (an estimate is said first):

1. plan (:func:`localize.plan.plan_localize`): every input checked before a model loads;
2. the rankings that need no pass (the run's recording, the weights) and, per direction, the target's responses
   (:mod:`localize.responses`) and one gradient pass (:func:`access.relevance.gap_attribution`: the attribution and
   RelP rankings, and every ranking's estimated curve);
3. per direction, every arm in one call of the shared teacher-forced engine (:class:`localize.passes.DirectionPasses`):
   each ranking's top-k units at each grid point (nested sets), the random sets at the placebo points, the profile's
   sub-layers and windows, then each head of the attention steps that closed the most;
4. the summaries and verdicts (:mod:`localize.assemble`), the files.

Example:
    >>> [d.label for d in DIRECTIONS.values()]
    ['DPO <- SFT', 'SFT <- DPO']
    >>> report = localize(LocalizeConfig(run_dir="runs/latest", capability="multi_turn"))     # doctest: +SKIP
    >>> report.ranking_verdict.verdict, report.claim_1c.verdict                               # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

from localize.config import LocalizeConfig
from localize.measured import ZERO, Measured
from localize.passes import DIRECTIONS, Arm, Direction, DirectionPasses, RowGap, UnitSet
from localize.plan import LocalizePlan, plan_localize
from localize.profile import SUBLAYERS, ProfileArm, head_arms, profile_arms
from localize.rankings import RANKINGS, Inputs, unit_order
from localize.sequential import ALL, SEQUENTIAL
from probes.distributed import World

if TYPE_CHECKING:
    from access.outcomes import Forced
    from access.pair import ModelPair
    from localize.records import LocalizeReport

Say = Callable[[str], None]


def localize(config: LocalizeConfig, say: Say = lambda _: None) -> LocalizeReport | None:
    """Measure (module doc) and write ``localize.json`` and ``localize.html``; returns the report (None on a helper
    rank of a ``torchrun`` launch, :mod:`localize.parallel`)."""
    from dataclasses import replace

    from probes.distributed import joined, machine_device, reported_once, world_from_env

    world = world_from_env()
    with reported_once(world):
        device = machine_device(config.device, world)
        with joined(world):
            return _localize(replace(config, device=device or config.device), say if world.is_main else _quiet, world)


def _quiet(_: str) -> None:
    return None


def _localize(config: LocalizeConfig, say: Say, world: World) -> LocalizeReport | None:
    from access.pair import load_pair
    from localize.assemble import assemble
    from localize.page import write_report
    from localize.parallel import share

    plan = world.agree(lambda: plan_localize(config))
    clock = time.perf_counter()
    pair = load_pair(plan.sft_dir, plan.dpo_dir, device=config.device, dtype="float32")
    directions = [DIRECTIONS[d] for d in config.direction_list]
    measured = Measured(plan, directions, {}, {}, {}, {}, {}, world=world, mine=share(world, len(plan.rows)))
    measured.seconds["load"] = time.perf_counter() - clock
    _scores(plan, [d.name for d in directions], measured, passed=False)
    _say_estimate(plan, pair, directions, say, measured)
    rows = _responses(plan, pair, directions, say, measured)
    _gradients(plan, pair, rows, directions, measured)
    _scores(plan, [d.name for d in directions], measured, passed=True)
    say(f"rankings: {', '.join(measured.scores)}")
    _measure(plan, pair, rows, directions, say, measured)
    if not world.is_main:
        return None
    report = assemble(measured)
    write_report(report, plan.out)
    return report


def _timed(measured: Measured, name: str) -> Callable[[], None]:
    start = time.perf_counter()
    return lambda: measured.seconds.__setitem__(name, measured.seconds.get(name, 0.0) + time.perf_counter() - start)


def _say_estimate(plan: LocalizePlan, pair: ModelPair, directions: list[Direction], say: Say, m: Measured) -> None:
    """The estimate, before anything expensive: the activation rankings' forks are known, the estimated rankings'
    are taken at layer 0 (the worst case)."""
    from core.chat import encode_conversations
    from core.pace import parameter_count, sized
    from localize.band import band_cost
    from localize.estimate import estimate, fork_fraction

    parameters = parameter_count(plan.dpo_dir)
    mine = [plan.rows[k] for k in m.mine]  # this process's rows (all of them but under torchrun)
    encoded = encode_conversations(pair.tokenizer, [list(r.question) for r in mine], add_generation_prompt=True)
    prompts = [len(ids) for ids in encoded]
    new = plan.config.max_new_tokens
    tokens = float(sum(prompts) + new * len(prompts))
    fractions = [fork_fraction(_layers_of(flat, plan), plan.shape.n_layers) for flat in _planned_sets(plan, m)]
    fractions += [fork_fraction([(layer, 0) for layer in a.layers], plan.shape.n_layers) for a in _profile(plan)]
    heads, call = _planned_heads(plan)
    cost = band_cost(plan, tokens)
    guess = estimate(
        {d.name: fractions + heads for d in directions},
        tokens,
        float(sum(prompts)),
        float(new * len(prompts)),
        parameters=parameters,
        gradient=True,
        generate=plan.config.responses == "greedy",
        band=dict.fromkeys([d.name for d in directions], cost),
        extra={directions[0].name: call},
    )
    m.estimate_s, m.estimate_least_s = guess.total, guess.least
    if sized(str(pair.device), parameters):
        m.phases = dict(guess.seconds)
        say(
            f"localize: {len(plan.rows)} rows, {plan.shape.total} {_unit(plan)}s of {plan.config.hook}, "
            f"{len(plan.config.ranking_list)} rankings x {len(plan.points)} points; {guess.line()}"
        )
    else:
        say(f"localize: {len(plan.rows)} rows; the time left is said after the first batch")


def _planned_heads(plan: LocalizePlan) -> tuple[list[float], float]:
    """The heads' arms' fork fractions and the source pass of their call in the first direction (a later call), as
    far as known before the profile: each head layer taken at the middle of the window."""
    if not (plan.config.profile and plan.config.head_layers):
        return [], 0.0
    layer, n_layers = plan.window[len(plan.window) // 2], plan.shape.n_layers
    heads = [1.0 - layer / n_layers] * (plan.config.head_layers * plan.shape.heads)
    return heads, (layer + 1) / n_layers


def _unit(plan: LocalizePlan) -> str:
    return "head" if plan.shape.group > 1 else "unit"


def _responses(
    plan: LocalizePlan, pair: ModelPair, directions: list[Direction], say: Say, m: Measured
) -> dict[str, list[Forced]]:
    """Each direction's rows with its target's responses (the same for two directions with the same target)."""
    from localize.responses import forced_rows

    done = _timed(m, "responses")
    out: dict[str, list[Forced]] = {}
    for direction in directions:
        target = pair.models()[direction.source]
        out[direction.name], m.responses[direction.name] = forced_rows(
            plan.config.responses,
            direction.source,
            target,
            pair.tokenizer,
            [plan.rows[k] for k in m.mine],
            [plan.row_ids[k] for k in m.mine],
            plan.data_file,
            {"sft": plan.sft_dir, "dpo": plan.dpo_dir},
            plan.config.max_new_tokens,
            say,
        )
    done()
    return out


def _gradients(
    plan: LocalizePlan, pair: ModelPair, rows: dict[str, list[Forced]], directions: list[Direction], m: Measured
) -> None:
    """One gradient pass per direction (both estimates of every unit), when a ranking or the estimated curves need
    it."""
    from access.relevance import attribution_batches, gap_attribution
    from core.progress import stage
    from localize.parallel import gathered_attribution

    for direction in directions:
        done = _timed(m, "gradient")
        model, target = pair.models()[direction.edited], pair.models()[direction.source]
        total = len(attribution_batches(rows[direction.name]))
        with stage(
            f"gradient {direction.label}",
            total,
            unit="batches",
            step="batch",
            enabled=m.world.is_main,
            estimate_s=m.phases.get(f"{direction.name} gradient"),
        ) as bar:
            found = gap_attribution(
                model, target, rows[direction.name], _gradient_hooks(plan), progress=lambda k, _: _bar(bar, k)
            )
        m.attribution[direction.name] = gathered_attribution(m.world, m.mine, len(plan.rows), found)
        done()


def _gradient_hooks(plan: LocalizePlan) -> list[str]:
    """The curve's hook point, and the attention output where heads are chosen within profile steps of several
    layers (:func:`_top_attention`)."""
    attention = SUBLAYERS["attention"]
    narrowing = plan.config.profile and plan.config.head_layers and plan.config.profile_width > 1
    return list(dict.fromkeys([plan.config.hook, *([attention] if narrowing else [])]))


def _scores(plan: LocalizePlan, directions: list[str], m: Measured, *, passed: bool) -> None:
    """Every ranking's scores and unit order: those that need no pass (``passed`` False: before the estimate, from
    the run and the weights), or the estimated ones (after the gradient passes)."""
    from probes.store import RunReader

    chosen = [r for r in plan.config.ranking_list if RANKINGS[r].needs_pass == passed]
    with RunReader(plan.run_dir) as run:
        inputs = Inputs(
            run,
            plan.config.capability,
            plan.config.hook,
            plan.sft_dir,
            plan.dpo_dir,
            plan.shape.n_layers,
            plan.shape.group,
            m.attribution,
        )
        for name in chosen:
            m.scores[name] = RANKINGS[name].compute(inputs, tuple(directions))
            m.sources[name] = _source(name, plan)
            for key, scores in m.scores[name].items():
                m.orders[(name, key)] = unit_order(scores, plan.config.seed)


def _bar(bar: Any, done: int) -> None:
    bar.update(done - bar.done)


def _source(name: str, plan: LocalizePlan) -> str:
    needs = RANKINGS[name].needs
    if needs == "pass":
        return f"the gradient pass here, on the {len(plan.rows)} rows measured"
    if needs == "checkpoints":
        return "the checkpoints' weights"
    basis = "local" if needs == "local" else "global"
    return f"{plan.run_dir}'s recording of {plan.config.capability}/{plan.config.hook}, every layer, {basis} basis"


def _profile(plan: LocalizePlan) -> list[ProfileArm]:
    if not plan.config.profile:
        return []
    return profile_arms(plan.shape.n_layers, plan.config.profile_width, plan.window)


def _planned_sets(plan: LocalizePlan, m: Measured) -> list[np.ndarray]:
    """The unit sets of one direction's curves, as far as known before the gradient pass: an estimated ranking's
    sets are taken as reaching layer 0 (the worst case); a set two rankings share (every 100% point) counts once."""
    first = np.zeros(1, dtype=np.int64)
    sets: dict[object, np.ndarray] = {}
    for ranking in plan.config.ranking_list:
        order = next((o for (r, _), o in m.orders.items() if r == ranking), None)
        for p in plan.points:
            top = first if order is None else order[: plan.units(p)]
            key = "every unit" if plan.units(p) == plan.shape.total else (ranking, p.label)
            sets[key] = top
    return list(sets.values())


def _layers_of(flat: np.ndarray, plan: LocalizePlan) -> list[tuple[int, int]]:
    return [(int(flat.min()) // plan.shape.units_per_layer, 0)]


def _arms(plan: LocalizePlan, m: Measured, direction: str) -> dict[Hashable, Arm]:
    """Every arm of one direction but the heads and the placebo band's: the unedited model, each ranking's nested
    top-k sets, the profile (and every random set of the band under ``--placebo-design all``)."""
    from localize.band import placebo_arms

    shape = plan.shape
    arms: dict[Hashable, Arm] = {ZERO: ()}
    for ranking in plan.config.ranking_list:
        order = m.orders[(ranking, direction)]
        for point in plan.points:
            top = order[: plan.units(point)]
            arms[("curve", ranking, point.label)] = (_unit_set(plan, top),)
    if plan.config.placebo_design == ALL:
        arms.update(placebo_arms(plan, dict.fromkeys(plan.placebo_points, range(plan.config.placebo))))
    for arm in m.profile:
        arms[("profile", arm.label)] = arm.arm(shape.d_model, shape.heads, shape.head_dim)
    return arms


def _unit_set(plan: LocalizePlan, flat: np.ndarray) -> UnitSet:
    return UnitSet.from_flat(plan.config.hook, flat, plan.shape.units_per_layer, plan.shape.group)


def _measure(
    plan: LocalizePlan,
    pair: ModelPair,
    rows: dict[str, list[Forced]],
    directions: list[Direction],
    say: Say,
    m: Measured,
) -> None:
    """Each direction's arms in one engine call, and the heads of the attention steps that closed the most; then the
    placebo band (:mod:`localize.band`): in those calls under ``--placebo-design all``, else wave by wave."""
    from localize.assemble import ranking_evidence
    from localize.band import draw_waves, keep_source

    m.profile = _profile(plan)
    sequential = plan.config.placebo_design == SEQUENTIAL and bool(plan.config.placebo and plan.placebo_points)
    engines: dict[str, DirectionPasses] = {}
    for index, direction in enumerate(directions):
        done = _timed(m, "passes")
        passes = engines[direction.name] = DirectionPasses(
            direction,
            pair.models()[direction.edited],
            pair.models()[direction.source],
            rows[direction.name],
            m.responses[direction.name],
            plan.config.max_batch_tokens,
        )
        if sequential and not keep_source(plan, passes):
            say(f"{direction.label}: the source's values exceed the memory kept for the waves; each wave reruns it")
        arms = _arms(plan, m, direction.name)
        if index > 0:
            arms.update(_head_arm_keys(plan, m))
        estimate = m.phases.get(f"{direction.name} passes")
        m.gaps[direction.name] = _run(passes, arms, f"passes {direction.label}", m, estimate)
        if index == 0 and plan.config.head_layers and plan.config.profile:
            m.heads = head_arms(_top_attention(plan, m, direction.name), plan.shape.heads)
            m.gaps[direction.name].update(_run(passes, _head_arm_keys(plan, m), f"heads {direction.label}", m, None))
        done()
        say(f"{direction.label}: {len(m.gaps[direction.name])} arms measured")
    m.placebo_drawn = {(d.name, p.label): plan.config.placebo for d in directions for p in plan.placebo_points}
    if sequential:
        done = _timed(m, "placebo")
        draw_waves(plan, engines, lambda passes, arms, name, s: _run(passes, arms, name, m, s), m, ranking_evidence)
        done()
        say(f"placebo band: {_drawn(m)}")


def _drawn(m: Measured) -> str:
    return ", ".join(f"{d} {label}: {n} of {m.plan.config.placebo} sets" for (d, label), n in m.placebo_drawn.items())


def _run(
    passes: DirectionPasses, arms: dict[Hashable, Arm], name: str, m: Measured, estimate: float | None
) -> dict[Hashable, RowGap]:
    """The arms on this process's rows, then every process's rows joined (:mod:`localize.parallel`); the stage says
    ``estimate`` (seconds) until its first batch is done."""
    from core.progress import stage
    from localize.parallel import gathered_gaps

    with stage(
        name, passes.n_batches, unit="batches", step="batch", enabled=m.world.is_main, estimate_s=estimate
    ) as bar:
        mine = passes.run(arms, lambda done, _: _bar(bar, done))
    return gathered_gaps(m.world, m.mine, len(m.plan.rows), mine)


def _head_arm_keys(plan: LocalizePlan, m: Measured) -> dict[Hashable, Arm]:
    shape = plan.shape
    return {("profile", arm.label): arm.arm(shape.d_model, shape.heads, shape.head_dim) for arm in m.heads}


def _top_attention(plan: LocalizePlan, m: Measured, direction: str) -> list[int]:
    """One layer from each of the ``head_layers`` attention profile steps that closed the most in ``direction``: the
    step's layer itself at ``--profile-width 1``, else the step's layer whose attention output the gradient estimates
    to close the most (a step of several layers is not patched layer by layer)."""
    from access.outcomes import gap_closed

    gaps = m.gaps[direction]
    steps = [a for a in m.profile if a.kind == "sublayer" and a.sublayer == "attention"]
    ranked = sorted(
        steps, key=lambda a: -_finite(gap_closed(gaps[("profile", a.label)].kl, gaps[("profile", a.label)].kl_unedited))
    )
    chosen = ranked[: plan.config.head_layers]
    if plan.config.profile_width == 1:
        return sorted(arm.layers[0] for arm in chosen)
    per_layer = m.attribution[direction].closed("gradient", SUBLAYERS["attention"]).sum(1)
    return sorted(max(arm.layers, key=lambda layer: per_layer[layer]) for arm in chosen)


def _finite(value: float) -> float:
    return value if np.isfinite(value) else -np.inf

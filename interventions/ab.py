"""``run_ab``: baseline vs intervened generations on the same prompts, judged, with controls.

The pipeline, in order:

1. :func:`interventions.plan.plan_ab` resolves the model dir and data file, picks the rows (the target
   capability, and with ``collateral`` the others after it; ``limit`` rows per capability and at most
   ``collateral_rows`` of each other one, interleaved by task so a small limit still covers every task),
   resolves the neuron set and checks it against the model, plans the arms of every ``--edit`` recipe
   (:mod:`interventions.recipes`) and draws their placebo arms, checking every edit against its model before
   anything is generated; ``run_ab`` takes that plan;
2. generate each needed model's baseline once, then every arm and its placebo arms (:mod:`interventions.passes`:
   shared batches where the engine allows, resumable from ``OUT/.arms``); every arm uses the same batches and
   decoding as its baseline; with ``--placebo-generation decide-first`` an arm's placebo sets generate after the arm
   is judged, only where its verdict needs them (:mod:`interventions.sequential`);
3. judge every arm, compute per capability the paired statistics against the baseline of the model it ran on
   (:mod:`interventions.scoring`), place each arm's Δ among its placebo Δs (:mod:`interventions.placebos`), measure
   its continuous outcomes (:mod:`interventions.outcome_runs`) and its coherence (:mod:`interventions.coherence`),
   fill the no-op guard; write the report and the generations (:mod:`interventions.report`).

Example:
    >>> _units_edited(()), run_ab.__name__   # an arm's unit count in its progress line; the run
    ('', 'run_ab')
    >>> memory_line(World(1, 2), 2 * 1024**3, 1024**3, 2).split(": ")[1]   # what each process of a launch holds
    '2.0 GiB of weights for 2 model(s), decoding caches up to 1.0 GiB'
    >>> plan = plan_ab(ABConfig(run_dir="runs/x", capability="multi_turn", placebo=20))   # doctest: +SKIP
    >>> run_ab(plan).main.capability("multi_turn").effect.delta                            # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from access.edited_generation import ABGenerator
from access.edits import Edit, UnitEdit
from access.generation import Generations
from core.errors import Interrupted
from interventions.arms import ArmStore
from interventions.cells import fmt_range
from interventions.coherence import JUDGE, PromptOutput, arm_coherence
from interventions.evidence import MIN_PLACEBO_SETS
from interventions.outcome_runs import OutcomeRuns, estimate_line, outcome_runs
from interventions.outcomes import write_greedy
from interventions.passes import (
    HelperDone,
    Ledger,
    Pass,
    Progress,
    arm_passes,
    arm_store,
    decode,
    decode_ahead,
    generators,
    kept,
    plan_passes,
    share,
    share_parallel,
)
from interventions.placebos import drawn, rank_among_placebos, skip_placebos, skipped
from interventions.plan import ABPlan, provenance_warnings
from interventions.recipes import Arm, other
from interventions.results import (
    ABReport,
    ArmPlacebo,
    ArmResult,
    BaselinePass,
    CapabilityResult,
    NoOpGuard,
    NoPlacebo,
    build_guard,
)
from interventions.scoring import Scored, capability_results, score_arm
from interventions.selection import describe
from interventions.sequential import DECIDE_LINE, WAVE, all_fixed, placebo_runs, skip_reason
from judging import Judge, make_judge
from judging.rules import RuleJudge
from probes.distributed import PeerLost, World

NOTHING_KEPT = "no generation arm had finished, nothing kept; rerun the same command"


def _quiet(_: str) -> None:
    return None


@dataclass
class _Run:
    """What one A/B run holds while it goes: its plan and judge, each model's generator, the store of finished passes,
    how far the passes are, each model's scored baseline, the continuous outcomes, each model's baseline perplexity."""

    plan: ABPlan
    progress: Progress
    judge: Judge
    gens: dict[str, ABGenerator]
    store: ArmStore
    ledger: Ledger
    outcomes: OutcomeRuns
    baselines: dict[str, Scored] = field(default_factory=dict)
    fluency: dict[PromptOutput, float] = field(default_factory=dict)  # each (prompt, output) row's NLL under SFT

    def kept(self) -> str:
        """What an interrupt leaves on disk, and how to resume from it (:func:`interventions.passes.kept`)."""
        return kept(self.store, self.ledger.total, self.plan.config.out_dir)


def _prepare(plan: ABPlan, progress: Progress, judge: Judge | None) -> _Run:
    """The run's state before any pass: the outcomes' target models are loaded first, so that they get a baseline, a
    generator and a place in the store's fingerprint."""
    config = plan.config
    outcomes = outcome_runs(plan, progress)
    chosen = judge or make_judge(config.judge, config.judge_client())
    gens = generators(plan)
    store = arm_store(plan)
    return _Run(plan, progress, chosen, gens, store, Ledger(len(plan_passes(plan))), outcomes)


def run_ab(
    plan: ABPlan,
    progress: Progress | None = None,
    judge: Judge | None = None,
    *,
    annotate: Callable[[ABReport], None] | None = None,
    world: World | None = None,
) -> ABReport:
    """Run the A/B evaluation that ``plan`` (:func:`interventions.plan.plan_ab`) resolved; write files if its
    config's ``out_dir``.

    ``progress`` receives one line per stage; ``judge`` replaces the judge named in the
    config (any object with the :class:`~judging.base.Judge` protocol).
    A plan with several selections (``plan_ab(config, selections)``) gives each rule every arm of the configured
    edits and its own placebos, all sharing one baseline and one set of passes
    (:mod:`interventions.select_compare`); ``annotate`` adds to the report before it is written. ``world``: the
    processes of a data-parallel launch (:mod:`interventions.parallel`; default one process).
    Ctrl-C raises :class:`~core.errors.Interrupted` naming the arms kept for a resume
    (see :mod:`interventions.arms`).
    """
    if not isinstance(plan, ABPlan):
        raise TypeError(f"run_ab takes a plan, run_ab(plan_ab(config)), not {type(plan).__name__}")
    run: _Run | None = None
    try:
        world = world or World()
        run = world.agree(lambda: _prepare(plan, progress or _quiet, judge))
        run.progress(_memory(plan, world))
        config = plan.config
        if world.distributed and config.outcomes != "only" and config.engine == "shared":
            try:
                share_parallel(plan, _upfront(plan), run.gens, run.store, world, run.progress)
            except PeerLost as lost:
                raise PeerLost(f"{lost}; {run.kept()}", lost.reporter, lost.dead) from None
        elif not world.is_main:
            raise HelperDone  # nothing to share: rank 0 runs the evaluation
        if config.outcomes != "only":
            _baselines(run)
        return _finish(run, annotate)
    except (KeyboardInterrupt, Interrupted) as exc:
        cause = f" ({exc})" if isinstance(exc, Interrupted) else ""
        raise Interrupted(f"A/B evaluation stopped{cause}: {run.kept() if run else NOTHING_KEPT}") from None


def _memory(plan: ABPlan, world: World) -> str:
    """The A/B plan's memory per process (:func:`memory_line`)."""
    from core.budget import default_cache_bytes

    weights = sum(t.numel() * t.element_size() for m in plan.models.values() for t in (*m.parameters(), *m.buffers()))
    device = str(plan.models[plan.config.model].device)
    return memory_line(world, weights, default_cache_bytes(device), len(plan.models))


def memory_line(world: World, weight_bytes: int, cache_bytes: int, n_models: int) -> str:
    """The memory each process needs: every rank holds the models it runs (the pair, or a model and a patch
    source) and its own decoding caches."""
    who = f"each of the {world.size} holds its own copy" if world.distributed else "one process"
    return (
        f"memory per process ({who}): {_size(weight_bytes)} of weights for {n_models} model(s), "
        f"decoding caches up to {_size(cache_bytes)}"
    )


def _size(n_bytes: int) -> str:
    return f"{n_bytes / 1024**3:.1f} GiB" if n_bytes >= 1024**3 / 10 else f"{n_bytes / 1024**2:.1f} MiB"


def _baselines(run: _Run) -> None:
    """Generate every pass that decodes in shared batches, then generate (or read back) and judge each baseline."""
    plan, config, ledger = run.plan, run.plan.config, run.ledger
    least, most = placebo_runs([len(arm.placebo_edits) for arm in plan.arms], config.placebo_generation)
    placebo = ledger.total - len(plan.models) - len(plan.arms)
    run.progress(
        f"{fmt_range(ledger.total - most + least, ledger.total)} generation passes over {len(plan.rows)} prompts, "
        f"up to {config.generation.max_new_tokens} new tokens each: {len(plan.models)} baseline(s), "
        f"{len(plan.arms)} arm(s), {fmt_range(placebo - most + least, placebo)} placebo arms"
        + ("" if least == most else f" ({DECIDE_LINE})")
    )
    if not run.outcomes.off:
        run.progress(estimate_line(plan, run.gens[config.model].generator.prompts))
    passes = _upfront(plan)
    if config.engine == "shared":
        share(plan, passes, run.gens, run.store, ledger, run.progress)
    for one in (p for p in passes if p.role == "baseline"):
        if one.key not in ledger.decoded:
            run.progress(f"baseline ({one.model} model): {len(plan.rows)} prompts")
        run.baselines[one.model] = _scored(run, one)
    alone = sum(one.role != "baseline" and one.key not in ledger.decoded for one in passes)
    if alone:
        run.progress(f"{alone} more passes decode arm by arm{ledger.left()} (a patch pass runs two models)")


def _upfront(plan: ABPlan) -> list[Pass]:
    """The passes generated before any arm is judged: every one, or with decide-first none of the placebo sets of an
    arm with :data:`~interventions.evidence.MIN_PLACEBO_SETS` or more (they generate once it is judged)."""
    passes = plan_passes(plan)
    if plan.config.placebo_generation == "all":
        return passes
    later = {p.key for arm in plan.arms if len(arm.placebo_edits) >= MIN_PLACEBO_SETS for p in arm_passes(arm)[1:]}
    return [p for p in passes if p.key not in later]


def _scored(run: _Run, one: Pass) -> Scored:
    generations = decode(one, run.gens[one.model], run.store, run.ledger, run.progress)
    return generations, score_arm(run.judge, run.plan.rows, generations.texts)


def _results(run: _Run, arm: Scored, model: str, full: bool = True) -> list[CapabilityResult]:
    """Per-capability results against ``model``'s baseline (:func:`interventions.scoring.capability_results`)."""
    plan, config = run.plan, run.plan.config
    base = run.baselines[model]
    return capability_results(plan.rows, plan.groups, config.target, base, arm, config.n_bootstrap, config.seed, full)


def _guard(run: _Run, arm: Arm, hook_stats: dict[str, int] | None, rows: int, rows_changed: int) -> NoOpGuard:
    """The arm's no-op guard (:func:`interventions.results.build_guard`), in the intervened model's dtype."""
    config = run.plan.config
    dtype = run.plan.models[config.model].dtype
    reason = next((r for r in (e.noop_reason(dtype) for e in arm.edits) if r), None)
    fraction = max(e.changed_fraction(dtype) for e in arm.edits)
    return build_guard(arm.label, arm.factor, config.dtype, fraction, reason, hook_stats, rows, rows_changed)


def _arm_result(run: _Run, arm: Arm, number: int) -> tuple[ArmResult, Generations]:
    """One arm judged against its model's baseline, with its placebo sets, coherence and continuous outcomes."""
    plan = run.plan
    run.progress(
        f"arm {number}/{len(plan.arms)}: {arm.label} ({arm.model} model{_units_edited(arm.edits)}){run.ledger.left()}"
    )
    own, *placebo_passes = arm_passes(arm)
    generated = _scored(run, own)
    base = run.baselines[arm.model][0]
    rows_changed = sum(a != b for a, b in zip(generated[0].ids, base.ids, strict=True))
    guard = _guard(run, arm, generated[0].hook_stats, len(plan.rows), rows_changed)
    capabilities = _results(run, generated, arm.model)
    result = ArmResult(
        arm.factor,
        arm.role,
        capabilities,
        guard,
        generated[0].seconds,
        generated[0].n_tokens,
        name=arm.title,
        label=arm.label,
        model=arm.model,
        edits=arm.describe(),
    )
    result.placebo = _placebo(run, arm, placebo_passes, guard, (capabilities, rows_changed))
    prompts = run.gens[arm.model].generator.prompts
    found = run.outcomes.of(arm, _generations(run), _judged(run, arm, prompts, generated[0]))
    if found is not None:
        result.outcomes = found[1]
    for row, nll in run.outcomes.scored_by(JUDGE).items():  # rows the outcomes' target pass scored under SFT
        run.fluency.setdefault(row, nll)
    result.coherence = arm_coherence(plan.pool.model, prompts, base.ids, generated[0].ids, run.fluency)
    return result, generated[0]


def _judged(run: _Run, arm: Arm, prompts: Sequence[Sequence[int]], own: Generations) -> list[PromptOutput]:
    """The rows the coherence guard reads for the arms on ``arm``'s model (``own``: ``arm``'s generations), where the
    outcomes' target there is its judge, for the target's pass to score over the prompts it runs anyway: the
    baseline's, then each arm's own generations in the plan's order (an arm not yet decoded is decoded now, ahead of
    its turn, so that every engine gives that pass the same rows); none once that pass ran."""
    if run.outcomes.off or other(arm.model) != JUDGE or arm.model in run.outcomes.runs:
        return []
    every = [run.baselines[arm.model][0]]
    for a in (a for a in run.plan.arms if a.model == arm.model):
        one = arm_passes(a)[0]
        every.append(own if a is arm else decode_ahead(one, run.gens[a.model], run.store, run.ledger, run.progress))
    return list(dict.fromkeys((tuple(p), tuple(o)) for g in every for p, o in zip(prompts, g.ids, strict=True)))


def _generations(run: _Run) -> dict[str, Generations]:
    """Each model's baseline generations."""
    return {model: scored[0] for model, scored in run.baselines.items()}


def _placebo(
    run: _Run, arm: Arm, passes: list[Pass], guard: NoOpGuard, judged: tuple[list[CapabilityResult], int]
) -> ArmPlacebo:
    """The arm's placebo passes; each capability's Δ (``judged``: the arm's results and its changed rows) is ranked
    among theirs (its ``placebo``), generated as ``--placebo-generation`` says."""
    config = run.plan.config
    if not arm.placebo:
        return NoPlacebo()
    if not arm.placebo_edits:
        why = f"no-op in {config.dtype}: {guard.flags[0]}" if guard.flags and config.placebo else "--placebo 0"
        return skipped(arm, config.seed, why)
    capabilities, rows_changed = judged
    if config.placebo_generation == "all":
        rank_among_placebos(capabilities, _generate(run, arm, passes))
    else:
        _decide_first(run, arm, passes, capabilities, rows_changed)
    return drawn(arm, config.seed)


def _generate(run: _Run, arm: Arm, passes: list[Pass], done: int = 0) -> list[list[CapabilityResult]]:
    """Each placebo pass generated (or read back) and judged against its model's baseline; ``done``: the arm's sets
    generated before these."""
    sets = []
    for k, one in enumerate(passes, done + 1):
        run.progress(f"{arm.title}: placebo {k}/{len(arm.placebo_edits)}{run.ledger.left()}")
        sets.append(_results(run, _scored(run, one), arm.model, full=False))
    return sets


def _decide_first(
    run: _Run, arm: Arm, passes: list[Pass], capabilities: list[CapabilityResult], rows_changed: int
) -> None:
    """Decide-first placebo generation (:mod:`interventions.sequential`): none where the arm changed no generation and
    no verdict can read them; else :data:`~interventions.sequential.WAVE` sets at a time until the verdict is fixed.
    Fewer than :data:`~interventions.evidence.MIN_PLACEBO_SETS` sets all generate."""
    if len(passes) < MIN_PLACEBO_SETS:  # no verdict rests on so few sets: they are there to be read, all of them
        rank_among_placebos(capabilities, _generate(run, arm, passes))
        return
    why = skip_reason(capabilities, rows_changed)
    if why is not None:
        run.progress(f"{arm.title}: no placebo set generated ({why})")
        skip_placebos(capabilities, len(passes), why)
        run.ledger.total -= len(passes)  # the time left counts only passes that will run
        return
    nan_possible = not isinstance(run.judge, RuleJudge)  # its undecided rows depend on the row alone
    sets: list[list[CapabilityResult]] = []
    while len(sets) < len(passes):
        if all_fixed(capabilities, sets, len(passes), nan_possible=nan_possible):
            run.progress(
                f"{arm.title}: {len(sets)} of {len(passes)} placebo sets fix its verdict; the rest not generated"
            )
            break
        wave = passes[len(sets) : len(sets) + WAVE]
        if run.plan.config.engine == "shared":
            share(run.plan, wave, run.gens, run.store, run.ledger, run.progress)
        sets += _generate(run, arm, wave, len(sets))
    rank_among_placebos(capabilities, sets, len(passes) - len(sets))
    run.ledger.total -= len(passes) - len(sets)


def _outcomes_only(run: _Run) -> list[ArmResult]:
    """``--outcomes only``: every arm's continuous outcomes and its placebo sets' (as ``--placebo-generation`` says),
    nothing generated or judged."""
    plan, config, results = run.plan, run.plan.config, []
    for number, arm in enumerate(plan.arms, 1):
        run.progress(f"arm {number}/{len(plan.arms)}: {arm.label} (outcomes only)")
        found = run.outcomes.of(arm, {})
        assert found is not None, "--outcomes only computes outcomes"
        guard = _guard(run, arm, found[0].stats, 0, 0)
        placebo: ArmPlacebo = NoPlacebo()
        if arm.placebo:
            placebo = drawn(arm, config.seed) if arm.placebo_edits else skipped(arm, config.seed, "none drawn")
        result = ArmResult(
            arm.factor,
            arm.role,
            [],
            guard,
            0.0,
            0,
            name=arm.title,
            label=arm.label,
            model=arm.model,
            edits=arm.describe(),
            placebo=placebo,
        )
        result.outcomes = found[1]
        results.append(result)
    return results


def _finish(run: _Run, annotate: Callable[[ABReport], None] | None) -> ABReport:
    """Every arm's result in the report; written (with the generations) where the config has an ``out_dir``."""
    config = run.plan.config
    generations: dict[str, Generations] = {}
    if config.outcomes == "only":
        results = _outcomes_only(run)
    else:
        results = []
        for number, arm in enumerate(run.plan.arms, 1):
            result, generated = _arm_result(run, arm, number)
            results.append(result)
            generations[arm.title] = generated
    report = _report(run, results)
    if annotate is not None:
        annotate(report)
    if config.out_dir is not None:
        _write(run, report, generations, Path(config.out_dir))
    return report


def _report(run: _Run, results: list[ArmResult]) -> ABReport:
    plan, config = run.plan, run.plan.config
    baselines = {
        name: BaselinePass(g.seconds, g.n_tokens, len(plan.rows)) for name, (g, _) in run.baselines.items()
    } or {config.model: BaselinePass(0.0, 0, 0)}  # --outcomes only: nothing generated
    off = run.outcomes.off
    return ABReport(
        capability=config.capability,
        model=config.model,
        model_dir=str(plan.model_dir),
        data_file=str(plan.data_file),
        dtype=config.dtype,
        backend=config.backend,
        judge=run.judge.name,
        neurons=describe(plan.neurons),
        baselines=baselines,
        arms=results,
        config=config.to_dict(),
        responses=run.outcomes.responses_line(),
        outcome_pairs=run.outcomes.pairs,
        warnings=provenance_warnings(plan.neurons, config.model, plan.model_dir)
        + ([off] if off.startswith("no continuous") else [])
        + [flag for arm in results if arm.role == "main" for flag in arm.guard.flags]
        + [fault for arm in results for fault in arm.guard.faults],
    )


def _write(run: _Run, report: ABReport, generations: dict[str, Generations], out_dir: Path) -> None:
    """The report (and for a generating run the generations and each model's greedy responses) in ``out_dir``; the
    store of finished passes is then removed."""
    from interventions.report import write_outcomes_only, write_report

    plan = run.plan
    if plan.config.outcomes == "only":
        write_outcomes_only(report, out_dir)
        return
    if not run.outcomes.off:
        idx = plan.groups[plan.config.target]
        greedy: dict[str, Sequence[Sequence[int]]] = {m: [b[0].ids[i] for i in idx] for m, b in run.baselines.items()}
        write_greedy(out_dir, [plan.row_ids[i] for i in idx], greedy, plan.tokenizer, plan.pool.dirs)
    baselines = _generations(run)
    write_report(report, plan.rows, plan.row_ids, baselines, run.baselines[plan.config.model][1], generations, out_dir)
    run.store.clear()


def _units_edited(edits: tuple[Edit, ...]) -> str:
    """The units an arm's progress line names (for example ", 64 units"); none for an arm that edits no unit set
    (steer, expo, lda)."""
    units = sum(len(e.units) for e in edits if isinstance(e, UnitEdit))
    return f", {units} units" if units else ""

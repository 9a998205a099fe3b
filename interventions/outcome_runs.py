"""The continuous outcomes of an A/B run's arms: measured per edited model for every arm, then for its placebo sets
as the verdicts need them, placed among the placebo sets' and judged.

For an arm on one model of the pair the *target* is the other model, and the rows teacher-forced are the target
capability's (:func:`interventions.outcomes.outcome_inputs`: by default the target's own greedy responses from its
baseline pass). :class:`OutcomeRuns` makes, on the first arm that needs it, each edited model's
:class:`access.outcomes.Outcomes` and teacher-forces the edits on that model as ``--placebo-generation`` says
(:mod:`interventions.sequential`, rule 3): with ``decide-first`` every arm's own edits together in one pass over the
rows' batches (:meth:`access.outcomes.Outcomes.arms`), then waves of placebo sets, every arm that still needs sets
together, until each arm's verdicts are fixed; with ``all`` every arm and placebo set in one pass. Later arms read
theirs back. :func:`outcome_results` turns one arm's :class:`~access.outcomes.ArmOutcomes` into one result per row of
:data:`interventions.outcome_kinds.OUTCOMES`: the unedited and edited means, Δ with its paired bootstrap CI over rows
(:func:`interventions.stats.continuous_delta`), Δ's place among the placebo sets' Δs
(:func:`interventions.stats.placebo_compare`) and the verdict of :func:`interventions.evidence.outcome_verdict`
(:func:`interventions.sequential.outcome_reading`), read at the arm's configured number of sets.

Example:
    >>> import numpy as np
    >>> from access.outcomes import ArmOutcomes
    >>> z = np.zeros(0)
    >>> arm = ArmOutcomes("greedy", np.array([0.5, 1.0]), np.array([1.0, 2.0]), z, z, z, z)
    >>> [(o.outcome, o.delta, o.verdict) for o in outcome_results(arm, [], n_bootstrap=100)][:2]
    [('gap_closed', 0.5, 'moves, no placebo to place it'), ('kl', -0.75, 'moves, no placebo to place it')]
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from access.outcomes import Forced
from core.errors import ProbeError
from interventions.cells import fmt_range
from interventions.evidence import MIN_PLACEBO_SETS
from interventions.outcome_kinds import OUTCOMES, Outcome
from interventions.outcomes import forced_passes, greedy_ids, outcome_inputs, outcome_seconds, outcomes_for
from interventions.passes import Progress, edits_key, minutes
from interventions.recipes import other
from interventions.results import OutcomeResult, PlaceboRank
from interventions.sequential import (
    DECIDE_OUTCOMES,
    OUTCOMES_SKIPPED,
    WAVE,
    outcome_reading,
    outcomes_fixed,
    placebo_runs,
)
from interventions.stats import continuous_delta, placebo_compare

if TYPE_CHECKING:
    from access.edits import Edit
    from access.generation import Generations
    from access.outcomes import ArmOutcomes, Outcomes
    from interventions.coherence import PromptOutput
    from interventions.outcomes import OutcomeInputs
    from interventions.plan import ABPlan
    from interventions.recipes import Arm


def _arrays(arm: ArmOutcomes, outcome: Outcome) -> tuple[np.ndarray, np.ndarray]:
    """The outcome's (unedited, edited) per-row values in ``arm``."""
    before: np.ndarray = getattr(arm, outcome.before)
    after: np.ndarray = getattr(arm, outcome.after)
    return before, after


def outcome_results(
    arm: ArmOutcomes,
    placebos: Sequence[ArmOutcomes],
    *,
    n_sets: int | None = None,
    n_bootstrap: int = 10_000,
    seed: int = 0,
) -> list[OutcomeResult]:
    """Every outcome of an arm with its CI, its place among ``placebos`` (the arm's placebo sets drawn) and its
    verdict; ``n_sets``: the sets the arm has, drawn or not (default: ``placebos``, all drawn)."""
    n = len(placebos) if n_sets is None else n_sets
    return placed(measured(arm, n_bootstrap=n_bootstrap, seed=seed), placebo_deltas(placebos), n)


def measured(arm: ArmOutcomes, *, n_bootstrap: int = 10_000, seed: int = 0) -> list[OutcomeResult]:
    """Every outcome of an arm with its paired bootstrap CI, not yet placed among placebo sets."""
    out = []
    for outcome in OUTCOMES.values():
        before, after = _arrays(arm, outcome)
        if before.size == 0:
            continue
        d = continuous_delta(before, after, ratio=outcome.ratio, n_resamples=n_bootstrap, seed=seed)
        out.append(OutcomeResult(outcome.name, d.n, d.before, d.after, d.delta, d.ci_low, d.ci_high))
    return out


def placebo_deltas(placebos: Sequence[ArmOutcomes]) -> dict[str, list[float]]:
    """Per outcome, each placebo set's Δ."""
    return {
        outcome.name: [
            continuous_delta(*_arrays(p, outcome), ratio=outcome.ratio, with_ci=False).delta for p in placebos
        ]
        for outcome in OUTCOMES.values()
    }


def placed(
    results: Sequence[OutcomeResult], deltas: Mapping[str, Sequence[float]], n_sets: int, skipped: str | None = None
) -> list[OutcomeResult]:
    """Each outcome placed among the Δs of its placebo sets drawn (``deltas``), of ``n_sets`` (the rest undrawn,
    :mod:`interventions.sequential`; ``skipped``: why none was), with the verdict read at ``n_sets``
    (:func:`interventions.sequential.outcome_reading`)."""
    out = []
    for result in results:
        theirs = list(deltas.get(result.outcome, []))
        rank = None
        if n_sets:
            cmp = placebo_compare(result.delta, theirs)
            undrawn = n_sets - len(theirs)
            rank = PlaceboRank(cmp.percentile, cmp.p_empirical, cmp.placebo, None, undrawn or None, skipped)
        out.append(replace(result, placebo=rank, verdict=outcome_reading(result, theirs, n_sets)))
    return out


@dataclass
class OutcomeRuns:
    """The continuous outcomes of one A/B run, per edited model (module doc); made by :func:`outcome_runs`."""

    plan: ABPlan
    progress: Progress
    off: str  # why the run measures none ("--outcomes off", or what it lacks); "": it measures them
    runs: dict[str, Outcomes] = field(default_factory=dict)  # per edited model, made on first use
    measured: dict[tuple[str, str], ArmOutcomes] = field(default_factory=dict)  # (model, edits key) -> outcomes
    results: dict[str, list[OutcomeResult]] = field(default_factory=dict)  # per arm title, placed and judged
    responses: dict[str, str] = field(default_factory=dict)  # per edited model, which responses it teacher-forced
    pairs: int = 0  # the DPO pairs the margin rests on

    def of(
        self, arm: Arm, baselines: Mapping[str, Generations], judged: Sequence[PromptOutput] = ()
    ) -> tuple[ArmOutcomes, list[OutcomeResult]] | None:
        """The arm's outcomes on the target capability's rows, and their results placed among its placebo sets
        (None: the run measures none); ``baselines``: each model's baseline generations, the target's greedy
        responses among them; ``judged``: (prompt, output) rows the target's pass scores too, where it runs their
        prompts (read by :meth:`scored_by`; only the first arm on a model gives them)."""
        if self.off:
            return None
        if arm.model not in self.runs:
            self._start(arm.model, baselines.get(other(arm.model)), judged)
        return self.measured[(arm.model, edits_key(arm.edits))], self.results[arm.title]

    def scored_by(self, judge: str) -> dict[PromptOutput, float]:
        """Every row some run teacher-forced through ``judge`` as its target, with its NLL there (the KL rows of the
        arms on the other model and the rows :meth:`of` was given to judge, once those arms' outcomes ran): rows the
        coherence guard need not run again."""
        edited = other(judge)
        return self.runs[edited].target_nll() if edited in self.runs else {}

    def _start(self, model: str, base: Generations | None, judged: Sequence[PromptOutput]) -> None:
        plan = self.plan
        idx = plan.groups[plan.config.target]
        inputs = inputs_for(
            plan, model, None if base is None else greedy_ids([base.ids[i] for i in idx], plan.tokenizer)
        )
        self.responses[model] = inputs.responses
        self.pairs = len(inputs.pairs)
        forced = [Forced((*prompt, *output), len(output)) for prompt, output in judged if prompt and output]
        self.runs[model] = outcomes_for(plan.models[model], plan.models[other(model)], inputs, forced)
        self._staged(model, [arm for arm in plan.arms if arm.model == model])

    def _staged(self, model: str, arms: list[Arm]) -> None:
        """Every arm's outcomes on ``model``, then its placebo sets' as ``--placebo-generation`` says
        (:mod:`interventions.sequential`, rule 3): every arm first, then waves of placebo sets until each arm's
        verdicts are fixed; with ``all``, or fewer than :data:`~interventions.evidence.MIN_PLACEBO_SETS` sets, every
        set at once with the arms."""
        config = self.plan.config
        every = {a.title for a in arms if config.placebo_generation == "all" or len(a.placebo_edits) < MIN_PLACEBO_SETS}
        drawn = {a.title: len(a.placebo_edits) if a.title in every else 0 for a in arms}
        first = [a.edits for a in arms] + [e for a in arms if a.title in every for e in a.placebo_edits]
        said = "" if len(every) == len(arms) else f" ({DECIDE_OUTCOMES})"
        self._measure(model, first, f"{len(first)} arm and placebo passes teacher-forced together{said}")
        own = {
            a.title: measured(self._get(model, a.edits), n_bootstrap=config.n_bootstrap, seed=config.seed) for a in arms
        }
        while pending := [a for a in arms if not self._fixed(model, a, own[a.title], drawn[a.title])]:
            wave = {a.title: a.placebo_edits[drawn[a.title] : drawn[a.title] + WAVE] for a in pending}
            sets = [edits for chunk in wave.values() for edits in chunk]
            self._measure(model, sets, f"{len(sets)} placebo sets of {len(pending)} arm(s) teacher-forced together")
            for title, chunk in wave.items():
                drawn[title] += len(chunk)
        for a in arms:
            self.results[a.title] = self._placed(model, a, own[a.title], drawn[a.title])

    def _get(self, model: str, edits: tuple[Edit, ...]) -> ArmOutcomes:
        return self.measured[(model, edits_key(edits))]

    def _drawn(self, model: str, arm: Arm, k: int) -> dict[str, list[float]]:
        return placebo_deltas([self._get(model, edits) for edits in arm.placebo_edits[:k]])

    def _fixed(self, model: str, arm: Arm, own: list[OutcomeResult], k: int) -> bool:
        """Whether the arm's outcome verdicts are fixed by its first ``k`` placebo sets (rule 3)."""
        n_sets = len(arm.placebo_edits)
        return k >= n_sets or outcomes_fixed(own, self._drawn(model, arm, k), n_sets)

    def _placed(self, model: str, arm: Arm, own: list[OutcomeResult], k: int) -> list[OutcomeResult]:
        """The arm's outcomes placed among its ``k`` placebo sets drawn, saying so where it drew fewer than all."""
        n_sets = len(arm.placebo_edits)
        if k < n_sets:
            why = "then the verdict could no longer change" if k else OUTCOMES_SKIPPED
            self.progress(f"{arm.title}: outcomes placed among {k} of {n_sets} placebo sets ({why})")
        return placed(own, self._drawn(model, arm, k), n_sets, None if k else OUTCOMES_SKIPPED)

    def _measure(self, model: str, edits: Sequence[tuple[Edit, ...]], what: str) -> None:
        """The outcomes of every ``edits`` not measured yet on ``model``, in one pass over the rows' batches
        (:meth:`access.outcomes.Outcomes.arms`: each batch's prompts, lower blocks and patch sources once for all)."""
        passes = {key: e for e in edits if (model, key := edits_key(e)) not in self.measured}
        if not passes:
            return
        start, every = time.perf_counter(), max(1, self.runs[model].n_batches // 8)
        self.progress(f"outcomes ({model} model): {what}")

        def done(batch: int, total: int) -> None:
            if batch % every == 0 or batch == total:
                left = (time.perf_counter() - start) / batch * (total - batch)
                self.progress(f"outcomes ({model} model): batch {batch}/{total}, about {minutes(left)} left")

        found = self.runs[model].arms(list(passes.values()), progress=done)
        self.measured.update({(model, key): outcome for key, outcome in zip(passes, found, strict=True)})

    def responses_line(self) -> str:
        """Which responses the outcomes teacher-forced, for the report: one line, per model when arms edit both."""
        said = self.responses
        if len(said) == 1:
            return next(iter(said.values()))
        return "; ".join(f"{what} for the arms on {model}" for model, what in said.items())


def inputs_for(plan: ABPlan, model: str, greedy: list[list[int]] | None, responses: str | None = None) -> OutcomeInputs:
    """What the outcomes of arms on ``model`` teacher-force: the target capability's rows against the other model,
    under the config as the plan resolved it (the held-out split's DPO pairs among it); ``greedy``: the other model's
    greedy ids in the run; ``responses``: instead of the config's (an earlier run's folder: the greedy ids it kept)."""
    idx = plan.groups[plan.config.target]
    config = plan.config if responses is None else replace(plan.config, responses=responses)
    rows, row_ids = [plan.rows[i] for i in idx], [plan.row_ids[i] for i in idx]
    return outcome_inputs(config, plan.tokenizer, rows, row_ids, plan.data_file, other(model), greedy, plan.pool.dirs)


def outcome_runs(plan: ABPlan, progress: Progress) -> OutcomeRuns:
    """The run's outcomes, with the other model of every arm's loaded (their target). Where it cannot be loaded the
    run measures none and says why; ``--outcomes only`` stops there with the error."""
    config = plan.config
    off = "" if config.outcomes != "off" else "--outcomes off"
    if config.outcomes != "off":
        try:
            for name in sorted({other(arm.model) for arm in plan.arms}):
                plan.pool.model(name)
        except ProbeError as exc:
            if config.outcomes == "only":
                raise
            off = f"no continuous outcomes: they need the other model of the pair ({exc})"
    return OutcomeRuns(plan, progress, off)


def estimate_line(plan: ABPlan, prompts: Sequence[Sequence[int]]) -> str:
    """The progress line that announces the outcome passes and their time (at the pace measured on the default pair,
    :func:`interventions.outcomes.outcome_seconds`): a range where the placebo sets run as the verdicts need them."""
    config = plan.config
    placebo = placebo_runs([len(arm.placebo_edits) for arm in plan.arms], config.placebo_generation)
    forced = forced_passes(len(plan.arms), placebo)
    idx = plan.groups[config.target]
    mean_prompt = sum(len(prompts[i]) for i in idx) / max(1, len(idx))
    parameters = float(sum(p.numel() for p in plan.models[config.model].parameters()))
    new_tokens, pairs = config.generation.max_new_tokens, config.outcome_pairs
    least, most = (outcome_seconds(n, len(idx), mean_prompt, new_tokens, pairs, parameters) for n in forced)
    sets = "every placebo set" if placebo[0] == placebo[1] else f"{fmt_range(*placebo)} placebo sets as verdicts need"
    return (
        f"then {fmt_range(*forced)} teacher-forced outcome passes (every arm, {sets}, and the target and unedited "
        f"model once), each over the rows' responses and references and up to {config.outcome_pairs} "
        f"DPO pairs: about {fmt_range(least, most, minutes)} at the pace measured on the default "
        "pair, 2 CPU cores (docs/interventions.md); --outcomes off skips them"
    )

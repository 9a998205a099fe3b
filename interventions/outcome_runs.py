"""The continuous outcomes of an A/B run's arms: measured once per edited model for every arm and placebo set, then
placed among the placebo sets' and judged.

For an arm on one model of the pair the *target* is the other model, and the rows teacher-forced are the target
capability's (:func:`interventions.outcomes.outcome_inputs`: by default the target's own greedy responses from its
baseline pass). :class:`OutcomeRuns` makes, on the first arm that needs it, each edited model's
:class:`access.outcomes.Outcomes` and teacher-forces every arm's and placebo set's edits on that model in one pass over
the rows' batches (:meth:`access.outcomes.Outcomes.arms`); later arms read theirs back. :func:`outcome_results` turns
one arm's :class:`~access.outcomes.ArmOutcomes` into one result per row of
:data:`interventions.outcome_kinds.OUTCOMES`: the unedited and edited means, Δ with its paired bootstrap CI over rows
(:func:`interventions.stats.continuous_delta`), Δ's place among the placebo sets' Δs
(:func:`interventions.stats.placebo_compare`) and the verdict of :func:`interventions.evidence.outcome_verdict`.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from core.errors import ProbeError
from interventions.evidence import outcome_verdict
from interventions.outcome_kinds import OUTCOMES, Outcome
from interventions.outcomes import greedy_ids, outcome_inputs, outcome_seconds, outcomes_for
from interventions.passes import Progress, edits_key, minutes
from interventions.recipes import other
from interventions.results import OutcomeResult, PlaceboRank
from interventions.stats import continuous_delta, placebo_compare

if TYPE_CHECKING:
    from access.edits import Edit
    from access.generation import Generations
    from access.outcomes import ArmOutcomes, Outcomes
    from interventions.plan import ABPlan


def _arrays(arm: ArmOutcomes, outcome: Outcome) -> tuple[np.ndarray, np.ndarray]:
    """The outcome's (unedited, edited) per-row values in ``arm``."""
    before: np.ndarray = getattr(arm, outcome.before)
    after: np.ndarray = getattr(arm, outcome.after)
    return before, after


def outcome_results(
    arm: ArmOutcomes, placebos: Sequence[ArmOutcomes], *, n_bootstrap: int = 10_000, seed: int = 0
) -> list[OutcomeResult]:
    """Every outcome of an arm with its CI, its place among ``placebos`` (the arm's placebo sets) and its verdict."""
    out = []
    for outcome in OUTCOMES.values():
        before, after = _arrays(arm, outcome)
        if before.size == 0:
            continue
        d = continuous_delta(before, after, ratio=outcome.ratio, n_resamples=n_bootstrap, seed=seed)
        rank = None
        if placebos:
            deltas = [
                continuous_delta(*_arrays(p, outcome), ratio=outcome.ratio, with_ci=False).delta for p in placebos
            ]
            cmp = placebo_compare(d.delta, deltas)
            rank = PlaceboRank(cmp.percentile, cmp.p_empirical, cmp.placebo)
        scale = d.before if outcome.relative and np.isfinite(d.before) else 1.0
        verdict = outcome_verdict(
            outcome.name,
            d.delta,
            (d.ci_low, d.ci_high),
            None if rank is None else rank.percentile,
            len(placebos),
            scale,
        )
        out.append(OutcomeResult(outcome.name, d.n, d.before, d.after, d.delta, d.ci_low, d.ci_high, rank, verdict))
    return out


@dataclass
class OutcomeRuns:
    """The continuous outcomes of one A/B run, per edited model (module doc); made by :func:`outcome_runs`."""

    plan: ABPlan
    progress: Progress
    off: str  # why the run measures none ("--outcomes off", or what it lacks); "": it measures them
    runs: dict[str, Outcomes] = field(default_factory=dict)  # per edited model, made on first use
    measured: dict[tuple[str, str], ArmOutcomes] = field(default_factory=dict)  # (model, edits key) -> outcomes
    responses: dict[str, str] = field(default_factory=dict)  # per edited model, which responses it teacher-forced
    pairs: int = 0  # the DPO pairs the margin rests on

    def of(self, model: str, edits: tuple[Edit, ...], baselines: Mapping[str, Generations]) -> ArmOutcomes | None:
        """The outcomes of ``edits`` to ``model`` on the target capability's rows (None: the run measures none);
        ``baselines``: each model's baseline generations, the target's greedy responses among them."""
        if self.off:
            return None
        if model not in self.runs:
            self._start(model, baselines.get(other(model)))
        found = self.measured.get((model, edits_key(edits)))
        return found if found is not None else self.runs[model].arm(edits)

    def _start(self, model: str, base: Generations | None) -> None:
        plan, target = self.plan, other(model)
        idx = plan.groups[plan.config.target]
        inputs = outcome_inputs(
            plan.config,
            plan.tokenizer,
            [plan.rows[i] for i in idx],
            [plan.row_ids[i] for i in idx],
            plan.data_file,
            target,
            None if base is None else greedy_ids([base.ids[i] for i in idx], plan.tokenizer),
            plan.pool.dirs,
        )
        self.responses[model] = inputs.responses
        self.pairs = len(inputs.pairs)
        self.runs[model] = outcomes_for(plan.models[model], plan.models[target], inputs)
        self._measure_all(model)

    def _measure_all(self, model: str) -> None:
        """Every arm's and placebo set's outcomes on ``model`` in one pass over the rows' batches
        (:meth:`access.outcomes.Outcomes.arms`: each batch's prompts, lower blocks and patch sources once for all)."""
        passes = {
            edits_key(edits): edits
            for arm in self.plan.arms
            if arm.model == model
            for edits in (arm.edits, *arm.placebo_edits)
        }
        start, every = time.perf_counter(), max(1, self.runs[model].n_batches // 8)
        self.progress(f"outcomes ({model} model): {len(passes)} arm and placebo passes teacher-forced together")

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
    :func:`interventions.outcomes.outcome_seconds`)."""
    config = plan.config
    forced = len(plan.arms) + sum(len(arm.placebo_edits) for arm in plan.arms) + 2
    idx = plan.groups[config.target]
    mean_prompt = sum(len(prompts[i]) for i in idx) / max(1, len(idx))
    parameters = float(sum(p.numel() for p in plan.models[config.model].parameters()))
    new_tokens, pairs = config.generation.max_new_tokens, config.outcome_pairs
    seconds = outcome_seconds(forced, len(idx), mean_prompt, new_tokens, pairs, parameters)
    return (
        f"then {forced} teacher-forced outcome passes (every arm and placebo set, and the target and unedited "
        f"model once), each over the rows' responses and references and up to {config.outcome_pairs} "
        f"DPO pairs: about {minutes(seconds)} at the pace measured on the default "
        "pair, 2 CPU cores (docs/interventions.md); --outcomes off skips them"
    )

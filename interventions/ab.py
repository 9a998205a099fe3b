"""``run_ab``: baseline vs intervened generations on the same prompts, judged, with controls.

The pipeline, in order:

1. :func:`interventions.plan.plan_ab` resolves the model dir and data file, picks the rows (the target
   capability, and with ``collateral`` the others after it; ``limit`` rows per capability and at most
   ``collateral_rows`` of each other one, interleaved by task so a small limit still covers every task),
   resolves the neuron set and checks it against the model, plans the arms of every ``--edit`` recipe
   (:mod:`interventions.recipes`) and draws their placebo arms, checking every edit against its model before
   anything is generated;
2. generate each needed model's baseline once, then every arm and its placebo arms; every
   arm uses the same batches and decoding as its baseline;
3. judge every arm, compute per capability the paired statistics against the baseline of
   the model it ran on (:mod:`interventions.stats`), place each arm's Δ among its placebo
   Δs, fill the no-op guard; write the report and the generations (:mod:`interventions.report`).

Example:
    >>> capability_result.__name__, run_ab.__name__   # the paired statistics of one capability, and the run
    ('capability_result', 'run_ab')
    >>> report = run_ab(ABConfig(run_dir="runs/x", capability="multi_turn", placebo=20))   # doctest: +SKIP
    >>> report.main.capability("multi_turn").effect.delta                                   # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from access.drivers.base import SiteEdits
from access.edited_generation import ABGenerator
from access.edits import Edit, UnitEdit, site_edits
from access.generation import Generations
from access.hook_points import attach
from access.outcomes import ArmOutcomes, Outcomes
from access.shared_generation import SharedDecoder, pass_unshareable, unshareable
from core.capabilities import Capability
from core.errors import Interrupted, ProbeError
from core.judges import Judge, make_judge
from core.rows import row_location
from core.schema import TestRow
from interventions import parallel
from interventions.arms import ArmStore, fingerprint, made_by
from interventions.config import ABConfig
from interventions.outcomes import (
    greedy_ids,
    outcome_inputs,
    outcome_results,
    outcome_seconds,
    outcomes_for,
    write_greedy,
)
from interventions.plan import ABPlan, plan_ab, provenance_warnings
from interventions.recipes import Arm, other, placebo_family
from interventions.results import (
    ABReport,
    ArmPlacebo,
    ArmResult,
    BaselinePass,
    CapabilityResult,
    Coherence,
    NoOpGuard,
    NoPlacebo,
    PlaceboDrawn,
    PlaceboRank,
    PlaceboSkipped,
    build_guard,
)
from interventions.scoring import ArmScores, corpus_bleu, score_arm
from interventions.selection import describe
from interventions.stats import paired_delta, placebo_compare
from probes.distributed import PeerLost, World

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


def _scores(arm: ArmScores, cap: Capability, idx: list[int]) -> list[int | None]:
    return [arm.verdicts[i].scores.get(cap) for i in idx]


def capability_result(
    cap: Capability,
    target: bool,
    idx: list[int],
    base: tuple[Generations, ArmScores],
    arm: tuple[Generations, ArmScores],
    n_bootstrap: int,
    seed: int,
    with_ci: bool = True,
) -> CapabilityResult:
    """Paired statistics of one capability for one arm against the baseline (``with_ci=False``: no bootstrap)."""
    before_all, after_all = _scores(base[1], cap, idx), _scores(arm[1], cap, idx)
    pairs = [(b, a) for b, a in zip(before_all, after_all, strict=True) if b is not None and a is not None]
    effect = paired_delta(
        [b for b, _ in pairs], [a for _, a in pairs], n_resamples=n_bootstrap, seed=seed, with_ci=with_ci
    )
    return CapabilityResult(
        capability=cap.value,
        target=target,
        n_rows=len(idx),
        undecided=len(idx) - len(pairs),
        effect=effect,
        rows_changed=sum(base[0].ids[i] != arm[0].ids[i] for i in idx),
        rouge_l_before=float(np.mean([base[1].rouge_l[i] for i in idx])),
        rouge_l_after=float(np.mean([arm[1].rouge_l[i] for i in idx])),
        bleu_before=float("nan"),
        bleu_after=float("nan"),
    )


def _with_bleu(
    result: CapabilityResult, rows: list[TestRow], idx: list[int], base: Generations, arm: Generations
) -> CapabilityResult:
    refs = [rows[i].reference for i in idx]
    result.bleu_before = corpus_bleu([base.texts[i] for i in idx], refs)
    result.bleu_after = corpus_bleu([arm.texts[i] for i in idx], refs)
    return result


class _Runner:
    """Holds what every arm shares: models, generators, rows, judge, baselines, the planned arms."""

    def __init__(self, plan: ABPlan, progress: Progress, judge: Judge | None) -> None:
        config = plan.config
        self.plan, self.config, self.progress = plan, config, progress
        self.model_dir, self.data_file = plan.model_dir, plan.data_file
        self.selections, self.neurons, self.arms = plan.selections, plan.neurons, plan.arms
        self.rows, self.row_ids, self.groups = plan.rows, plan.row_ids, plan.groups
        self.models, self.model = plan.pool.models, plan.pool.model
        self.outcomes_off = "" if config.outcomes != "off" else "--outcomes off"
        if config.outcomes != "off":  # the outcomes' target: the other model of each arm's
            try:
                for name in sorted({other(arm.model) for arm in plan.arms}):
                    self.model(name)
            except ProbeError as exc:
                if config.outcomes == "only":
                    raise
                self.outcomes_off = f"no continuous outcomes: they need the other model of the pair ({exc})"
        self.tokenizer = plan.tokenizer
        self.torch_dtype = self.models[config.model].dtype
        self.judge = judge or make_judge(config.judge, config.judge_client())
        self.gen_config = replace(config.generation, seed=config.seed)  # the run's one seed
        self.generators = {
            name: ABGenerator(model, self.tokenizer, self.rows, self.gen_config, config.backend, where=self._row_name)
            for name, model in self.models.items()
        }
        units = [(n.layer, n.unit) for n in self.neurons.neurons]
        dirs = list(plan.pool.dirs.values())
        # the device's kind, not its number: the ranks of a data-parallel run keep batches for each other
        settings = config.to_dict() | {"device": self.models[config.model].device.type}
        key = fingerprint(settings, dirs, self.data_file, self.row_ids, units)
        self.store = ArmStore(config.out_dir, key, made_by(plan.pool.dirs, self.tokenizer, self.row_ids))
        self.baselines: dict[str, tuple[Generations, ArmScores]] = {}
        self.total_passes = len(self.passes())
        self.passes_done = 0  # passes started, read back or generated
        self.generated: list[float] = []  # seconds of each pass generated in this process
        self.pregenerated: dict[str, Generations] = {}  # passes decoded in shared batches, by store key
        self.outcome_runs: dict[str, Outcomes] = {}  # per intervened model, its outcomes (made on first use)
        self.outcome_memo: dict[tuple[str, str], ArmOutcomes] = {}  # (model, edits key) -> every pass's outcomes
        self.responses_by_model: dict[str, str] = {}  # per intervened model, which responses its outcomes forced
        self.outcome_pairs = 0
        self.coherent_baseline: dict[str, float] = {}  # per model, its baseline output's perplexity under SFT

    def outcomes_of(self, model: str, edits: tuple[Edit, ...]) -> ArmOutcomes | None:
        """The continuous outcomes of ``edits`` to ``model`` on the target capability's rows (None: ``--outcomes
        off``)."""
        if self.outcomes_off:
            return None
        if model not in self.outcome_runs:
            target = other(model)
            base = self.baselines.get(target)
            idx = self.groups[self.config.target]
            inputs = outcome_inputs(
                self.config,
                self.tokenizer,
                [self.rows[i] for i in idx],
                [self.row_ids[i] for i in idx],
                self.data_file,
                target,
                None if base is None else greedy_ids([base[0].ids[i] for i in idx], self.tokenizer),
                self.plan.pool.dirs,
            )
            self.responses_by_model[model] = inputs.responses
            self.outcome_pairs = len(inputs.pairs)
            self.outcome_runs[model] = outcomes_for(self.models[model], self.models[target], inputs)
            self._all_outcomes(model)
        found = self.outcome_memo.get((model, _edits_key(edits)))
        return found if found is not None else self.outcome_runs[model].arm(edits)

    def outcome_responses(self) -> str:
        """Which responses the outcomes teacher-forced, for the report: one line, per model when arms edit both."""
        said = self.responses_by_model
        if len(said) == 1:
            return next(iter(said.values()))
        return "; ".join(f"{what} for the arms on {model}" for model, what in said.items())

    def _outcome_estimate(self, passes: int) -> float:
        """Seconds the outcome passes should take (:func:`interventions.outcomes.outcome_seconds`)."""
        idx = self.groups[self.config.target]
        prompts = self.generators[self.config.model].generator.prompts
        mean_prompt = sum(len(prompts[i]) for i in idx) / max(1, len(idx))
        parameters = float(sum(p.numel() for p in self.models[self.config.model].parameters()))
        return outcome_seconds(
            passes,
            len(idx),
            mean_prompt,
            self.config.generation.max_new_tokens,
            self.config.outcome_pairs,
            parameters,
        )

    def _all_outcomes(self, model: str) -> None:
        """Every arm's and placebo set's outcomes on ``model`` in one pass over the rows' batches
        (:meth:`access.outcomes.Outcomes.arms`: each batch's prompts, lower blocks and patch sources once for all)."""
        passes = {
            _edits_key(edits): edits
            for arm in self.arms
            if arm.model == model
            for edits in (arm.edits, *arm.placebo_edits)
        }
        start, every = time.perf_counter(), max(1, self.outcome_runs[model].n_batches // 8)
        self.progress(f"outcomes ({model} model): {len(passes)} arm and placebo passes teacher-forced together")

        def done(batch: int, total: int) -> None:
            if batch % every == 0 or batch == total:
                left = (time.perf_counter() - start) / batch * (total - batch)
                self.progress(f"outcomes ({model} model): batch {batch}/{total}, about {_minutes(left)} left")

        found = self.outcome_runs[model].arms(list(passes.values()), progress=done)
        self.outcome_memo.update({(model, key): outcome for key, outcome in zip(passes, found, strict=True)})

    def start(self) -> None:
        """Generate every pass that decodes in shared batches, then generate (or read back) and judge each baseline."""
        self.progress(
            f"{self.total_passes} generation passes over {len(self.rows)} prompts, "
            f"up to {self.config.generation.max_new_tokens} new tokens each: {len(self.models)} baseline(s), "
            f"{len(self.arms)} arm(s), {self.total_passes - len(self.models) - len(self.arms)} placebo arms"
        )
        if not self.outcomes_off:
            forced = len(self.arms) + sum(len(arm.placebo_edits) for arm in self.arms) + 2
            self.progress(
                f"then {forced} teacher-forced outcome passes (every arm and placebo set, and the target and unedited "
                f"model once), each over the rows' responses and references and up to {self.config.outcome_pairs} "
                f"DPO pairs: about {_minutes(self._outcome_estimate(forced))} at the pace measured on the default "
                "pair, 2 CPU cores (docs/interventions.md); --outcomes off skips them"
            )
        if self.config.engine == "shared":
            self._share()
        for name in self.models:
            if f"baseline {name}" not in self.pregenerated:
                self.progress(f"baseline ({name} model): {len(self.rows)} prompts")
            generations = self._generate(f"baseline {name}", name, ())
            self.baselines[name] = (generations, score_arm(self.judge, self.rows, generations.texts))
        alone = sum(key not in self.pregenerated for key, _, _ in self.passes()) - sum(
            f"baseline {m}" not in self.pregenerated for m in self.models
        )
        if alone:
            self.progress(f"{alone} more passes decode arm by arm{self._left()} (a patch pass runs two models)")

    def passes(self) -> list[tuple[str, str, tuple[Edit, ...]]]:
        """(store key, model, edits) of every generation pass: the baselines, each arm, each placebo arm.

        A key holds the hash of the pass's edits, not its rule, so two rules that make the same pass share it."""
        named: list[tuple[str, str, tuple[Edit, ...]]] = [(f"baseline {name}", name, ()) for name in self.models]
        for arm in self.arms:
            named.append((arm.name, arm.model, arm.edits))
            named += [(f"{arm.name} placebo {k}", arm.model, edits) for k, edits in enumerate(arm.placebo_edits)]
        keyed = {(name if not edits else f"{name} {_edits_key(edits)}"): (model, edits) for name, model, edits in named}
        return [(key, model, edits) for key, (model, edits) in keyed.items()]

    def _share(self) -> None:
        """Decode each model's shareable passes together (:mod:`access.shared_generation`); the rest go arm by arm."""
        jobs = self._shared_jobs()
        self.shared_total = sum(len(shared) for _, shared in jobs) * len(self.rows)
        self.shared_done, self.shared_seconds = 0, 0.0
        for name, shared in jobs:
            self._decode_shared(name, shared)

    def _shared_jobs(self) -> list[tuple[str, list[tuple[str, SiteEdits | None]]]]:
        """Per model, its passes that decode in shared batches (store key, compiled edits)."""
        by_model: dict[str, list[tuple[str, SiteEdits | None]]] = {}
        for key, name, edits in self.passes():
            by_model.setdefault(name, []).append((key, site_edits(self.model(name), edits) if edits else None))
        jobs = []
        for name, passes in by_model.items():
            reasons = {key: pass_unshareable(self.models[name], compiled) for key, compiled in passes}
            shared = [(key, compiled) for key, compiled in passes if reasons[key] is None]
            reason = unshareable(self.models[name], self.config.generation.do_sample, self.config.backend)
            if reason is not None:
                self.progress(f"{name} model: {reason}")
                continue
            if len(shared) < len(passes):
                self.progress(
                    f"{name} model: {len(passes) - len(shared)} pass(es) decode arm by arm: "
                    f"{next(why for why in reasons.values() if why)}"
                )
            jobs.append((name, shared))
        return jobs

    def _decoder(self, name: str, shared: list[tuple[str, SiteEdits | None]]) -> tuple[SharedDecoder, str]:
        """The shared decoder of ``name``'s passes, and the store key of its batches (``TAG K``)."""
        decoder = SharedDecoder(self.generators[name].generator, self.config.max_batch_tokens, attach)
        tag = f"shared {name} {hashlib.sha256(' '.join(key for key, _ in shared).encode()).hexdigest()[:16]} batch"
        return decoder, tag

    def share_parallel(self, world: World) -> None:
        """Data-parallel: decode this rank's batches of every shared pass (dealt by :func:`interventions.parallel.deal`)
        and hand them to rank 0's store; a rank other than 0 then stops (:class:`interventions.parallel.HelperDone`)."""
        jobs = [(*self._decoder(name, shared), shared) for name, shared in self._shared_jobs()]
        budgets = world.gather([(decoder.max_batch_tokens, decoder.max_cache_bytes) for decoder, _, _ in jobs])
        for k, (decoder, _, _) in enumerate(jobs):  # one plan of forwards for all ranks: the smallest device's budgets
            decoder.max_batch_tokens = min(budget[k][0] for budget in budgets)
            decoder.max_cache_bytes = min(budget[k][1] for budget in budgets)
        pending = world.on_main(
            lambda: {
                tag: [b for b in range(len(d.batches)) if self.store.get_body(f"{tag} {b}") is None]
                for d, tag, _ in jobs
            }
        )
        mine = parallel.deal(world, pending)
        self.progress(
            f"{world.size} processes share {sum(map(len, pending.values()))} batches of prompts not yet kept "
            f"(batch k of that list is rank k % {world.size}'s); rank 0 decodes {sum(map(len, mine.values()))}"
        )
        bodies: dict[str, dict[str, Any]] = {}

        def kept(tag: str, b: int) -> dict[str, Any] | None:
            body = self.store.get_body(f"{tag} {b}")
            if body is not None:
                bodies[f"{tag} {b}"] = body
            return body

        def keep(tag: str, b: int, body: dict[str, Any]) -> None:
            self.store.put_body(f"{tag} {b}", body)
            bodies[f"{tag} {b}"] = body

        for decoder, tag, shared in jobs:
            decoder.run(
                [compiled for _, compiled in shared],
                lambda number, total, *_: self.progress(f"rank 0: batch {number}/{total} decoded"),
                kept=lambda b, tag=tag: kept(tag, b),  # type: ignore[misc]  # the loop's tag, bound now
                keep=lambda b, body, tag=tag: keep(tag, b, body),  # type: ignore[misc]
                only=set(mine[tag]),
            )
        received = parallel.hand_over(world, bodies, self.store.put_body)
        if not world.is_main:
            raise parallel.HelperDone
        self.progress(f"rank 0 received {received} batches from the other ranks; the rest runs on rank 0")

    def _decode_shared(self, name: str, shared: list[tuple[str, SiteEdits | None]]) -> None:
        decoder, tag = self._decoder(name, shared)
        self.progress(
            f"{name} model: {len(shared)} passes decode together in {len(decoder.batches)} batches of "
            f"prompts; {decoder.describe([c for _, c in shared])}"
        )
        self.progress(
            f"estimated time: about {_minutes(decoder.estimate_seconds([c for _, c in shared]))} "
            "(at the pace of one timed prompt batch, every row decoding to the token limit)"
        )

        def done(batches: int, total: int, rows: int, seconds: float, read_back: bool) -> None:
            self.shared_done += rows * len(shared)
            self.shared_seconds += 0.0 if read_back else seconds
            left = ""
            if self.shared_seconds:
                pace = self.shared_seconds / self.shared_done
                left = f", about {_minutes((self.shared_total - self.shared_done) * pace)} left"
            share = self.shared_done / max(1, self.shared_total)
            bar = "#" * round(20 * share) + "." * (20 - round(20 * share))
            self.progress(
                f"{name} model: batch {batches}/{total}{', read back' if read_back else ''} [{bar}] "
                f"{share:.0%} of all passes' rows{left}"
            )

        results = decoder.run(
            [compiled for _, compiled in shared],
            done,
            kept=lambda b: self.store.get_body(f"{tag} {b}"),
            keep=lambda b, body: self.store.put_body(f"{tag} {b}", body),
        )
        for (key, _), generations in zip(shared, results, strict=True):
            self.pregenerated[key] = generations

    def _left(self) -> str:
        """The time the passes not yet run should take at the pace of those generated so far ("" before the first)."""
        if not self.generated:
            return ""
        pace = sum(self.generated) / len(self.generated)
        return f"; about {_minutes((self.total_passes - self.passes_done) * pace)} left"

    def _generate(self, name: str, model: str, edits: tuple[Edit, ...]) -> Generations:
        key = name if not edits else f"{name} {_edits_key(edits)}"
        self.passes_done += 1
        if key in self.pregenerated:
            return self.pregenerated[key]
        kept = self.store.get(key)
        if kept is not None:
            self.progress(f"{name}: read back from an interrupted run")
            return kept
        generations = self.store.put(key, self.generators[model].run(edits or None))
        self.generated.append(generations.seconds)
        return generations

    def kept(self) -> str:
        """What an interrupt leaves on disk, and how to resume from it (one line)."""
        done = self.store.finished()
        if not done:
            return "no generation arm had finished, nothing kept; rerun the same command"
        batches = sum(name.startswith("shared_") for name in done)
        what = [f"{batches} batch(es) of prompts decoded for every shared pass"] if batches else []
        what += [f"{len(done) - batches} of {self.total_passes} generation passes"] if len(done) > batches else []
        return (
            f"{' and '.join(what)} finished and kept in {self.store.root}; "
            f"rerun with the same options and --out {self.config.out_dir} to resume from them"
        )

    def _row_name(self, i: int) -> str:
        """Row ``i`` of the generated rows by its data file and line."""
        return row_location(self.row_ids[i], self.data_file)

    def scored(self, name: str, model: str, edits: tuple[Edit, ...]) -> tuple[Generations, ArmScores]:
        generations = self._generate(name, model, edits)
        return generations, score_arm(self.judge, self.rows, generations.texts)

    def results(self, arm: tuple[Generations, ArmScores], model: str, full: bool = True) -> list[CapabilityResult]:
        """Per-capability results against ``model``'s baseline; ``full=False`` (placebo arms)
        skips the bootstrap CI and BLEU."""
        base, out = self.baselines[model], []
        for cap, idx in self.groups.items():
            result = capability_result(
                cap, cap == self.config.target, idx, base, arm, self.config.n_bootstrap, self.config.seed, full
            )
            out.append(_with_bleu(result, self.rows, idx, base[0], arm[0]) if full else result)
        return out

    def arm_result(self, arm: Arm, number: int) -> tuple[ArmResult, Generations]:
        self.progress(
            f"arm {number}/{len(self.arms)}: {arm.label} ({arm.model} model{_units_edited(arm.edits)}){self._left()}"
        )
        generated = self.scored(arm.name, arm.model, arm.edits)
        base = self.baselines[arm.model][0]
        rows_changed = sum(a != b for a, b in zip(generated[0].ids, base.ids, strict=True))
        dtype = self.torch_dtype
        reason = next((r for r in (e.noop_reason(dtype) for e in arm.edits) if r), None)
        guard = build_guard(
            arm.label,
            arm.factor,
            self.config.dtype,
            max(e.changed_fraction(dtype) for e in arm.edits),
            reason,
            generated[0].hook_stats,
            len(self.rows),
            rows_changed,
        )
        capabilities = self.results(generated, arm.model)
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
        result.coherence = self.coherence(arm.model, generated[0])
        result.placebo, outcome_placebos = self.placebo(arm, guard, capabilities)
        arm_outcomes = self.outcomes_of(arm.model, arm.edits)
        if arm_outcomes is not None:
            result.outcomes = outcome_results(
                arm_outcomes, outcome_placebos, n_bootstrap=self.config.n_bootstrap, seed=self.config.seed
            )
        return result, generated[0]

    def coherence(self, model: str, generated: Generations) -> Coherence | None:
        """The arm's coherence guard (:mod:`interventions.coherence`); None where the SFT model cannot be loaded."""
        from interventions.coherence import JUDGE, output_perplexity

        try:
            judge = self.model(JUDGE)
        except ProbeError:
            return None
        prompts = self.generators[model].generator.prompts
        if model not in self.coherent_baseline:
            self.coherent_baseline[model] = output_perplexity(judge, prompts, self.baselines[model][0].ids)[0]
        perplexity, tokens = output_perplexity(judge, prompts, generated.ids)
        return Coherence(perplexity, self.coherent_baseline[model], tokens, JUDGE)

    def placebo(
        self, arm: Arm, guard: NoOpGuard, capabilities: list[CapabilityResult]
    ) -> tuple[ArmPlacebo, list[ArmOutcomes]]:
        """The arm's placebo passes; each capability's Δ is ranked among theirs (``capabilities``' ``placebo``);
        and each placebo set's continuous outcomes."""
        cfg = self.config
        family = placebo_family(arm)
        if not arm.placebo:
            return NoPlacebo(), []
        if not arm.placebo_edits:
            why = f"no-op in {cfg.dtype}: {guard.flags[0]}" if guard.flags and cfg.placebo else "--placebo 0"
            return PlaceboSkipped(n_sets=0, seed=cfg.seed, family=family, skipped=why), []
        deltas: dict[str, list[float]] = {cap.value: [] for cap in self.groups}
        changed: dict[str, list[int]] = {cap.value: [] for cap in self.groups}
        outcomes: list[ArmOutcomes] = []
        for k, edits in enumerate(arm.placebo_edits):
            self.progress(f"{arm.title}: placebo {k + 1}/{len(arm.placebo_edits)}{self._left()}")
            for capability in self.results(
                self.scored(f"{arm.name} placebo {k}", arm.model, edits), arm.model, full=False
            ):
                deltas[capability.capability].append(capability.effect.delta)
                changed[capability.capability].append(capability.rows_changed)
            placebo_outcomes = self.outcomes_of(arm.model, edits)
            outcomes += [] if placebo_outcomes is None else [placebo_outcomes]
        for capability in capabilities:
            cmp = placebo_compare(capability.effect.delta, deltas[capability.capability])
            capability.placebo = PlaceboRank(
                cmp.percentile, cmp.p_empirical, cmp.placebo, float(np.mean(changed[capability.capability]))
            )
        return self.drawn(arm), outcomes

    def drawn(self, arm: Arm) -> PlaceboDrawn:
        """The record of the arm's placebo sets."""
        return PlaceboDrawn(
            n_sets=len(arm.placebo_edits),
            seed=self.config.seed,
            family=placebo_family(arm),
            factor=arm.factor,
            sets=[
                _placebo_summary(edits[0]) if len(edits) == 1 else [_placebo_summary(e) for e in edits]
                for edits in arm.placebo_edits
            ],
        )


def _placebo_summary(edit: Edit) -> Any:
    body = edit.describe()
    return body.get("units") if "units" in body else {"layer": body.get("layer"), "norm": body.get("norm")}


def _edits_key(edits: tuple[Edit, ...]) -> str:
    return hashlib.sha256("".join(e.fingerprint() for e in edits).encode()).hexdigest()[:16]


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _memory(runner: _Runner, world: World) -> str:
    """The A/B plan's memory per process (:func:`interventions.parallel.memory_line`)."""
    from core.budget import default_cache_bytes

    weights = sum(t.numel() * t.element_size() for m in runner.models.values() for t in (*m.parameters(), *m.buffers()))
    device = str(runner.models[runner.config.model].device)
    return parallel.memory_line(world, weights, default_cache_bytes(device), len(runner.models))


def run_ab(
    plan: ABPlan | ABConfig,
    progress: Progress | None = None,
    judge: Judge | None = None,
    *,
    annotate: Callable[[ABReport], None] | None = None,
) -> ABReport:
    """Run the A/B evaluation that ``plan`` (:func:`interventions.plan.plan_ab`; a config is planned first)
    resolved; write files if its config's ``out_dir``.

    ``progress`` receives one line per stage; ``judge`` replaces the judge named in the
    config (any object with the :class:`~core.judges.base.Judge` protocol).
    A plan with several selections (``plan_ab(config, selections)``) gives each rule every arm of the configured
    edits and its own placebos, all sharing one baseline and one set of passes
    (:mod:`interventions.select_compare`); ``annotate`` adds to the report before it is written.
    Ctrl-C raises :class:`~core.errors.Interrupted` naming the arms kept for a resume
    (see :mod:`interventions.arms`).
    """
    runner: _Runner | None = None
    try:
        world = parallel.active()
        runner = world.agree(
            lambda: _Runner(plan if isinstance(plan, ABPlan) else plan_ab(plan), progress or _quiet, judge)
        )
        runner.progress(_memory(runner, world))
        if world.distributed and runner.config.outcomes != "only" and runner.config.engine == "shared":
            try:
                runner.share_parallel(world)
            except PeerLost as lost:
                raise PeerLost(f"{lost}; {runner.kept()}", lost.reporter, lost.dead) from None
        elif not world.is_main:
            raise parallel.HelperDone  # nothing to share: rank 0 runs the evaluation
        if runner.config.outcomes != "only":
            runner.start()
        return _evaluate(runner, annotate)
    except (KeyboardInterrupt, Interrupted) as exc:
        kept = (
            runner.kept()
            if runner is not None
            else "no generation arm had finished, nothing kept; rerun the same command"
        )
        cause = f" ({exc})" if isinstance(exc, Interrupted) else ""
        raise Interrupted(f"A/B evaluation stopped{cause}: {kept}") from None


def _outcomes_only(runner: _Runner) -> list[ArmResult]:
    """``--outcomes only``: every arm's and placebo set's continuous outcomes, nothing generated or judged."""
    results = []
    for number, arm in enumerate(runner.arms, 1):
        runner.progress(f"arm {number}/{len(runner.arms)}: {arm.label} (outcomes only)")
        found = runner.outcomes_of(arm.model, arm.edits)
        assert found is not None, "--outcomes only computes outcomes"
        placebos = []
        for k, edits in enumerate(arm.placebo_edits):
            runner.progress(f"{arm.title}: placebo {k + 1}/{len(arm.placebo_edits)} (outcomes only)")
            measured = runner.outcomes_of(arm.model, edits)
            assert measured is not None
            placebos.append(measured)
        reason = next((r for r in (e.noop_reason(runner.torch_dtype) for e in arm.edits) if r), None)
        fraction = max(e.changed_fraction(runner.torch_dtype) for e in arm.edits)
        guard = build_guard(arm.label, arm.factor, runner.config.dtype, fraction, reason, found.stats, 0, 0)
        placebo: ArmPlacebo = NoPlacebo()
        if arm.placebo:
            placebo = (
                runner.drawn(arm)
                if arm.placebo_edits
                else PlaceboSkipped(n_sets=0, seed=runner.config.seed, family=placebo_family(arm), skipped="none drawn")
            )
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
        result.outcomes = outcome_results(
            found, placebos, n_bootstrap=runner.config.n_bootstrap, seed=runner.config.seed
        )
        results.append(result)
    return results


def _evaluate(runner: _Runner, annotate: Callable[[ABReport], None] | None = None) -> ABReport:
    config = runner.config
    results: list[ArmResult] = []
    generations: dict[str, Generations] = {}
    if config.outcomes == "only":
        results = _outcomes_only(runner)
    for number, arm in enumerate(runner.arms if config.outcomes != "only" else [], 1):
        result, generated = runner.arm_result(arm, number)
        results.append(result)
        generations[arm.title] = generated
    baselines = {
        name: BaselinePass(g.seconds, g.n_tokens, len(runner.rows)) for name, (g, _) in runner.baselines.items()
    } or {config.model: BaselinePass(0.0, 0, 0)}  # --outcomes only: nothing generated
    report = ABReport(
        capability=config.capability,
        model=config.model,
        model_dir=str(runner.model_dir),
        data_file=str(runner.data_file),
        dtype=config.dtype,
        backend=config.backend,
        judge=runner.judge.name,
        neurons=describe(runner.neurons),
        baselines=baselines,
        arms=results,
        config=config.to_dict(),
        responses=runner.outcome_responses(),
        outcome_pairs=runner.outcome_pairs,
        warnings=provenance_warnings(runner.neurons, config.model, runner.model_dir)
        + ([runner.outcomes_off] if runner.outcomes_off.startswith("no continuous") else [])
        + [flag for arm in results if arm.role == "main" for flag in arm.guard.flags]
        + [fault for arm in results for fault in arm.guard.faults],
    )
    if annotate is not None:
        annotate(report)
    if config.out_dir is not None and config.outcomes == "only":
        from interventions.report import write_outcomes_only

        write_outcomes_only(report, Path(config.out_dir))
    elif config.out_dir is not None:
        from interventions.report import write_report

        if not runner.outcomes_off:
            idx = runner.groups[config.target]
            write_greedy(
                Path(config.out_dir),
                [runner.row_ids[i] for i in idx],
                {m: [b[0].ids[i] for i in idx] for m, b in runner.baselines.items()},
                runner.tokenizer,
                runner.plan.pool.dirs,
            )
        write_report(
            report,
            runner.rows,
            runner.row_ids,
            {m: b[0] for m, b in runner.baselines.items()},
            runner.baselines[config.model][1],
            generations,
            Path(config.out_dir),
        )
        runner.store.clear()
    return report


def _units_edited(edits: tuple[Edit, ...]) -> str:
    """The units an arm's progress line names (for example ", 64 units"); none for an arm that edits no unit set
    (steer, expo, lda)."""
    units = sum(len(e.units) for e in edits if isinstance(e, UnitEdit))
    return f", {units} units" if units else ""

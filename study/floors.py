"""Each stage of ``probe replicate`` beside its weight-FLOP floor: the time the run recorded, the least its matrix
products take on this machine, their ratio against :data:`RATIO_TARGET`, and the issue's budgets.

The times are the run's own (``replicate.json``: each stage's seconds, and within the intervene stage the seconds of
greedy generation and of the teacher-forced outcome passes, :mod:`core.clock`). Each floor is the stage's weight FLOPs
(:mod:`core.flops`) over this machine's rate for the model's matrix products, counted from the same plan and the
same counting functions as the stage's estimate (:mod:`study.replicate_estimate`,
:func:`probes.recording.planned_recording`), with the sizes the run's records hold where they hold them:

==========================  ============================================================================================
record                      every prompt token through each model up to the last recorded layer, each local direction's
                            block on every recorded layer (no padding, no LM head)
intervene: generation       per model, its passes generated (baseline, arms, the placebo sets each arm drew): the prompt
                            tokens the shared engine runs (every stem once) and each pass's generated tokens, through
                            the blocks below the fork layer (the lowest any pass edits) once for all passes and the rest
                            once per pass, a logit per generated token; a placebo pass counted at its baseline's tokens
intervene: teacher-forced   per edited model, the outcomes' sequences as the run teacher-forced them (every distinct
                            prompt once, every response): the target's pass and the unedited one whole, each arm and
                            the placebo sets it teacher-forced from its fork layer up, the logits at every response
                            token; where the target is the coherence guard's judge (SFT), the model's baseline
                            responses of the target rows that are not KL rows, through the target after its prompts
intervene: coherence        per edited model, its baseline's generated tokens through the guard's judge (SFT) and its
                            logits there, after prompts the outcomes' target pass already ran (where the outcomes are
                            off, the prompts as the generation counts them), but the rows that pass scored (where the
                            target is the judge, every target row); an arm's changed rows not counted
evaluate                    per model, the judged rows' prompt tokens (every stem once) and its responses' tokens
                            (re-tokenized from ``eval.json``), a logit per response token
localize                    its estimate's counts (:func:`study.replicate_estimate.localize_counts`): the fixed passes,
                            every arm at its worst-case fork, the gradient pass (two forwards and a backward), the
                            greedy responses at the token limit: high, since the real forks are higher
==========================  ============================================================================================

Attention, norms and the embedding lookup count as free, and no arm is counted to diverge, so an exact engine cannot
go below a floor (but the localize one); a ratio shows what each stage spends beyond its matrix products.

Example:
    >>> verdict(100.0, 140.0), verdict(100.0, 160.0), verdict(100.0, None)   # a floor of 100 s, and the time
    ('PASS', 'FAIL', '—')
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from core.clock import COHERENCE, FORCED, GENERATION
from core.flops import BACKWARD, TokenPasses, Weights, shared_passes
from core.records import read_record
from core.run_dir import RunDir
from study.replicate_estimate import minutes
from study.stored import ReplicateRecord

if TYPE_CHECKING:
    from access.edits import Edit
    from interventions.config import ABConfig
    from interventions.plan import ABPlan
    from interventions.results import ABReport, ArmResult
    from study.replicate_config import ReplicateOptions

RATIO_TARGET = 1.5  # issue 51: a stage at most this many times its floor on a quiet machine
REPLICATE_BUDGET_S = 20 * 60.0  # issue 51: probe replicate with today's defaults on the default pair, 2 cores
INTERVENE_BUDGET_S = 8 * 60.0  # issue 51: the default probe intervene with its outcomes
LOCALIZE_BUDGET_S = 10 * 60.0  # issue 50: the default probe localize, the localize stage's own budget


@dataclass(frozen=True)
class Floor:
    """One row of the table: a stage (or a part of one), its measured seconds (None: not measured) and its work."""

    stage: str
    seconds: float | None
    work: TokenPasses


def verdict(floor_s: float, seconds: float | None) -> str:
    """PASS where ``seconds`` is at most :data:`RATIO_TARGET` times ``floor_s``."""
    if seconds is None:
        return "—"
    return "PASS" if seconds <= RATIO_TARGET * floor_s else "FAIL"


def read_run(run_dir: Path) -> tuple[ReplicateRecord, ReplicateOptions]:
    """The replicate record of ``run_dir`` and the options it ran with."""
    from core.config_file import from_settings
    from study.replicate_config import ReplicateOptions

    record = read_record(ReplicateRecord, RunDir(run_dir).replicate_file, "replicate record")
    options: ReplicateOptions = from_settings(
        ReplicateOptions, {k: v for k, v in record.options.items() if v is not None}
    )
    return record, options


def stage_floors(run_dir: Path) -> list[Floor]:
    """Every stage that has a floor, in the run's order, with its parts (module doc)."""
    from study.replicate import record_config

    record, options = read_run(run_dir)
    weights = Weights.of(options.models.dpo)
    floors = []
    for stage in record.stages:
        name = stage.name
        if stage.status not in ("done", "skipped"):
            continue
        if name == "record":
            from probes.recording import planned_recording

            work = planned_recording(record_config(options)).weight_passes(weights.layers)
            floors.append(Floor(name, stage.seconds, work))
        elif name == "intervene":
            parts = intervene_work(options, weights)
            floors.append(Floor(name, stage.seconds, sum(parts.values(), start=TokenPasses())))
            floors += [Floor(f"  {kind}", stage.parts.get(kind), work) for kind, work in parts.items()]
        elif name == "evaluate":
            floors.append(Floor(name, stage.seconds, evaluate_work(options)))
        elif name == "localize":
            floors.append(Floor(name, stage.seconds, localize_work(options)))
    return floors


def intervene_work(options: ReplicateOptions, weights: Weights) -> dict[str, TokenPasses]:
    """The intervene stage's work per kind (module doc: generation, teacher-forced, coherence), from its plan and its
    report."""
    from access.stems import stem_batches, stem_tokens
    from interventions.coherence import JUDGE
    from interventions.passes import generators
    from interventions.plan import plan_ab
    from interventions.recipes import other
    from interventions.results import ABReport
    from study.replicate import ab_config

    config = ab_config(options)
    out = Path(str(config.out_dir))
    report = ABReport.load(out / "ab_report.json")
    plan = plan_ab(replace(config, out_dir=None))
    ids = generators(plan)[config.model].generator.prompts  # every model's: one tokenizer, the same rows
    prompts = stem_tokens(ids, stem_batches(ids, config.generation.batch_size))
    generation = sum(
        (_generation(plan, report, model, prompts, weights.layers) for model in report.baselines), start=TokenPasses()
    )
    edited = sorted({a.model for a in plan.arms}) if config.outcomes != "off" else []
    forced = {model: _forced(plan, report, config, out, model, weights.layers) for model in edited}
    coherence = TokenPasses()
    row_ids = [plan.row_ids[i] for i in plan.groups[config.target]]
    for model in sorted({arm.model for arm in report.arms if arm.coherence is not None}):
        if model in forced and other(model) == JUDGE and _shared_outcomes(plan, model):
            # the target's pass scores the guard's rows of the target
            guard, judged = _guard_rows(out, model, row_ids, config.responses == "greedy")
            coherence += _coherence(report, model, 0, guard)
            forced[model] += judged
        else:
            coherence += _coherence(report, model, prompts if config.outcomes == "off" else 0, TokenPasses())
    if config.outcomes == "off":
        return {GENERATION: generation, COHERENCE: coherence}
    return {GENERATION: generation, FORCED: sum(forced.values(), start=TokenPasses()), COHERENCE: coherence}


def _coherence(report: ABReport, model: str, prompts: int, scored: TokenPasses) -> TokenPasses:
    """The coherence guard's work for the arms on ``model`` (module doc): its baseline's generated tokens through the
    judge and its logits there, after ``prompts`` prompt tokens (0: the outcomes' target pass ran them), but the
    ``scored`` ones the outcomes' target pass ran for it."""
    base = report.baselines[model]
    heads = max(0.0, base.tokens - scored.heads)
    fed = max(0.0, base.tokens - base.rows - scored.blocks)  # a row's last token predicts nothing the guard reads
    return TokenPasses(blocks=prompts + fed, heads=heads)


def _shared_outcomes(plan: ABPlan, model: str) -> bool:
    """Whether the outcomes of the arms on ``model`` run on the shared engine (:class:`access.outcomes.Outcomes`'
    ``auto``), whose target pass scores the coherence guard's rows."""
    from access.stack import unsupported
    from interventions.recipes import other

    return unsupported(plan.models[model]) is None and unsupported(plan.models[other(model)]) is None


def _guard_rows(out: Path, model: str, row_ids: Sequence[int], greedy: bool) -> tuple[TokenPasses, TokenPasses]:
    """The guard's baseline rows of the target (``row_ids``, ``model``'s greedy responses as the run kept them:
    :func:`probes.outcome_rows.read_responses_file`) that the outcomes' target pass scores, every one; and the work
    they add to that pass, those it does not run for the KL (where the KL teacher-forces greedy responses, those that
    are the judge's own): their tokens after its prompts, and their logits."""
    from core.run_dir import InterventionDir
    from interventions.recipes import other
    from probes.outcome_rows import ResponseChecks, read_responses_file

    checks = ResponseChecks(row_ids=row_ids)
    mine, theirs = (
        read_responses_file(InterventionDir(out).responses(m), len(row_ids), checks) for m in (model, other(model))
    )
    added = [a for a, b in zip(mine, theirs, strict=True) if not (greedy and a == b)]
    return _response_work(mine), _response_work(added)


def _response_work(responses: Sequence[str | list[int]]) -> TokenPasses:
    """Responses teacher-forced after their prompts: every token but each row's last through the blocks, a logit per
    token."""
    tokens = sum(map(len, responses))
    return TokenPasses(blocks=float(max(0, tokens - len(responses))), heads=float(tokens))


def _fork(plan: ABPlan, model: str, edit_sets: Sequence[Sequence[Edit]], layers: int) -> int:
    """The lowest block any of ``edit_sets`` edits on ``model`` (``layers``: none)."""
    from access.edits import site_edits
    from access.shared_generation import first_edited_layer

    loaded = plan.pool.model(model)
    return min((first_edited_layer(site_edits(loaded, list(e)), layers) for e in edit_sets if e), default=layers)


def _generation(plan: ABPlan, report: ABReport, model: str, prompts: int, layers: int) -> TokenPasses:
    """One model's generation passes (module doc); ``prompts``: the prompt tokens one pass runs."""
    base = report.baselines[model]
    planned = {arm.title: arm for arm in plan.arms}
    arms = [(arm, planned[arm.name]) for arm in report.arms if arm.model == model and arm.name in planned]
    edit_sets = [p.edits for _, p in arms] + [e for a, p in arms for e in p.placebo_edits[: _placebo_generated(a)]]
    tokens = [base.tokens] + [a.tokens for a, _ in arms] + [base.tokens] * (len(edit_sets) - len(arms))
    fork = _fork(plan, model, edit_sets, layers)
    fed = [max(0, t - base.rows) for t in tokens]  # a row's last token is never fed back
    blocks = prompts * shared_passes(fork, len(tokens), layers) + max(fed) * fork / layers
    return TokenPasses(blocks=blocks + sum(fed) * (layers - fork) / layers, heads=float(sum(tokens)))


def _placebo_generated(arm: ArmResult) -> int:
    """The placebo sets generated for ``arm``'s compliance percentile (decide-first generates fewer)."""
    rank = next((c.placebo for c in arm.capabilities if c.target and c.placebo is not None), None)
    return 0 if rank is None else len(rank.deltas)


def _placebo_forced(arm: ArmResult) -> int:
    """The placebo sets teacher-forced for ``arm``'s continuous outcomes (decide-first forces fewer)."""
    rank = next((o.placebo for o in arm.outcomes if o.placebo is not None), None)
    return 0 if rank is None else len(rank.deltas)


def _forced(plan: ABPlan, report: ABReport, config: ABConfig, out: Path, model: str, layers: int) -> TokenPasses:
    """The teacher-forced outcome passes of the arms on ``model`` (module doc), on the sequences the run kept: each
    arm and the placebo sets it teacher-forced (decide-first forces fewer)."""
    from interventions.outcome_runs import inputs_for

    kept = str(out) if config.responses == "greedy" else None  # its greedy ids, as the run kept them
    inputs = inputs_for(plan, model, None, kept)
    seqs = [*inputs.rows, *inputs.reference, *(s for pair in inputs.pairs for s in pair)]
    prompts = {s.parts[0] for s in seqs}
    response = sum(s.n_response for s in seqs)
    tokens = sum(map(len, prompts)) + response
    forced = {arm.name: _placebo_forced(arm) for arm in report.arms}
    edit_sets = [
        e
        for arm in plan.arms
        if arm.model == model
        for e in (arm.edits, *arm.placebo_edits[: forced.get(arm.title, len(arm.placebo_edits))])
    ]
    arms = sum((layers - _fork(plan, model, [e], layers)) / layers for e in edit_sets)
    return TokenPasses(blocks=tokens * (2 + arms), heads=float(response * (2 + len(edit_sets))))


def evaluate_work(options: ReplicateOptions) -> TokenPasses:
    """The evaluate stage's work (module doc): every model's prompts and the responses ``eval.json`` holds."""
    from access.stems import stem_batches, stem_tokens
    from core.decoding import EVAL_GENERATION
    from core.models import load_tokenizer
    from study.replicate_estimate import evaluated, prompt_ids
    from study.stored import EvalRecord

    models, judged, _ = evaluated(options)
    ids = prompt_ids(options.models.sft, judged)
    prompts = stem_tokens(ids, stem_batches(ids, EVAL_GENERATION.batch_size))
    record = read_record(EvalRecord, RunDir(options.out_dir).eval_file, "evaluation")
    tokenizer = load_tokenizer(options.models.sft, "--sft")
    responses = [r for m in (record.base, record.sft, record.dpo) if m is not None for r in m.responses]
    tokens = [len(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in responses]
    fed = sum(max(0, t - 1) for t in tokens)
    return TokenPasses(blocks=float(models * prompts + fed), heads=float(sum(tokens)))


def localize_work(options: ReplicateOptions) -> TokenPasses:
    """The localize stage's work from its estimate's counts (module doc): high, its arms at their worst-case fork."""
    from localize.estimate import FIXED_PASSES
    from study.replicate import localize_config
    from study.replicate_estimate import localize_counts

    config = localize_config(options)
    counts = localize_counts(options, config)
    new = float(counts.new_tokens * len(counts.prompts))
    gradient = 2 + BACKWARD  # the target's forward, the model's, and its backward
    total = TokenPasses()
    for fractions in counts.fractions.values():
        total += TokenPasses(
            blocks=counts.tokens * (FIXED_PASSES + sum(fractions) + gradient), heads=new * (2 + len(fractions))
        )
        if config.responses == "greedy":
            total += TokenPasses(blocks=float(sum(counts.prompts)) + new, heads=new)
    return total


def table(floors: Sequence[Floor], weights: Weights, rate: float) -> list[str]:
    """The stages' lines: time, floor, ratio and verdict against :data:`RATIO_TARGET`."""
    lines = [f"{'stage':<18} {'time':>9} {'floor':>9} {'ratio':>7}  verdict (<= {RATIO_TARGET:g}x its floor)"]
    for floor in floors:
        floor_s = floor.work.flops(weights) / rate
        ratio = "—" if floor.seconds is None or not floor_s else f"{floor.seconds / floor_s:.1f}x"
        lines.append(
            f"{floor.stage:<18} {_clock(floor.seconds):>9} {_clock(floor_s):>9} {ratio:>7}  "
            f"{verdict(floor_s, floor.seconds)}"
        )
    return lines


def _clock(seconds: float | None) -> str:
    """:func:`study.replicate_estimate.minutes`, with two decimals under 10 s (a tiny model's floors)."""
    return f"{seconds:.2f} s" if seconds is not None and seconds < 10 else minutes(seconds)


def budgets(record: ReplicateRecord, options: ReplicateOptions) -> list[str]:
    """The issue's budgets, PASS/FAIL: the replicate without its localize stage, the default A/B, the localize stage."""
    seconds = record.seconds()
    names = [s.name for s in record.stages if s.name != "localize" and s.status in ("done", "skipped")]
    lines = []
    if all(n in seconds for n in names):
        spent = sum(seconds[n] for n in names)
        lines.append(_budget("probe replicate (every stage but localize)", spent, REPLICATE_BUDGET_S))
    else:
        lines.append("budget: probe replicate: a stage's time is missing from the record; no verdict")
    if "intervene" in seconds:
        default = default_intervene(options)
        if default:
            lines.append(
                _budget(
                    "the default probe intervene with outcomes (the intervene stage)",
                    seconds["intervene"],
                    INTERVENE_BUDGET_S,
                )
            )
        else:
            lines.append("budget: the default probe intervene: the intervene stage ran other settings; no verdict")
    if "localize" in seconds:
        lines.append(_budget("the localize stage (its own)", seconds["localize"], LOCALIZE_BUDGET_S))
    return lines


def _budget(what: str, seconds: float, budget: float) -> str:
    return f"budget: {what}: {minutes(seconds)} against {minutes(budget)}: {'PASS' if seconds <= budget else 'FAIL'}"


def default_intervene(options: ReplicateOptions) -> bool:
    """Whether the intervene stage ran the default ``probe intervene RUN -c multi_turn``: its settings but the output
    folder equal to the defaults', and the same rows (its ``--limit`` at least all the split has)."""
    from core.config_file import from_settings
    from interventions.config import ABConfig
    from study.replicate import ab_config
    from study.replicate_estimate import ab_rows

    ran = ab_config(options)
    default: ABConfig = from_settings(
        ABConfig, {"run_dir": options.out_dir, "capability": ran.capability, "out_dir": ran.out_dir}
    )
    same_rows = ab_rows(options, ran)[1] == ab_rows(options, default)[1]
    return same_rows and replace(ran, limit=None).to_dict() == replace(default, limit=None).to_dict()


def machine() -> str:
    """This machine in one line: its cores, its load, the date (a figure says where it came from)."""
    import os

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{os.cpu_count()} cores, load average {load}, {time.strftime('%Y-%m-%d %H:%M')}"

"""How long each of ``probe replicate``'s stages should take, estimated before anything runs.

From the DPO model's parameter count (its safetensors headers), the rows and their rendered prompt lengths, the new
tokens and the number of generation and teacher-forced passes (every arm: each dose and placebo set), at the pace
measured on the default pair on this project's 2-core CPU machine, scaled linearly by parameter count and by this
machine's pace against that one (:func:`core.pace.scale`). With ``--placebo-generation decide-first`` (the default)
the intervene stage's placebo sets run only as its arms' verdicts need them (:mod:`interventions.sequential`), which
no one knows before the arms run: its estimate is a range, from no placebo set (where every arm has 19 sets or more)
to every one. With ``--nproc`` N the record, intervene, localize and evaluate stages start N processes, each loading
the models (the loads share the cores or GPUs: :func:`launched`), and split the work over the GPUs, at most N; on CPU
cores the processes share the cores one process's threads already used, so the work takes as long as in one process.
It is an estimate: a loaded machine, early stops, the shared decoding engine and a GPU all move it, and ``probe
replicate`` prints the measured time beside it. The localize stage brings its own budget, from ``probe localize``'s
own arithmetic (:func:`localize_seconds`).

Example:
    >>> minutes(45), minutes(750)
    ('45 s', '12.5 min')
    >>> launched(10.0, 600.0, nproc=4, units=(2, "CPU cores")), launched(10.0, 600.0, nproc=4, units=(4, "GPUs"))
    (620.0, 160.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from core.pace import batched_seconds, generation_seconds, machine_pace, parameter_count, scale
from study.replicate_config import machine_units

if TYPE_CHECKING:
    from core.capabilities import Capability
    from core.schema import TestRow
    from interventions.config import ABConfig
    from localize.config import LocalizeConfig
    from probes.config import RecordConfig
    from study.replicate_config import ReplicateOptions

# Paces: core.pace (measured on the default pair, this project's 2-core machine).
# The quick stages, per capability, on the reference machine: the default pair's replicate of 2026-11-29 took 2 s to
# analyze, 12 s to explain and 2 s to report its 5 capabilities (docs/report.md); the models are loaded once for all
EXPLAIN_SECONDS = 2.4  # scaled by the model's size and the machine's pace
ANALYZE_SECONDS = 0.4  # scaled by the machine's pace
REPORT_SECONDS = 0.4  # scaled by the machine's pace
LAUNCH_SECONDS = 10.0  # a stage's start: imports and loading the models (the reference model; scaled as the work is)
SHARED_DISCOUNT = (
    0.6  # an arm decoded in shared batches costs about this share of a pass of its own (access.shared_generation)
)


def prompt_ids(sft_dir: Path, rows: Sequence[TestRow]) -> list[list[int]]:
    """Each row's rendered prompt (with the generation prompt), as token ids."""
    from core.chat import encode_conversations
    from core.models import load_tokenizer

    tokenizer = load_tokenizer(sft_dir, "--sft")
    return encode_conversations(tokenizer, [r.question for r in rows], add_generation_prompt=True)


def prompt_lengths(sft_dir: Path, rows: Sequence[TestRow]) -> list[int]:
    """Each row's rendered prompt length in tokens (with the generation prompt)."""
    return [len(ids) for ids in prompt_ids(sft_dir, rows)]


def ab_passes(config: ABConfig) -> tuple[float, float]:
    """Generation passes of an A/B config weighted by cost, at least and at most: baselines, arms and the placebo arms
    that run (:func:`interventions.plan.pass_count`; :func:`interventions.plan.placebo_passes`: with decide-first an
    arm's placebo sets generate only as its verdict needs, which no one knows before the arm runs)."""
    from interventions.plan import pass_count, placebo_passes
    from interventions.recipes import RECIPES

    least = most = float(pass_count(config).baselines)
    for name in config.edit.edits:
        passes, cost = pass_count(config, [name]), RECIPES[name].pass_cost
        weight = SHARED_DISCOUNT if cost is None else cost
        low, high = placebo_passes(config, passes)
        least, most = least + (passes.arms + low) * weight, most + (passes.arms + high) * weight
    return least, most


def ab_rows(
    options: ReplicateOptions, ab_config: ABConfig
) -> tuple[list[TestRow], list[int], dict[Capability, list[int]]]:
    """The rows the A/B will really generate: the split's rows, the indices chosen (``--limit`` of the target
    capability, or all it has when fewer) and per capability its indices into them
    (:func:`interventions.plan.select_rows`)."""
    from core.rows import read_test_rows
    from interventions.plan import select_rows

    # the A/B and the evaluation read the same rows: the held-out split by default, or --data with --eval-split test
    rows = read_test_rows(options.eval_file())
    unique, chosen = select_rows(rows, ab_config)
    return rows, unique, chosen


def estimate(
    options: ReplicateOptions, ab_config: ABConfig, record_config: RecordConfig
) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds per stage (module doc: an estimate at the default pair's measured pace, scaled), at least; and at most
    for the stages whose work depends on what they find (the intervene stage's placebo sets, run as the verdicts
    need them: :mod:`interventions.sequential`). The record stage's is the recording's own
    (:func:`probes.recording.cpu_estimate`: padded batches and the local basis counted)."""
    from probes.recording import cpu_estimate
    from study.replicate_checks import expected_rows

    parameters = parameter_count(options.models.dpo)
    here = scale(parameters)  # this model on this machine, against the paces' reference
    pace = machine_pace()
    capabilities = len(expected_rows(options.data_file))

    def per_row(new: int, prompt: float) -> float:
        return generation_seconds(prompt, new, parameters=parameters)

    rows, unique, _ = ab_rows(options, ab_config)
    ab_prompt = _mean(prompt_lengths(options.models.sft, [rows[i] for i in unique]))
    models, judged, new_tokens = evaluated(options)
    judging = evaluation_seconds(options.models.sft, judged, new_tokens, parameters)

    generating = len(unique) * per_row(ab_config.generation.max_new_tokens, ab_prompt)
    intervene = [weight * generating for weight in ab_passes(ab_config)]
    if ab_config.outcomes != "off":
        forced = _outcome_seconds(ab_config, len(unique), ab_prompt, parameters)
        intervene = [seconds + outcomes for seconds, outcomes in zip(intervene, forced, strict=True)]
    units = machine_units(options.device) if options.nproc > 1 else (1, "CPU cores")
    least, most = (launched(LAUNCH_SECONDS * here, seconds, options.nproc, units) for seconds in intervene)
    return {
        "record": launched(LAUNCH_SECONDS * here, cpu_estimate(record_config), options.nproc, units),
        "analyze": ANALYZE_SECONDS * pace * capabilities,
        "explain": EXPLAIN_SECONDS * here * capabilities,
        "intervene": least,
        "evaluate": launched(LAUNCH_SECONDS * here, models * judging, options.nproc, units),
        "report": REPORT_SECONDS * pace * capabilities,
    }, {"intervene": most}


def evaluation_seconds(sft_dir: Path, judged: Sequence[TestRow], new_tokens: int, parameters: float) -> float:
    """One model's evaluation of ``judged``: its prompts in the evaluation's batches, each decoding to ``new_tokens``
    (:func:`core.pace.batched_seconds`)."""
    from core.decoding import EVAL_GENERATION
    from training.evaluate import batch_plan

    lengths = prompt_lengths(sft_dir, judged)
    batches = [[lengths[i] for i in batch] for batch in batch_plan(lengths, EVAL_GENERATION.batch_size)]
    return batched_seconds(batches, new_tokens, parameters=parameters)


def evaluated(options: ReplicateOptions) -> tuple[int, list[TestRow], int]:
    """The evaluate stage's models (base when given, SFT, DPO), the rows it judges (the split's, spread over tasks:
    :func:`training.evaluate.select_rows`) and its new-token limit."""
    from core.decoding import EVAL_GENERATION
    from core.rows import read_test_rows
    from training.evaluate import select_rows

    judged = select_rows(read_test_rows(options.eval_file()), options.eval_rows)
    return 3 if options.models.base else 2, judged, options.max_new_tokens or EVAL_GENERATION.max_new_tokens


@dataclass(frozen=True)
class LocalizeCounts:
    """What the localize stage's estimate counts before the recording exists (:func:`localize_counts`): per direction
    its arms' fork fractions, the rows' prompt lengths, the new tokens of its greedy responses (at the limit), the
    model's blocks."""

    fractions: dict[str, list[float]]
    prompts: list[int]
    new_tokens: int
    n_layers: int

    @property
    def tokens(self) -> float:
        """One direction's teacher-forced tokens: every row's prompt and response."""
        return float(sum(self.prompts) + self.new_tokens * len(self.prompts))


def localize_counts(options: ReplicateOptions, config: LocalizeConfig) -> LocalizeCounts:
    """The localize stage's passes and tokens (:func:`localize_seconds`)."""
    from access.pair import check_pair_configs
    from analysis.window import default_window
    from core.rows import group_by_capability, read_test_rows
    from localize.estimate import fork_fraction
    from localize.plan import interleaved
    from localize.profile import profile_arms

    n_layers = check_pair_configs(options.models.sft, options.models.dpo).n_layers
    rows = read_test_rows(options.eval_file())  # the rows the localize stage reads: the split the A/B generates
    members = group_by_capability(rows, [config.target])[config.target]
    prompts = prompt_lengths(
        options.models.sft, [rows[i] for i in interleaved([(i, r.task) for i, r in members], config.limit)]
    )
    fractions = [1.0] * (len(config.ranking_list) * len(config.grid) + config.placebo * len(config.placebo_points))
    arms = profile_arms(n_layers, config.profile_width, default_window(n_layers)) if config.profile else []
    fractions += [fork_fraction([(layer, 0) for layer in arm.layers], n_layers) for arm in arms]
    return LocalizeCounts(dict.fromkeys(config.direction_list, fractions), prompts, config.max_new_tokens, n_layers)


def localize_seconds(options: ReplicateOptions, config: LocalizeConfig) -> float:
    """The localize stage's own estimate, from ``probe localize``'s (:func:`localize.estimate.estimate`) before the
    recording exists: its rows' prompts and responses, every arm's fork layer (a ranking's sets and the random sets
    taken to reach layer 0, the worst case; the profile's from its layers), the gradient pass and the responses. The
    stage says its own, sharper estimate when it starts."""
    from localize.estimate import estimate as localize_estimate

    counts = localize_counts(options, config)
    parameters = parameter_count(options.models.dpo)
    guess = localize_estimate(
        counts.fractions,
        counts.tokens,
        float(sum(counts.prompts)),
        float(counts.new_tokens * len(counts.prompts)),
        parameters=parameters,
        gradient=True,
        generate=config.responses == "greedy",
    )
    units = machine_units(options.device) if options.nproc > 1 else (1, "CPU cores")
    return launched(LAUNCH_SECONDS * scale(parameters), guess.total, options.nproc, units)


def launched(start: float, work: float, nproc: int, units: tuple[int, str]) -> float:
    """Seconds of a stage run by ``nproc`` processes on ``units`` (count, kind: :func:`machine_units`): each process
    starts and loads the models (``start``), at most one per unit at a time; the ``work`` is split over the GPUs, at
    most ``nproc``, and on CPU cores takes as long as in one process (module doc)."""
    count, kind = max(units[0], 1), units[1]
    parallel = min(nproc, count) if kind == "GPUs" else 1
    return start * math.ceil(nproc / count) + work / parallel


def _mean(values: Sequence[int]) -> float:
    return sum(values) / max(1, len(values))


def _outcome_seconds(config: ABConfig, rows: int, mean_prompt: float, parameters: float) -> tuple[float, float]:
    """The teacher-forced passes of the outcomes, at least and at most (:func:`interventions.outcomes.forced_passes`:
    every arm, the placebo sets that run, then the target and the unedited model once); each over every row's response
    and reference sequence, and the DPO pairs, for a model of ``parameters``."""
    from interventions.outcomes import forced_passes, outcome_seconds
    from interventions.plan import pass_count, placebo_passes

    passes = pass_count(config)
    new_tokens = config.generation.max_new_tokens
    least, most = (
        outcome_seconds(n, rows, mean_prompt, new_tokens, config.outcome_pairs, parameters)
        for n in forced_passes(passes.arms, placebo_passes(config, passes))
    )
    return least, most


def minutes(seconds: float | None) -> str:
    """'45 s', '12.5 min'."""
    if seconds is None:
        return "—"
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"

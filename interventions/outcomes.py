"""The continuous outcomes of every A/B arm: what :mod:`access.outcomes` teacher-forces, for which rows and responses.

For an arm on one model of the pair the *target* is the other model. Its rows are the target capability's rows,
each prompt followed by fixed response tokens (``--responses``, :mod:`probes.outcome_rows`; by default the target's
own greedy responses from its baseline pass), teacher-forced through the edited model once per arm and once per
placebo set run (the arm's own placebo edits, :mod:`interventions.sequential`). Here: those teacher-forced inputs
(:func:`outcome_inputs`), and the time they take (:func:`forced_passes`, :func:`outcome_seconds`);
:mod:`interventions.outcome_runs` measures them for every arm, places each among its placebo sets' and judges it.

An A/B run keeps each model's greedy token ids in ``responses_<model>.jsonl`` (:class:`core.run_dir.InterventionDir`),
so that ``--outcomes only --responses <that run's folder>`` reuses them without generating. Each line says which data
row it answers and who wrote it (the model's and the tokenizer's fingerprints, :class:`core.provenance.MadeBy`); a
later run reads them back only for the same rows, the same model and the same tokenizer, its ids inside the
vocabulary and each prompt plus response inside the model's context (:class:`probes.outcome_rows.ResponseChecks`,
:func:`response_checks`): anything else is one ``error:`` line naming the file and line, before any forward.

Example:
    >>> InterventionDir("runs/x").responses("sft").name   # the SFT model's greedy ids, as --responses reads them back
    'responses_sft.jsonl'
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from access.outcomes import Forced, Outcomes
from core.errors import ProbeError
from core.pace import OUTCOME_TOKEN_SECONDS, scale
from core.run_dir import DataDir, InterventionDir

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from core.schema import TestRow
    from interventions.config import ABConfig
    from probes.outcome_rows import ResponseChecks


def forced_passes(arms: int, placebo: tuple[int, int]) -> tuple[int, int]:
    """The outcomes' teacher-forced passes on one run, at least and at most: every arm, the placebo sets that run (at
    least, at most: :func:`interventions.sequential.placebo_runs`), then the target and the unedited model once.

    >>> forced_passes(2, (0, 40))
    (4, 44)
    """
    return arms + placebo[0] + 2, arms + placebo[1] + 2


def outcome_seconds(
    passes: int, rows: int, mean_prompt: float, new_tokens: int, pairs: int, parameters: float
) -> float:
    """Estimated seconds of ``passes`` outcome passes over ``rows`` rows (prompts of ``mean_prompt`` tokens, responses
    up to ``new_tokens``) and ``pairs`` DPO pairs, for a model of ``parameters`` parameters (scaled linearly), on this
    machine (:func:`core.pace.scale`).

    >>> from core.pace import REFERENCE_PARAMETERS, machine_pace
    >>> round(outcome_seconds(24, 160, 150.0, 32, 16, REFERENCE_PARAMETERS) / OUTCOME_TOKEN_SECONDS / machine_pace())
    903936
    """
    tokens = (rows + pairs) * mean_prompt + 2 * (rows + pairs) * new_tokens
    return passes * tokens * OUTCOME_TOKEN_SECONDS * scale(parameters)


@dataclass
class OutcomeInputs:
    """What the outcomes of one model's arms teacher-force: the KL rows, the reference rows, the DPO pairs."""

    rows: list[Forced]
    reference: list[Forced]
    pairs: list[tuple[Forced, Forced]]
    responses: str  # for reports: greedy, reference, chosen, rejected, or a path


def default_dpo_file(config: ABConfig, data_file: Path) -> Path | None:
    """``--dpo-file``, else ``dpo.jsonl`` beside the test rows (None where there is none)."""
    if config.dpo_file is not None:
        path = Path(config.dpo_file)
        if not path.is_file():
            raise ProbeError(f"--dpo-file {path}: file not found")
        return path
    beside = DataDir(data_file.parent).dpo
    return beside if beside.is_file() else None


def earlier_responses(
    responses: str, target: str, row_ids: Sequence[int], checks: ResponseChecks | None = None
) -> Path | None:
    """For ``--responses DIR`` (an earlier ``probe intervene`` folder, or its generations file): the file of
    ``target``'s greedy token ids it kept, checked to hold the same rows (and to ``checks``); None for any other
    ``--responses``."""
    from dataclasses import replace

    from probes.outcome_rows import ResponseChecks, read_responses

    path = Path(responses)
    folder = path.parent if path.name == InterventionDir(".").generations.name else path
    if not folder.is_dir():
        return None
    files = InterventionDir(folder)
    kept = files.responses(target)
    if not kept.is_file():
        raise ProbeError(
            f"--responses {responses}: {kept} not found (that run kept no greedy responses of the {target} model; "
            "runs before the continuous outcomes, or with --outcomes off, keep none)"
        )
    read_responses(kept, len(row_ids), replace(checks or ResponseChecks(), row_ids=list(row_ids)))
    return kept


def response_checks(
    tokenizer: PreTrainedTokenizerBase,
    row_ids: Sequence[int],
    target: str,
    model_dirs: Mapping[str, Path] | None,
) -> ResponseChecks:
    """What the outcomes' sequences are held to (:class:`probes.outcome_rows.ResponseChecks`): the rows, and with
    the pair's directories the target's fingerprints, the smallest vocabulary and context of the pair's models
    (both run every sequence); without them the tokenizer's vocabulary only."""
    from access.pair import read_config
    from core.chat import context_length
    from core.provenance import MadeBy
    from probes.outcome_rows import ResponseChecks

    if not model_dirs:
        return ResponseChecks(row_ids=list(row_ids), vocab_size=len(tokenizer))
    configs = [read_config(d) for d in model_dirs.values()]
    contexts = [c for c in map(context_length, configs) if c is not None]
    vocabularies = [int(v) for c in configs if (v := getattr(c, "vocab_size", None))]
    return ResponseChecks(
        row_ids=list(row_ids),
        made_by=MadeBy.of(model_dirs[target], tokenizer) if target in model_dirs else None,
        whose=f"this run's {target} model",
        vocab_size=min(vocabularies) if vocabularies else len(tokenizer),
        context=min(contexts) if contexts else None,
    )


@dataclass
class Responses:
    """A target's teacher-forced rows as ``--responses`` names them, the checks they passed, and the kept file
    they came from (an earlier run's, or None)."""

    rows: list[Forced]
    checks: ResponseChecks
    kept: Path | None


def checked_responses(
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[TestRow],
    row_ids: Sequence[int],
    responses: str,
    target: str,
    data_file: Path,
    model_dirs: Mapping[str, Path] | None,
    *,
    greedy: Sequence[Sequence[int]] | None = None,
    dpo_file: Path | None = None,
) -> Responses:
    """``responses`` (a name, a file or an earlier run's folder) for ``target`` as rows, each held to
    :func:`response_checks` before any forward: the one reader of ``--responses`` for ``probe intervene``'s plan and
    outcomes and for ``probe localize``."""
    from probes.outcome_rows import outcome_rows

    checks = response_checks(tokenizer, row_ids, target, model_dirs)
    kept = earlier_responses(responses, target, row_ids, checks)
    answers = None if greedy is None else [list(ids) for ids in greedy]
    forced = outcome_rows(
        tokenizer, rows, str(kept or responses), data_file=data_file, greedy=answers, dpo_file=dpo_file, checks=checks
    )
    return Responses(forced, checks, kept)


def outcome_inputs(
    config: ABConfig,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[TestRow],
    row_ids: Sequence[int],
    data_file: Path,
    target: str,
    greedy: Sequence[Sequence[int]] | None,
    model_dirs: Mapping[str, Path] | None = None,
) -> OutcomeInputs:
    """The teacher-forced sequences of the arms whose target is ``target`` (``greedy``: its baseline token ids,
    :func:`greedy_ids`), each checked (:func:`response_checks`; ``model_dirs``: the pair's directories by model)
    before any forward."""
    from probes.outcome_rows import capability_pairs, outcome_rows

    dpo_file = default_dpo_file(config, data_file)
    given = checked_responses(
        tokenizer, rows, row_ids, config.responses, target, data_file, model_dirs, greedy=greedy, dpo_file=dpo_file
    )
    forced_rows, checks, kept = given.rows, given.checks, given.kept
    reference = (
        forced_rows
        if config.responses == "reference"
        else outcome_rows(tokenizer, rows, "reference", data_file=data_file, checks=checks)
    )
    pairs = (
        capability_pairs(
            tokenizer,
            dpo_file,
            config.capability,
            limit=config.outcome_pairs,
            seed=config.seed,
            context=checks.context,
        )
        if dpo_file is not None and config.outcome_pairs
        else []
    )
    what = f"greedy ({target} model's, kept by {kept.parent})" if kept is not None else config.responses
    if config.responses == "greedy":
        what = f"greedy ({target} model's baseline)"
    return OutcomeInputs(forced_rows, reference, pairs, what)


def greedy_ids(ids: Sequence[Sequence[int]], tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    """A model's greedy responses as the outcomes teacher-force them: its token ids, and for a response that stopped
    at once (no token before the stop token) the tokenizer's EOS, the token that ended it.

    >>> class T: eos_token_id = 2
    >>> greedy_ids([[5, 6], []], T())
    [[5, 6], [2]]
    """
    eos = tokenizer.eos_token_id
    return [list(i) if i else [int(eos)] for i in ids]


def write_greedy(
    folder: Path,
    row_ids: Sequence[int],
    baselines: dict[str, Sequence[Sequence[int]]],
    tokenizer: PreTrainedTokenizerBase,
    model_dirs: Mapping[str, Path] | None = None,
) -> None:
    """Keep each model's greedy token ids of the target rows (``row_ids``, their lines in the data file) in
    ``folder`` (``responses_<model>.jsonl``, one ``{"row", "token_ids"}`` per row, as ``--responses FILE`` reads
    them) for a later ``--outcomes only``; with ``model_dirs`` each line also carries who wrote it
    (:class:`core.provenance.MadeBy`)."""
    from core.atomic import write_atomic
    from core.provenance import MadeBy, tokenizer_sha256, weights_sha256

    tokens = tokenizer_sha256(tokenizer)
    for model, ids in baselines.items():
        directory = (model_dirs or {}).get(model)
        made_by = MadeBy(weights_sha256(directory), tokens).fields() if directory is not None else {}
        lines = [
            json.dumps({"row": int(row), "token_ids": answer, **made_by})
            for row, answer in zip(row_ids, greedy_ids(ids, tokenizer), strict=True)
        ]
        write_atomic(InterventionDir(folder).responses(model), "".join(line + "\n" for line in lines))


def outcomes_for(
    model: PreTrainedModel, target: PreTrainedModel, inputs: OutcomeInputs, judged: Sequence[Forced] = ()
) -> Outcomes:
    """The :class:`access.outcomes.Outcomes` of edits to ``model`` against ``target`` (``judged``: sequences the
    target's pass scores too)."""
    return Outcomes(
        model,
        target,
        inputs.rows,
        reference=inputs.reference,
        pairs=inputs.pairs,
        responses=inputs.responses,
        judged=judged,
    )
